package node

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// nodeIDFile is the file in --ssd_dir that holds the node's stable id.
const nodeIDFile = "NODE_ID"

// maxNodeIDLen bounds the id read back from nodeIDFile.
const maxNodeIDLen = 256

// stableNodeID returns the node id kept in dir/NODE_ID, creating the file
// with fresh (a new id) when it does not exist. The id names the SSD
// contents: a node restarted on the same directory comes back under the
// same id, so the master retires its previous incarnation at once (the new
// MountRequest.Incarnation differs) and the re-registration refreshes its
// SSD replicas. The file is written atomically (temporary file, fsync,
// rename, fsync of the directory): a crash leaves either no file or the
// whole id.
func stableNodeID(dir, fresh string) (string, error) {
	path := filepath.Join(dir, nodeIDFile)
	b, err := os.ReadFile(path)
	switch {
	case err == nil:
		id := string(bytes.TrimSpace(b))
		if id == "" || len(id) > maxNodeIDLen || bytes.ContainsAny([]byte(id), " \t\r\n\x00") {
			return "", fmt.Errorf("%w: %s holds no valid node id (%d bytes); remove it to get a new id", ErrBadNodeID, path, len(b))
		}
		return id, nil
	case !errors.Is(err, fs.ErrNotExist):
		return "", fmt.Errorf("node: reading the node id in %s: %w", path, err)
	}
	if err := writeFileAtomic(dir, nodeIDFile, []byte(fresh+"\n")); err != nil {
		return "", fmt.Errorf("node: writing the node id to %s: %w", path, err)
	}
	return fresh, nil
}

// writeFileAtomic writes data to dir/name through a temporary file that is
// synced, renamed over name, and made durable by syncing dir.
func writeFileAtomic(dir, name string, data []byte) (err error) {
	f, err := os.CreateTemp(dir, "."+name+".tmp-*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	defer func() {
		if err != nil {
			os.Remove(tmp)
		}
	}()
	if _, err = f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err = f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err = f.Close(); err != nil {
		return err
	}
	if err = os.Rename(tmp, filepath.Join(dir, name)); err != nil {
		return err
	}
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	if err = d.Sync(); err != nil {
		d.Close()
		return err
	}
	return d.Close()
}
