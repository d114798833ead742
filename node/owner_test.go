package node

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/tierstore/tierstore/internal/crc32c"
	"github.com/tierstore/tierstore/internal/errcode"
	"github.com/tierstore/tierstore/internal/wire"
)

// Issue 9 item 1 (invariant 8), over the real data plane and the
// in-process Node.WriteRange: a late write of an old put, after a newer put
// wrote an overlapping range, is refused and the newer bytes stay intact;
// an untokened write is refused once the node has seen tokens.
func TestLateWriteOfOldPutRefused(t *testing.T) {
	m := newMaster(t, testMasterConfig())
	n := startTestNode(t, m, "127.0.0.1:0", nil)
	ctx := context.Background()
	p, err := wire.DialData(ctx, n.Endpoint(), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	seg := n.SegmentName()
	newer := rnd(3 * writeChunk / 2)
	if err := p.Write(wire.WithObject(ctx, wire.Object{Key: "newer"}), seg, 8192, newer, crc32c.Checksum(newer), 7); err != nil {
		t.Fatal(err)
	}
	late := rnd(4096)
	for _, w := range []struct {
		name string
		do   func() error
	}{
		{"peer", func() error { return p.Write(ctx, seg, 4096+2048, late, crc32c.Checksum(late), 6) }},
		{"in-process", func() error { return n.WriteRange(ctx, seg, 8192+writeChunk, late, crc32c.Checksum(late), 3) }},
		{"untokened peer", func() error { return p.Write(ctx, seg, 1<<20*8, late, crc32c.Checksum(late), 0) }},
		{"untokened in-process", func() error { return n.WriteRange(ctx, seg, 1<<20*8, late, crc32c.Checksum(late), 0) }},
	} {
		err := w.do()
		if !errors.Is(err, errcode.ErrInvalidParams) || !strings.Contains(err.Error(), "write refused") {
			t.Errorf("%s late write: %v, want INVALID_PARAMS \"write refused\"", w.name, err)
		}
	}
	got := make([]byte, len(newer))
	if err := p.ReadRange(ctx, seg, 8192, got, crc32c.Checksum(newer)); err != nil || !bytes.Equal(got, newer) {
		t.Fatalf("the newer put's bytes were overwritten (%v)", err)
	}
	// The same put may write its range again (a retry), and a newer put
	// may take over part of it.
	if err := n.WriteRange(ctx, seg, 8192, newer, crc32c.Checksum(newer), 7); err != nil {
		t.Fatalf("the owner's retry: %v", err)
	}
	if err := n.WriteRange(ctx, seg, 8192, late, crc32c.Checksum(late), 8); err != nil {
		t.Fatalf("a newer put: %v", err)
	}
}

// Issue 9 item 1: an old put's data-plane write that claimed its range
// and is overtaken mid-payload by a newer put's claim lands no further
// byte: the write is refused and the newer bytes are intact.
func TestOldPutWriteOvertakenMidPayload(t *testing.T) {
	m := newMaster(t, testMasterConfig())
	n := startTestNode(t, m, "127.0.0.1:0", nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	seg := n.SegmentName()
	old := rnd(2 * writeChunk)
	c := rawData(t, n.Endpoint())
	writeHead(t, c, seg, 0, 1, "old", len(old), crc32c.Checksum(old))
	if _, err := c.Write(old[:writeChunk]); err != nil {
		t.Fatal(err)
	}
	// Wait (bounded) until the node has claimed the range for put 1.
	for deadline := time.Now().Add(10 * time.Second); ; {
		n.ownMu.RLock()
		claimed := n.owners.n > 0
		n.ownMu.RUnlock()
		if claimed {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the node never claimed the range of the first write")
		}
		time.Sleep(time.Millisecond)
	}
	newer := rnd(2 * writeChunk)
	if err := n.WriteRange(ctx, seg, 0, newer, crc32c.Checksum(newer), 2); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Write(old[writeChunk:]); err != nil {
		t.Fatal(err)
	}
	h, msg, err := wire.ReadFrameHead(c, make([]byte, wire.HeaderLen), nil)
	if err != nil || h.Status != errcode.InvalidParams || !strings.Contains(string(msg), "write refused") {
		t.Fatalf("overtaken write: reply %+v %q %v, want INVALID_PARAMS \"write refused\"", h, msg, err)
	}
	got, err := n.ReadRange(ctx, seg, 0, int64(len(newer)))
	if err != nil || !bytes.Equal(got, newer) {
		t.Fatalf("the newer put's bytes were overwritten (%v)", err)
	}
	if recorded(n, 0, 1) {
		t.Fatal("the overtaken write was recorded")
	}
}
