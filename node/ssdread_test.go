package node

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tierstore/tierstore/backend/faulty"
	"github.com/tierstore/tierstore/backend/uring"
	"github.com/tierstore/tierstore/client"
	"github.com/tierstore/tierstore/internal/errcode"
	"github.com/tierstore/tierstore/master"
	"github.com/tierstore/tierstore/tier"
)

// ssdNode starts a node whose SSD tier is a real engine (pebble, bucket
// files, io_uring with O_DIRECT) on a backend wrapped for fault injection,
// and a remote and an in-process client.
func ssdNode(t *testing.T) (*Node, *faulty.Backend, *master.Service, *client.Client, *client.Client) {
	t.Helper()
	dir := t.TempDir()
	be, err := uring.Open(filepath.Join(dir, "buckets"), uring.Options{Direct: true, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	fb := faulty.Wrap(be)
	eng, err := tier.Open(dir, tier.Options{Backend: fb, Logger: quiet})
	if err != nil {
		be.Close()
		t.Fatal(err)
	}
	m := newMaster(t, testMasterConfig())
	n := startTestNode(t, m, "127.0.0.1:0", eng)
	remote := newTestClient(t, client.Config{MasterAddr: serveMaster(t, m)})
	local := newTestClient(t, client.Config{Master: m, LocalNode: n})
	return n, fb, m, remote, local
}

// toSSD puts vals under keys and leaves them on SSD only.
func toSSD(t *testing.T, n *Node, c *client.Client, keys []string, vals [][]byte) {
	t.Helper()
	ctx := context.Background()
	for i, k := range keys {
		if err := c.Put(ctx, k, vals[i]); err != nil {
			t.Fatal(err)
		}
	}
	if got := n.OffloadNow(); got != len(keys) {
		t.Fatalf("offloaded %d of %d", got, len(keys))
	}
	if d, err := c.EvictDRAM(ctx, keys, false); err != nil || d.Dropped != int64(len(keys)) {
		t.Fatalf("evict: %+v %v", d, err)
	}
}

// SSD hits stream from a real tier into remote and in-process callers'
// buffers, whole pieces and a short last one, objects smaller than a
// block; the piece buffers are reused, not made per read.
func TestSSDReadRealTier(t *testing.T) {
	n, _, _, remote, local := ssdNode(t)
	ctx := context.Background()
	sizes := []int{3000, ssdChunk, 4*ssdChunk + 17, 9 * ssdChunk}
	var keys []string
	var vals [][]byte
	for _, sz := range sizes {
		keys, vals = append(keys, "s"+strings.Repeat("x", len(keys))), append(vals, rnd(sz))
	}
	toSSD(t, n, local, keys, vals)
	read := func(c *client.Client) {
		t.Helper()
		for i, k := range keys {
			buf, guard := guardedBuf(t, len(vals[i]))
			if got, err := c.GetInto(ctx, k, buf); err != nil || got != len(vals[i]) || !bytes.Equal(buf, vals[i]) {
				t.Fatalf("%s (%d bytes): %d %v", k, len(vals[i]), got, err)
			}
			guard()
		}
	}
	read(remote)
	read(local)
	made := chunkPool.made.Load()
	for range 5 {
		read(remote)
		read(local)
	}
	if got := chunkPool.made.Load(); got != made {
		t.Fatalf("%d piece buffers made for sequential reads after the first round", got-made)
	}
	if rs := remote.ReadStats(); rs.RemoteSSD != int64(6*len(keys)) || rs.ChecksumFailures != 0 {
		t.Fatalf("remote read stats %+v", rs)
	}
	if rs := local.ReadStats(); rs.LocalSSD != int64(6*len(keys)) {
		t.Fatalf("local read stats %+v", rs)
	}
	if st := n.Stats().Tier; st.ObjectsLoaded != int64(12*len(keys)) || st.ChecksumErrors != 0 {
		t.Fatalf("tier stats: %d loaded, %d checksum errors", st.ObjectsLoaded, st.ChecksumErrors)
	}
}

// A piece that fails mid-stream: the remote reader gets a clear transfer
// error with nothing beyond its buffer written, the in-process reader an
// error; the object stays (a failed read is not corruption), the stream
// gave its bucket back (the node closes), and the next read succeeds.
func TestSSDReadMidStreamFailure(t *testing.T) {
	n, fb, _, remote, local := ssdNode(t)
	ctx := context.Background()
	val := rnd(4*ssdChunk + 17) // 5 pieces
	toSSD(t, n, local, []string{"m"}, [][]byte{val})

	// Pieces 0-3 are read at once; piece 4 only once piece 0 has gone to
	// the socket: the 5th read is mid-stream.
	fb.FailNth(faulty.OpRead, 5, nil)
	buf, guard := guardedBuf(t, len(val))
	_, err := remote.GetInto(ctx, "m", buf)
	if !errors.Is(err, errcode.ErrTransferFail) || !strings.Contains(err.Error(), "SSD read") {
		t.Fatalf("remote read with a failing piece: %v", err)
	}
	guard()
	fb.Clear()

	fb.FailNth(faulty.OpRead, 3, nil)
	if _, err := local.GetInto(ctx, "m", buf); err == nil || !strings.Contains(err.Error(), "injected") {
		t.Fatalf("local read with a failing piece: %v", err)
	}
	guard()
	fb.Clear()

	if st := n.Stats().Tier; st.Objects != 1 || st.ChecksumErrors != 0 {
		t.Fatalf("after failed reads: %d objects, %d checksum errors", st.Objects, st.ChecksumErrors)
	}
	for _, c := range []*client.Client{remote, local} {
		if got, err := c.GetInto(ctx, "m", buf); err != nil || got != len(val) || !bytes.Equal(buf, val) {
			t.Fatalf("read after the failure: %d %v", got, err)
		}
	}
	closed := make(chan error, 1)
	go func() { closed <- n.Close() }()
	select {
	case err := <-closed:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Close hung: a failed stream kept its bucket pinned")
	}
}

// corruptOnDisk flips a byte of val's copy in the node's bucket files.
func corruptOnDisk(t *testing.T, dir string, val []byte) {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(dir, "buckets", "*.bucket"))
	for _, name := range files {
		b, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		i := bytes.Index(b, val[:256])
		if i < 0 {
			continue
		}
		f, err := os.OpenFile(name, os.O_WRONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if _, err := f.WriteAt([]byte{b[i+len(val)/2] ^ 0x40}, int64(i+len(val)/2)); err != nil {
			t.Fatal(err)
		}
		if err := f.Sync(); err != nil {
			t.Fatal(err)
		}
		return
	}
	t.Fatal("value not found in any bucket file")
}

// A corrupt SSD copy (real bucket file damaged on disk) is never returned:
// a remote reader's check fails, its verified retry makes the tier find
// and drop the entry; an in-process read finds it on the node. Each entry
// is dropped once (a second read finds nothing to check).
func TestSSDReadCorruptCopyDroppedOnce(t *testing.T) {
	ctx := context.Background()
	m := newMaster(t, testMasterConfig())
	cfg := testNodeConfig("127.0.0.1:0")
	cfg.EnableOffload, cfg.SSDDir, cfg.Backend, cfg.DirectIO = true, t.TempDir(), "uring", true
	n, err := Start(ctx, cfg, m)
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	remote := newTestClient(t, client.Config{MasterAddr: serveMaster(t, m)})
	local := newTestClient(t, client.Config{Master: m, LocalNode: n})
	a, b := rnd(3*ssdChunk+100), rnd(2*ssdChunk)
	toSSD(t, n, local, []string{"a", "b"}, [][]byte{a, b})
	corruptOnDisk(t, cfg.SSDDir, a)
	corruptOnDisk(t, cfg.SSDDir, b)

	for _, tc := range []struct {
		c    *client.Client
		key  string
		size int
	}{{remote, "a", len(a)}, {local, "b", len(b)}} {
		buf := make([]byte, tc.size)
		before := n.Stats().Tier.ChecksumErrors
		for try := range 2 {
			_, err := tc.c.GetInto(ctx, tc.key, buf)
			if err == nil {
				t.Fatalf("%s: a corrupt copy was returned (try %d)", tc.key, try)
			}
			if try == 0 && !errors.Is(err, errcode.ErrChecksumMismatch) {
				t.Fatalf("%s: %v", tc.key, err)
			}
		}
		if got := n.Stats().Tier.ChecksumErrors - before; got != 1 {
			t.Fatalf("%s: %d checksum errors, want 1", tc.key, got)
		}
		if ok, err := n.tier.Exists([]byte(tc.key)); ok || err != nil {
			t.Fatalf("%s: the corrupt entry is still indexed (%v)", tc.key, err)
		}
	}
	if st := n.Stats().Tier; st.Objects != 0 {
		t.Fatalf("%d objects left", st.Objects)
	}
}
