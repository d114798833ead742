package node

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/tierstore/tierstore/internal/codes"
	"github.com/tierstore/tierstore/internal/rpcpb"
	"github.com/tierstore/tierstore/internal/wire"
	"google.golang.org/grpc"
)

// Issue 9 item 1 (invariant 8), over the real peer gRPC service and the
// in-process Node.WriteRange: a late write of an old put, after a newer put
// wrote an overlapping range, is refused and the newer bytes stay intact;
// an untokened write is refused once the node has seen tokens.
func TestLateWriteOfOldPutRefused(t *testing.T) {
	m := newMaster(t, testMasterConfig())
	n := startTestNode(t, m, "127.0.0.1:0", nil)
	p, closeConn, err := wire.Dial(n.Endpoint())
	if err != nil {
		t.Fatal(err)
	}
	defer closeConn()
	ctx := context.Background()
	seg := n.SegmentName()
	newer := rnd(3 * wire.MaxChunk / 2)
	if err := p.WriteRange(ctx, seg, 8192, newer, wire.CRC32C(newer), 7); err != nil {
		t.Fatal(err)
	}
	late := rnd(4096)
	for _, w := range []struct {
		name string
		do   func() error
	}{
		{"peer", func() error { return p.WriteRange(ctx, seg, 4096+2048, late, wire.CRC32C(late), 6) }},
		{"in-process", func() error { return n.WriteRange(ctx, seg, 8192+wire.MaxChunk, late, wire.CRC32C(late), 3) }},
		{"untokened peer", func() error { return p.WriteRange(ctx, seg, 1<<20*8, late, wire.CRC32C(late), 0) }},
		{"untokened in-process", func() error { return n.WriteRange(ctx, seg, 1<<20*8, late, wire.CRC32C(late), 0) }},
	} {
		err := w.do()
		if !errors.Is(err, codes.ErrInvalidParams) || !strings.Contains(err.Error(), "write refused") {
			t.Errorf("%s late write: %v, want INVALID_PARAMS \"write refused\"", w.name, err)
		}
	}
	got, err := p.ReadRange(ctx, seg, 8192, int64(len(newer)))
	if err != nil || !bytes.Equal(got, newer) {
		t.Fatalf("the newer put's bytes were overwritten (%v)", err)
	}
	// The same put may write its range again (a retry), and a newer put
	// may take over part of it.
	if err := n.WriteRange(ctx, seg, 8192, newer, wire.CRC32C(newer), 7); err != nil {
		t.Fatalf("the owner's retry: %v", err)
	}
	if err := n.WriteRange(ctx, seg, 8192, late, wire.CRC32C(late), 8); err != nil {
		t.Fatalf("a newer put: %v", err)
	}
}

// Issue 9 item 1: an old put's stream that claimed its range and is
// overtaken mid-stream by a newer put's claim writes no further chunk: the
// stream is refused and the newer bytes are intact.
func TestOldPutStreamOvertakenMidStream(t *testing.T) {
	m := newMaster(t, testMasterConfig())
	n := startTestNode(t, m, "127.0.0.1:0", nil)
	cc, err := grpc.NewClient(n.Endpoint(), wire.DialOptions()...)
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	seg := n.SegmentName()
	old := rnd(2 * wire.MaxChunk)
	st, err := rpcpb.NewNodePeerClient(cc).WriteRange(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Send(&rpcpb.PeerWriteChunk{Segment: seg, Offset: 0, TotalLen: uint64(len(old)), Crc32C: wire.CRC32C(old),
		HasCrc: true, PutToken: 1, Data: old[:wire.MaxChunk]}); err != nil {
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
			t.Fatal("the node never claimed the range of the first stream")
		}
		time.Sleep(time.Millisecond)
	}
	newer := rnd(2 * wire.MaxChunk)
	if err := n.WriteRange(ctx, seg, 0, newer, wire.CRC32C(newer), 2); err != nil {
		t.Fatal(err)
	}
	_ = st.Send(&rpcpb.PeerWriteChunk{Data: old[wire.MaxChunk:]})
	_, err = st.CloseAndRecv()
	if err = codes.FromStatus(err); !errors.Is(err, codes.ErrInvalidParams) {
		t.Fatalf("overtaken stream: %v, want INVALID_PARAMS", err)
	}
	got, err := n.ReadRange(ctx, seg, 0, int64(len(newer)))
	if err != nil || !bytes.Equal(got, newer) {
		t.Fatalf("the newer put's bytes were overwritten (%v)", err)
	}
}
