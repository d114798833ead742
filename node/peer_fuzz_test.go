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

	"github.com/tierstore/tierstore/internal/crc32c"
	"github.com/tierstore/tierstore/internal/errcode"
	"github.com/tierstore/tierstore/internal/wire"
	"github.com/tierstore/tierstore/master"
)

// Fuzz targets for what a node accepts from peers: ranges, offsets and
// lengths of segment reads and writes (Segment, and the data plane over
// real TCP on 127.0.0.1), and keys of SSD reads. See docs/fuzzing.md.

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

// fzNode starts a master and a node with an SSD tier serving the data
// plane on 127.0.0.1, for the fuzz targets.
func fzNode(f *testing.F) *Node {
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
	c.OffloadWake = false
	c.ReconcileInterval = time.Hour
	c.PingInterval = time.Second
	c.Logger = quietLog
	n, err := Start(context.Background(), c, m)
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { n.Close() })
	return n
}

// refusal checks that a refused peer request carries a tierstore code (not
// an internal error or a broken transport).
func refusal(t *testing.T, what string, err error) {
	t.Helper()
	if c := errcode.Of(err); c == errcode.InternalError || c == errcode.RPCFail || c == errcode.OK {
		t.Fatalf("%s refused without a code: %v (code %v)", what, err, c)
	}
}

// fzMaxName and fzMaxKey are the data protocol's bounds on a segment name
// and an SSD key (docs/format/dataplane.md): a request beyond them is a
// malformed frame, which ends the connection.
const (
	fzMaxName = 1024
	fzMaxKey  = 4096
)

// FuzzPeerRequests sends arbitrary data-plane requests to a running node
// over real TCP: a write with any segment name, offset, data, CRC32C and
// token; a range read with any offset and length; an SSD read of any key.
// The node must answer each with a tierstore code or a correct result: a
// write is accepted only inside the segment with a matching CRC (and is
// then read back intact), a read only inside the segment (and then holds
// the segment's bytes), and an SSD read of a key never offloaded is
// OBJECT_NOT_FOUND or INVALID_KEY. Only a request the protocol calls
// malformed (a segment name or key beyond its bounds, an empty key) may
// end the connection. A panic in the node ends the test process.
func FuzzPeerRequests(f *testing.F) {
	n := fzNode(f)
	size := n.seg.Size()
	ctx := context.Background()
	dc, err := wire.DialData(ctx, n.Endpoint(), 10*time.Second)
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { dc.Close() })
	f.Add(uint8(0), true, uint64(4096), uint64(3), []byte("abc"), uint32(0), true, uint64(1), []byte("k"))
	f.Add(uint8(0), true, uint64(size-2), uint64(3), []byte("abc"), uint32(0), true, uint64(1), []byte("k"))
	f.Add(uint8(0), false, uint64(0), uint64(3), []byte("abc"), uint32(0), true, uint64(1), []byte("k"))
	f.Add(uint8(0), true, uint64(1<<63), uint64(1<<63), []byte("abc"), uint32(7), false, uint64(0), []byte("k"))
	f.Add(uint8(0), true, uint64(0), uint64(2), []byte("abc"), uint32(0), false, uint64(2), []byte("k"))
	f.Add(uint8(1), true, uint64(size-1), uint64(1), []byte{}, uint32(0), false, uint64(0), []byte("k"))
	f.Add(uint8(1), true, uint64(1<<63), uint64(5), []byte{}, uint32(0), false, uint64(0), []byte("k"))
	f.Add(uint8(1), true, uint64(0), uint64(1<<63), []byte{}, uint32(0), false, uint64(0), []byte("k"))
	f.Add(uint8(1), false, uint64(0), uint64(1), []byte{}, uint32(0), false, uint64(0), bytes.Repeat([]byte("s"), 1025))
	f.Add(uint8(2), true, uint64(0), uint64(1), []byte{}, uint32(0), false, uint64(0), []byte{})
	f.Add(uint8(2), true, uint64(0), uint64(1), []byte{}, uint32(0), false, uint64(0), bytes.Repeat([]byte("k"), 4097))
	f.Fuzz(func(t *testing.T, op uint8, rightSeg bool, off, length uint64, data []byte,
		crc uint32, rightCRC bool, token uint64, key []byte) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		seg := n.SegmentName()
		if !rightSeg {
			seg = string(key[:min(len(key), 2*fzMaxName)])
		}
		key = key[:min(len(key), 2*fzMaxKey)]
		if rightCRC {
			crc = crc32c.Checksum(data)
		}
		var err error
		malformed := len(seg) > fzMaxName
		switch op % 3 {
		case 0:
			err = fzWrite(ctx, t, dc, n, seg, off, data, crc, token)
		case 1:
			err = fzRead(ctx, t, dc, n, seg, off, length)
		case 2:
			malformed = len(key) == 0 || len(key) > fzMaxKey
			err = dc.ReadSSD(ctx, key, make([]byte, 1), 0)
			if err == nil {
				t.Fatalf("ReadSSD(%q) of a key never offloaded succeeded", key)
			}
			if !malformed && !errors.Is(err, errcode.ErrObjectNotFound) && !errors.Is(err, errcode.ErrInvalidKey) {
				t.Fatalf("ReadSSD(%q): %v", key, err)
			}
		}
		if !malformed && dc.Broken() {
			t.Fatalf("a well-formed request (op %d) broke the connection: %v", op%3, err)
		}
		if !malformed {
			return
		}
		// The node answers a malformed frame and then closes the
		// connection: the next request gets a new one.
		dc.Close()
		if dc, err = wire.DialData(ctx, n.Endpoint(), 10*time.Second); err != nil {
			t.Fatal(err)
		}
	})
}

// fzWrite writes data at off of seg for token and checks the outcome: an
// accepted write lies inside the segment, had the right CRC32C, and reads
// back; a refusal carries a code.
func fzWrite(ctx context.Context, t *testing.T, dc *wire.DataConn, n *Node, seg string, off uint64, data []byte, crc uint32, token uint64) error {
	err := dc.Write(ctx, seg, int64(off), data, crc, token)
	if err != nil {
		if len(seg) <= fzMaxName {
			refusal(t, "Write", err)
		}
		return err
	}
	if seg != n.SegmentName() || !inRange(int64(off), int64(len(data)), n.seg.Size()) || crc != crc32c.Checksum(data) {
		t.Fatalf("Write of %d bytes at %d (segment %q, crc %08x) accepted", len(data), off, seg, crc)
	}
	got, rerr := n.seg.Read(int64(off), len(data))
	if rerr != nil || !bytes.Equal(got, data) {
		t.Fatalf("accepted write at %d does not read back: %v", off, rerr)
	}
	return nil
}

// fzRead reads length bytes (at most one more than the segment holds) at
// off of seg: accepted only inside the segment and exactly on a complete
// object (checkReadRange), with its bytes.
func fzRead(ctx context.Context, t *testing.T, dc *wire.DataConn, n *Node, seg string, off, length uint64) error {
	size := n.seg.Size()
	length = min(length, uint64(size)+1)
	inside := seg == n.SegmentName() && inRange(int64(off), int64(length), size)
	ok := inside
	if ok {
		_, cerr := n.checkReadRange(int64(off), int64(length), 0)
		ok = cerr == nil
	}
	var crc uint32
	if ok {
		want, err := n.seg.Read(int64(off), int(length))
		if err != nil {
			t.Fatal(err)
		}
		crc = crc32c.Checksum(want)
	}
	err := dc.ReadRange(ctx, seg, int64(off), make([]byte, length), crc)
	switch {
	case ok && err != nil:
		t.Fatalf("ReadRange(%d, %d) of a complete object refused: %v", off, length, err)
	case inside && !ok && (!errors.Is(err, errcode.ErrReplicaGone) || !strings.Contains(err.Error(), "no complete object")):
		t.Fatalf("ReadRange(%d, %d) inside the segment, not an object: want REPLICA_IS_GONE (ErrNotAnObject), got %v", off, length, err)
	case !ok && err == nil:
		t.Fatalf("ReadRange(%d, %d) of segment %q outside the segment answered", off, length, seg)
	case err != nil && len(seg) <= fzMaxName:
		refusal(t, "ReadRange", err)
	}
	return err
}
