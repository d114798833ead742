package node

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/tierstore/tierstore/internal/codes"
	"github.com/tierstore/tierstore/internal/rpcpb"
	"github.com/tierstore/tierstore/internal/wire"
)

// Issue 9 item 7, the node's side of the wire: a writer that sends more
// than it announced, fewer, or disconnects mid-stream gets a clear error
// and nothing is written outside [offset, offset+announced).
func TestPeerWriteLyingOrBrokenStream(t *testing.T) {
	m := newMaster(t, testMasterConfig())
	n := startTestNode(t, m, "127.0.0.1:0", nil)
	cc, err := grpc.NewClient(n.Endpoint(), wire.DialOptions()...)
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	seg := n.SegmentName()
	const off, total = 1 << 20, wire.MaxChunk + 4096
	val := bytes.Repeat([]byte{0xAB}, 2*wire.MaxChunk)
	cases := []struct {
		name  string
		sends [][]byte // data of each chunk
		hang  bool     // cancel the stream instead of closing it
		code  error
	}{
		{"more than announced", [][]byte{val[:wire.MaxChunk], val[:wire.MaxChunk]}, false, codes.ErrInvalidParams},
		{"fewer than announced", [][]byte{val[:wire.MaxChunk]}, false, codes.ErrTransferFail},
		{"disconnects mid-stream", [][]byte{val[:wire.MaxChunk]}, true, codes.ErrContextCanceled},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if err := n.seg.WriteAt(make([]byte, 4*wire.MaxChunk), 0); err != nil { // zero the area
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			st, err := rpcpb.NewNodePeerClient(cc).WriteRange(ctx)
			if err != nil {
				t.Fatal(err)
			}
			for j, d := range c.sends {
				ch := &rpcpb.PeerWriteChunk{Data: d}
				if j == 0 {
					ch.Segment, ch.Offset, ch.TotalLen, ch.PutToken = seg, off, total, uint64(i+1)
				}
				if err := st.Send(ch); err != nil {
					break // the node ended the stream; CloseAndRecv has its status
				}
			}
			if c.hang {
				// Wait (bounded) for the first chunk to land, then drop
				// the stream.
				for deadline := time.Now().Add(10 * time.Second); ; {
					b, _ := n.seg.Read(off, 1)
					if b[0] == 0xAB {
						break
					}
					if time.Now().After(deadline) {
						t.Fatal("the first chunk never landed")
					}
					time.Sleep(time.Millisecond)
				}
				cancel()
			}
			_, err = st.CloseAndRecv()
			if err = codes.FromStatus(err); !errors.Is(err, c.code) {
				t.Fatalf("stream: %v, want %v", err, c.code)
			}
			all, err := n.seg.Read(0, 4*wire.MaxChunk)
			if err != nil {
				t.Fatal(err)
			}
			for p, b := range all {
				if b != 0 && (p < off || p >= off+total) {
					t.Fatalf("byte %d outside [%d, %d) was written", p, off, off+total)
				}
			}
		})
	}
}
