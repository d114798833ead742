package node

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"runtime"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/tierstore/tierstore/internal/codes"
	"github.com/tierstore/tierstore/internal/rpcpb"
	"github.com/tierstore/tierstore/internal/wire"
	"github.com/tierstore/tierstore/master"
)

// Fuzz targets for what a node accepts from peers: ranges, offsets and
// lengths of segment reads and writes (Segment, and the peer service over
// real gRPC on 127.0.0.1), and keys of SSD reads. See docs/fuzzing.md.

// fzSegSize is the segment size of the fuzz targets: small, with a size
// that is not a multiple of the page.
const fzSegSize = 1<<20 + 123

// fzAllocated returns the heap bytes fn allocated (process-wide).
func fzAllocated(fn func()) uint64 {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	fn()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// inRange is the reference answer: [off, off+n) lies in a segment of size
// bytes.
func inRange(off, n, size int64) bool {
	return off >= 0 && n >= 0 && off <= size && n <= size-off
}

// FuzzSegmentRange: WriteAt, ReadAt and Read accept exactly the ranges
// inside the segment, refuse the others with ErrOutOfRange, and Read never
// allocates for a range it refuses.
func FuzzSegmentRange(f *testing.F) {
	seg, err := NewSegment(fzSegSize)
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { seg.Close() })
	f.Add(int64(0), int64(10), []byte("abc"))
	f.Add(int64(fzSegSize-3), int64(3), []byte("xyz"))
	f.Add(int64(fzSegSize-2), int64(3), []byte("xyz"))
	f.Add(int64(-1), int64(1), []byte{})
	f.Add(int64(1<<62), int64(1<<62), []byte{1})
	f.Add(int64(5), int64(-5), []byte{1})
	f.Add(int64(fzSegSize), int64(0), []byte{})
	f.Fuzz(func(t *testing.T, off, n int64, data []byte) {
		werr := seg.WriteAt(data, off)
		if ok := inRange(off, int64(len(data)), fzSegSize); ok != (werr == nil) || (!ok && !errors.Is(werr, ErrOutOfRange)) {
			t.Fatalf("WriteAt(%d bytes at %d): %v", len(data), off, werr)
		}
		if werr == nil {
			got := make([]byte, len(data))
			if err := seg.ReadAt(got, off); err != nil || !bytes.Equal(got, data) {
				t.Fatalf("ReadAt after WriteAt at %d: %v", off, err)
			}
		}
		var v []byte
		var rerr error
		a := fzAllocated(func() { v, rerr = seg.Read(off, int(n)) })
		ok := inRange(off, n, fzSegSize)
		switch {
		case ok != (rerr == nil):
			t.Fatalf("Read(%d, %d): %v", off, n, rerr)
		case !ok && !errors.Is(rerr, ErrOutOfRange):
			t.Fatalf("Read(%d, %d) refused with %v", off, n, rerr)
		case !ok && a > 16<<10:
			t.Fatalf("refused Read(%d, %d) allocated %d bytes", off, n, a)
		case ok && int64(len(v)) != n:
			t.Fatalf("Read(%d, %d) returned %d bytes", off, n, len(v))
		}
	})
}

// fzNode starts a master and a node with an SSD tier and a peer service on
// 127.0.0.1, for the fuzz targets.
func fzNode(f *testing.F) (*Node, rpcpb.NodePeerClient) {
	quietLog := slog.New(slog.DiscardHandler)
	mc := master.DefaultConfig()
	mc.EnableOffload = true
	mc.MonitorInterval = 0
	mc.Logger = quietLog
	m, err := master.New(mc)
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { m.Close() })
	c := DefaultConfig()
	c.Listen = "127.0.0.1:0"
	c.Memory = fzSegSize
	c.EnableOffload = true
	c.SSDDir = f.TempDir()
	c.Backend = "pwrite"
	c.HeartbeatInterval = time.Hour
	c.ReconcileInterval = time.Hour
	c.PingInterval = time.Second
	c.Logger = quietLog
	n, err := Start(context.Background(), c, m)
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { n.Close() })
	conn, err := grpc.NewClient(n.Endpoint(), wire.DialOptions()...)
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { conn.Close() })
	cc := rpcpb.NewNodePeerClient(conn)
	return n, cc
}

// refusal checks that a refused peer request carries a tierstore code (not
// an internal error or a broken transport).
func refusal(t *testing.T, what string, err error) {
	t.Helper()
	if c := codes.Of(err); c == codes.InternalError || c == codes.RPCFail || c == codes.OK {
		t.Fatalf("%s refused without a code: %v (code %v)", what, err, c)
	}
}

// FuzzPeerRequests sends arbitrary peer requests to a running node over
// gRPC: WriteRange with any segment name, offset, announced length, CRC,
// token and chunking of the data; ReadRange with any offset and length;
// ReadSSD with any key. The node must answer each with a tierstore code or
// a correct result: a write is accepted only inside the segment with
// exactly the announced bytes and a matching CRC (and is then read back
// intact), a read only inside the segment with exactly the asked length,
// and an SSD read of a key never offloaded is OBJECT_NOT_FOUND or
// INVALID_KEY. A panic in the node ends the test process.
func FuzzPeerRequests(f *testing.F) {
	n, cc := fzNode(f)
	size := n.seg.Size()
	f.Add(uint8(0), true, uint64(4096), uint64(3), []byte("abc"), []byte{1}, uint32(0), false, uint64(0), []byte("k"))
	f.Add(uint8(0), true, uint64(size-2), uint64(3), []byte("abc"), []byte{}, wire.CRC32C([]byte("abc")), true, uint64(1), []byte("k"))
	f.Add(uint8(0), false, uint64(0), uint64(3), []byte("abc"), []byte{}, uint32(0), false, uint64(0), []byte("k"))
	f.Add(uint8(0), true, uint64(1<<63), uint64(1<<63), []byte("abc"), []byte{2}, uint32(0), false, uint64(0), []byte("k"))
	f.Add(uint8(0), true, uint64(0), uint64(2), []byte("abc"), []byte{1, 1, 1}, uint32(0), false, uint64(0), []byte("k"))
	f.Add(uint8(1), true, uint64(size-1), uint64(1), []byte{}, []byte{}, uint32(0), false, uint64(0), []byte("k"))
	f.Add(uint8(1), true, uint64(1<<63), uint64(5), []byte{}, []byte{}, uint32(0), false, uint64(0), []byte("k"))
	f.Add(uint8(1), true, uint64(0), uint64(1<<63), []byte{}, []byte{}, uint32(0), false, uint64(0), []byte("k"))
	f.Add(uint8(2), true, uint64(0), uint64(0), []byte{}, []byte{}, uint32(0), false, uint64(0), []byte{})
	f.Add(uint8(2), true, uint64(0), uint64(0), []byte{}, []byte{}, uint32(0), false, uint64(0), bytes.Repeat([]byte("k"), 4097))
	f.Fuzz(func(t *testing.T, op uint8, rightSeg bool, off, length uint64, data, cuts []byte,
		crc uint32, hasCRC bool, token uint64, key []byte) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		seg := n.SegmentName()
		if !rightSeg {
			seg = strings.ToValidUTF8(string(key), "?") // a proto string
		}
		switch op % 3 {
		case 0:
			fzWrite(ctx, t, cc, n, seg, off, length, data, cuts, crc, hasCRC, token)
		case 1:
			fzRead(ctx, t, cc, size, n.SegmentName(), seg, off, length)
		case 2:
			st, err := cc.ReadSSD(ctx, &rpcpb.PeerReadSSDRequest{Key: key})
			if err == nil {
				_, _, _, err = wire.RecvValue(st.Recv, 1<<20)
			}
			if err == nil {
				t.Fatalf("ReadSSD(%q) of a key never offloaded succeeded", key)
			}
			if !errors.Is(err, codes.ErrObjectNotFound) && !errors.Is(err, codes.ErrInvalidKey) {
				t.Fatalf("ReadSSD(%q): %v", key, err)
			}
		}
	})
}

func fzWrite(ctx context.Context, t *testing.T, cc rpcpb.NodePeerClient, n *Node, seg string, off, total uint64,
	data, cuts []byte, crc uint32, hasCRC bool, token uint64) {
	st, err := cc.WriteRange(ctx)
	if err != nil {
		t.Fatal(err)
	}
	first := &rpcpb.PeerWriteChunk{Segment: seg, Offset: off, TotalLen: total, Crc32C: crc, HasCrc: hasCRC, PutToken: token}
	rest := data
	msgs := []*rpcpb.PeerWriteChunk{first}
	for i, c := range cuts {
		k := min(int(c), len(rest))
		if i == 0 {
			first.Data = rest[:k]
		} else {
			msgs = append(msgs, &rpcpb.PeerWriteChunk{Data: rest[:k]})
		}
		rest = rest[k:]
	}
	if len(rest) > 0 {
		msgs = append(msgs, &rpcpb.PeerWriteChunk{Data: rest})
	}
	for _, m := range msgs {
		if err := st.Send(m); err != nil {
			break // the node ended the stream; CloseAndRecv has its answer
		}
	}
	_, err = st.CloseAndRecv()
	err = codes.FromStatus(err)
	ok := seg == n.SegmentName() && total == uint64(len(data)) && inRange(int64(off), int64(len(data)), n.seg.Size()) &&
		(!hasCRC || crc == wire.CRC32C(data))
	if err != nil {
		refusal(t, "WriteRange", err)
		return
	}
	if !ok {
		t.Fatalf("WriteRange of %d bytes announced %d at %d (segment %q, crc %v) accepted", len(data), total, off, seg, hasCRC)
	}
	got, rerr := n.seg.Read(int64(off), len(data))
	if rerr != nil || !bytes.Equal(got, data) {
		t.Fatalf("accepted write at %d does not read back: %v", off, rerr)
	}
}

func fzRead(ctx context.Context, t *testing.T, cc rpcpb.NodePeerClient, size int64, segName, seg string, off, length uint64) {
	st, err := cc.ReadRange(ctx, &rpcpb.PeerReadRangeRequest{Segment: seg, Offset: off, Length: length})
	if err != nil {
		t.Fatal(err)
	}
	// The reader's limit is what it asked for, capped like a real client
	// (the object's size).
	limit := int64(min(length, uint64(size)))
	v, _, _, err := wire.RecvValue(st.Recv, limit)
	ok := inRange(int64(off), int64(length), size)
	if err != nil {
		if ok && seg == segName {
			t.Fatalf("ReadRange(%d, %d) inside the segment refused: %v", off, length, err)
		}
		refusal(t, "ReadRange", err)
		return
	}
	if !ok || seg != segName {
		t.Fatalf("ReadRange(%d, %d) of segment %q outside the segment answered %d bytes", off, length, seg, len(v))
	}
	if uint64(len(v)) != length {
		t.Fatalf("ReadRange(%d, %d) answered %d bytes", off, length, len(v))
	}
}
