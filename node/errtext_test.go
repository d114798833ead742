package node

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tierstore/tierstore/client"
	"github.com/tierstore/tierstore/internal/errcode"
)

// An SSD replica whose bytes fail their checksum (a real tier, a byte of
// the bucket file flipped), read through the peer service: the client's
// error says CHECKSUM_MISMATCH with each layer's words once, not the chain
// "checksum mismatch: tier: checksum mismatch: bucket: object checksum
// mismatch".
func TestChecksumErrorTextHasNoRepeatedChain(t *testing.T) {
	m := newMaster(t, testMasterConfig())
	cfg := testNodeConfig("127.0.0.1:0")
	cfg.EnableOffload, cfg.SSDDir, cfg.Backend, cfg.DirectIO = true, t.TempDir(), "pwrite", false
	n, err := Start(context.Background(), cfg, m)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	c := newTestClient(t, client.Config{MasterAddr: serveMaster(t, m)})
	ctx := context.Background()
	if err := c.Put(ctx, "k", rnd(5000)); err != nil {
		t.Fatal(err)
	}
	if n.OffloadNow() != 1 {
		t.Fatal("not offloaded")
	}
	if res, err := c.EvictDRAM(ctx, []string{"k"}, false); err != nil || res.Dropped != 1 {
		t.Fatalf("evict: %+v %v", res, err)
	}
	flipped := 0
	err = filepath.WalkDir(cfg.SSDDir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || filepath.Base(filepath.Dir(p)) != "buckets" {
			return err
		}
		f, err := os.OpenFile(p, os.O_RDWR, 0)
		if err != nil {
			return err
		}
		defer f.Close()
		b := make([]byte, 1)
		if _, err := f.ReadAt(b, 4096+100); err != nil { // inside the object's bytes
			return err
		}
		b[0] ^= 0xff
		_, err = f.WriteAt(b, 4096+100)
		flipped++
		return err
	})
	if err != nil || flipped != 1 {
		t.Fatalf("flipping a byte of the bucket file: %d files, %v", flipped, err)
	}
	_, err = c.Get(ctx, "k")
	if !errors.Is(err, errcode.ErrChecksumMismatch) {
		t.Fatalf("get: %v", err)
	}
	msg := err.Error()
	if strings.Contains(msg, "checksum mismatch: tier: checksum mismatch") || strings.Count(msg, "checksum mismatch") > 2 {
		t.Fatalf("repeated error chain: %s", msg)
	}
	t.Log(msg)
}
