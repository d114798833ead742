package node

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// ssdLockFile is the file in --ssd_dir that a running node holds locked
// (flock, exclusive), with its pid inside.
const ssdLockFile = "NODE_LOCK"

// lockSSDDir takes the node's lock on dir, so that a second node on the
// same directory stops at start-up with a clear error (ErrSSDDirInUse,
// naming the directory and the holder's pid) instead of the index's
// "resource temporarily unavailable". The lock goes with the process (also
// on SIGKILL); release closes it.
func lockSSDDir(dir string) (release func() error, err error) {
	path := filepath.Join(dir, ssdLockFile)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("node: --ssd_dir %s: opening %s: %w", dir, ssdLockFile, err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		holder := ""
		if b, rerr := os.ReadFile(path); rerr == nil {
			if pid, perr := strconv.Atoi(strings.TrimSpace(string(b))); perr == nil {
				holder = fmt.Sprintf(" (pid %d)", pid)
			}
		}
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, fmt.Errorf("%w: --ssd_dir %s is in use by another node%s", ErrSSDDirInUse, dir, holder)
		}
		return nil, fmt.Errorf("node: --ssd_dir %s: locking %s: %w", dir, ssdLockFile, err)
	}
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return f.Close, nil
}
