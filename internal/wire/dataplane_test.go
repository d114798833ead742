package wire

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/tierstore/tierstore/internal/crc32c"
	"github.com/tierstore/tierstore/internal/errcode"
	"github.com/tierstore/tierstore/internal/rpcpb"
	"github.com/tierstore/tierstore/internal/testkit"
)

var quiet = slog.New(slog.DiscardHandler)

func rnd(n int) []byte {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return b
}

// memHandler is a DataHandler over a byte slice ("seg") and a map of SSD
// objects; ssdDelay holds SSD reads back (to answer out of order).
type memHandler struct {
	mu       sync.Mutex // protects seg, ssd and the ssd* maps
	seg      []byte
	ssd      map[string][]byte
	writes   atomic.Int64 // committed writes
	aborts   atomic.Int64 // aborted writes
	ssdDelay func(key []byte)
	failFill func(pos int64) bool // refuses a Fill at pos (ownership lost); under mu
	// SSD streaming: ssdCRC is the "index" CRC32C a value is announced
	// with (and checked against on a verified read); ssdFailAfter makes
	// a value's stream fail after that many pieces of ssdPiece bytes.
	ssdCRC       map[string]uint32
	ssdFailAfter map[string]int
	ssdGlitch    map[string]bool // unverified streams of the key flip a bit (damage on the way)
	ssdLie       map[string]int  // the value announces this many bytes fewer than its pieces hold
	verified     atomic.Int64    // verified reads served
	drops        atomic.Int64    // values a verified read found corrupt and dropped
	closes       atomic.Int64    // SSDValues closed
}

// ssdPiece is the piece size of memHandler's SSD streams.
const ssdPiece = 64 << 10

func newMemHandler(size int) *memHandler {
	return &memHandler{seg: make([]byte, size), ssd: map[string][]byte{}, ssdCRC: map[string]uint32{}, ssdFailAfter: map[string]int{}, ssdGlitch: map[string]bool{}, ssdLie: map[string]int{}}
}

func (h *memHandler) setSSD(key string, v []byte) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.ssd[key] = v
}

// locked runs f under h.mu (tests change the SSD maps between reads).
func (h *memHandler) locked(f func()) {
	h.mu.Lock()
	defer h.mu.Unlock()
	f()
}

// setFailFill sets failFill (under mu: the server reads it in Fill).
func (h *memHandler) setFailFill(f func(pos int64) bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.failFill = f
}

func (h *memHandler) WriteLimit() int64 { return int64(len(h.seg)) }

func (h *memHandler) BeginWrite(_ context.Context, segment string, off, n int64, token uint64, _ []byte) (RangeWriter, error) {
	if segment != "seg" {
		return nil, errcode.Errorf(errcode.SegmentNotFound, "test: no segment %q", segment)
	}
	if token == 0 {
		return nil, errcode.Errorf(errcode.InvalidParams, "test: no put token")
	}
	if off < 0 || n < 0 || off+n > int64(len(h.seg)) {
		return nil, errcode.Errorf(errcode.InvalidParams, "test: out of range")
	}
	return &memWrite{h: h, off: off, n: n}, nil
}

// memWrite is a write of [off, off+n) of a memHandler's segment.
type memWrite struct {
	h      *memHandler
	off, n int64
}

func (w *memWrite) Fill(pos int64, fill func([]byte) (int, error)) (int, error) {
	w.h.mu.Lock()
	defer w.h.mu.Unlock()
	if w.h.failFill != nil && w.h.failFill(pos) {
		return 0, errcode.Errorf(errcode.InvalidParams, "test: write refused at %d", pos)
	}
	return fill(w.h.seg[w.off+pos : w.off+w.n])
}

func (w *memWrite) Commit(uint32) { w.h.writes.Add(1) }
func (w *memWrite) Abort()        { w.h.aborts.Add(1) }

func (h *memHandler) ViewRange(segment string, off, n int64, _ uint64, _ []byte) ([]byte, func(), error) {
	if segment != "seg" {
		return nil, nil, errcode.Errorf(errcode.SegmentNotFound, "test: no segment %q", segment)
	}
	if off < 0 || n < 0 || off+n > int64(len(h.seg)) {
		return nil, nil, errcode.Errorf(errcode.InvalidParams, "test: out of range")
	}
	h.mu.Lock()
	return h.seg[off : off+n], h.mu.Unlock, nil
}

func (h *memHandler) OpenSSD(_ context.Context, key []byte, _ uint64, _ []byte, verify bool) (SSDValue, error) {
	if h.ssdDelay != nil {
		h.ssdDelay(key)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	v, ok := h.ssd[string(key)]
	if !ok {
		return nil, errcode.Errorf(errcode.ObjectNotFound, "test: %q not on SSD", key)
	}
	crc, hasCRC := h.ssdCRC[string(key)]
	if verify {
		h.verified.Add(1)
		if hasCRC && crc32c.Checksum(v) != crc {
			delete(h.ssd, string(key))
			h.drops.Add(1)
			return nil, errcode.Errorf(errcode.ChecksumMismatch, "test: %q failed its CRC; dropped", key)
		}
		hasCRC = false
	}
	if h.ssdGlitch[string(key)] && !verify {
		v = bytes.Clone(v)
		v[len(v)/2] ^= 0x10
	}
	fail, failing := h.ssdFailAfter[string(key)]
	if !failing {
		fail = -1
	}
	return &memValue{h: h, v: v, crc: crc, hasCRC: hasCRC, failAfter: fail, lie: h.ssdLie[string(key)]}, nil
}

// memValue streams a value in ssdPiece pieces, failing after failAfter
// pieces when failAfter >= 0.
type memValue struct {
	h         *memHandler
	v         []byte
	crc       uint32
	hasCRC    bool
	failAfter int
	pieces    int
	lie       int
}

func (m *memValue) Size() int64         { return int64(len(m.v) - m.lie) }
func (m *memValue) CRC() (uint32, bool) { return m.crc, m.hasCRC }
func (m *memValue) Close()              { m.h.closes.Add(1) }

func (m *memValue) Next() ([]byte, error) {
	if m.pieces == m.failAfter {
		return nil, errcode.Errorf(errcode.InternalError, "test: SSD piece %d failed", m.pieces)
	}
	off := m.pieces * ssdPiece
	if off >= len(m.v) {
		return nil, io.EOF
	}
	m.pieces++
	return m.v[off:min(off+ssdPiece, len(m.v))], nil
}

func (h *memHandler) Served(Op, time.Duration, error) {}

// serveMem starts a Mux on 127.0.0.1 with h behind its data plane and a
// gRPC server (peer service unimplemented) behind the rest.
func serveMem(t *testing.T, h DataHandler) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	m := NewMux(lis, NewDataServer(h, DataServerOptions{Logger: quiet}))
	srv := grpc.NewServer()
	rpcpb.RegisterNodePeerServer(srv, rpcpb.UnimplementedNodePeerServer{})
	go func() { _ = srv.Serve(m.Listener()) }()
	t.Cleanup(srv.Stop)
	return lis.Addr().String()
}

func dial(t *testing.T, addr string) *DataConn {
	t.Helper()
	dc, err := DialData(context.Background(), addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dc.Close() })
	return dc
}

// guarded returns a buffer of n bytes whose capacity runs into a guard
// region, and a check that the guard is untouched.
func guarded(t *testing.T, n int) ([]byte, func()) {
	full := make([]byte, n+64)
	for i := range full {
		full[i] = 0xA5
	}
	return full[:n], func() {
		t.Helper()
		for i, b := range full[n:] {
			if b != 0xA5 {
				t.Fatalf("byte %d past the buffer's end was written", i)
			}
		}
	}
}

// Writes and reads of values larger than a socket buffer round-trip
// through a real listener, the gRPC service still answers on the same
// port, and nothing is written beyond a read's buffer.
func TestDataPlaneRoundTrip(t *testing.T) {
	h := newMemHandler(8 << 20)
	addr := serveMem(t, h)
	dc := dial(t, addr)
	ctx := context.Background()
	val := rnd(3<<20 + 17)
	if err := dc.Write(ctx, "seg", 4096, val, crc32c.Checksum(val), 1); err != nil {
		t.Fatal(err)
	}
	buf, guard := guarded(t, len(val))
	if err := dc.ReadRange(ctx, "seg", 4096, buf, crc32c.Checksum(val)); err != nil || !bytes.Equal(buf, val) {
		t.Fatalf("read back: %v", err)
	}
	guard()
	h.setSSD("k", val[:1000])
	sb, sguard := guarded(t, 1000)
	if err := dc.ReadSSD(ctx, []byte("k"), sb, crc32c.Checksum(val[:1000])); err != nil || !bytes.Equal(sb, val[:1000]) {
		t.Fatalf("ssd read: %v", err)
	}
	sguard()

	// Errors of the handler cross with their code and message; the
	// connection stays usable.
	if err := dc.Write(ctx, "other", 0, val[:10], crc32c.Checksum(val[:10]), 1); !errors.Is(err, errcode.ErrSegmentNotFound) || !bytes.Contains([]byte(err.Error()), []byte(`"other"`)) {
		t.Fatalf("write to another segment: %v", err)
	}
	if err := dc.ReadSSD(ctx, []byte("missing"), sb, 0); !errors.Is(err, errcode.ErrObjectNotFound) {
		t.Fatalf("missing SSD key: %v", err)
	}
	if err := dc.ReadSSD(ctx, []byte("k"), make([]byte, 999), 0); !errors.Is(err, errcode.ErrChecksumMismatch) {
		t.Fatalf("SSD copy of another size: %v", err)
	}
	if err := dc.Write(ctx, "seg", 0, make([]byte, 9<<20), 0, 1); !errors.Is(err, errcode.ErrInvalidParams) || !strings.Contains(err.Error(), "into a segment of") {
		t.Fatalf("write larger than the segment: %v", err)
	}
	if err := dc.ReadRange(ctx, "seg", 4096, buf, crc32c.Checksum(val)); err != nil || dc.Broken() {
		t.Fatalf("the connection after a refused write: %v", err)
	}

	// gRPC on the same port.
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	_, err = rpcpb.NewNodePeerClient(cc).NodeStats(ctx, &rpcpb.PeerStatsRequest{})
	if status.Code(err) != codes.Unimplemented {
		t.Fatalf("gRPC through the mux: %v", err)
	}
}

// The receiver checks the CRC32C once: a write whose bytes do not match
// its CRC is refused and never committed (the handler records nothing); a
// read whose bytes do not match the object's CRC fails with
// ErrBadChecksum.
func TestDataPlaneChecksums(t *testing.T) {
	h := newMemHandler(1 << 20)
	dc := dial(t, serveMem(t, h))
	ctx := context.Background()
	val := rnd(200 << 10)
	err := dc.Write(ctx, "seg", 0, val, crc32c.Checksum(val)^1, 1)
	if !errors.Is(err, errcode.ErrChecksumMismatch) || h.writes.Load() != 0 {
		t.Fatalf("write with a wrong CRC: %v (handler writes %d)", err, h.writes.Load())
	}
	if err := dc.Write(ctx, "seg", 0, val, crc32c.Checksum(val), 1); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, len(val))
	err = dc.ReadRange(ctx, "seg", 0, buf, crc32c.Checksum(val)^1)
	if !errors.Is(err, ErrBadChecksum) || !errors.Is(err, errcode.ErrChecksumMismatch) {
		t.Fatalf("read checked against another CRC: %v", err)
	}
}

// fakeNode accepts one data connection, answers the hello, reads one
// request and lets play misbehave on the raw connection.
func fakeNode(t *testing.T, play func(c net.Conn, h Header, req Request)) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	t.Cleanup(func() { lis.Close(); <-done })
	go func() {
		defer close(done)
		c, err := lis.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		var hb [HelloLen]byte
		if _, err := io.ReadFull(c, hb[:]); err != nil {
			return
		}
		hi := hello()
		c.Write(hi[:])
		h, meta, err := ReadFrameHead(c, make([]byte, HeaderLen), nil)
		if err != nil {
			return
		}
		req, _ := ParseRequest(h.Op, meta)
		play(c, h, req)
	}()
	return lis.Addr().String()
}

func replyHeader(req Header, payload uint64) []byte {
	b := make([]byte, HeaderLen)
	(&Header{Op: req.Op | ReplyBit, ID: req.ID, PayloadLen: payload}).Encode(b)
	return b
}

// A misbehaving node: each case is a clear TRANSFER_FAIL or
// CHECKSUM_MISMATCH, and nothing lands beyond the caller's buffer.
func TestDataPlaneMisbehavingPeer(t *testing.T) {
	const n = 256 << 10
	val := rnd(n)
	cases := []struct {
		name string
		play func(c net.Conn, h Header, req Request)
		want []error
	}{
		{"disconnect mid-payload", func(c net.Conn, h Header, _ Request) {
			c.Write(replyHeader(h, n))
			c.Write(val[:n/3])
		}, []error{ErrShortFrame, errcode.ErrTransferFail}},
		{"short frame header", func(c net.Conn, h Header, _ Request) {
			c.Write(replyHeader(h, n)[:HeaderLen/2])
		}, []error{ErrShortFrame, errcode.ErrTransferFail}},
		{"wrong checksum", func(c net.Conn, h Header, _ Request) {
			bad := bytes.Clone(val)
			bad[n/2] ^= 1
			c.Write(replyHeader(h, n))
			c.Write(bad)
			io.Copy(io.Discard, c)
		}, []error{ErrBadChecksum, errcode.ErrChecksumMismatch}},
		{"value larger than asked", func(c net.Conn, h Header, _ Request) {
			c.Write(replyHeader(h, n+1))
			c.Write(val)
			c.Write(val[:1])
			io.Copy(io.Discard, c)
		}, []error{ErrFrame, errcode.ErrTransferFail}},
		{"value smaller than asked", func(c net.Conn, h Header, _ Request) {
			c.Write(replyHeader(h, n-10))
			c.Write(val)
			io.Copy(io.Discard, c)
		}, []error{ErrFrame, errcode.ErrTransferFail}},
		{"reply to another op", func(c net.Conn, h Header, _ Request) {
			h.Op = OpReadSSD
			c.Write(replyHeader(h, n))
			io.Copy(io.Discard, c)
		}, []error{ErrFrame, errcode.ErrTransferFail}},
		{"node's CRC differs from the object's", func(c net.Conn, h Header, _ Request) {
			b := replyHeader(h, n)
			b[3] = FlagCRC
			binary.LittleEndian.PutUint32(b[12:], crc32c.Checksum(val)^1)
			c.Write(b)
			c.Write(val)
			io.Copy(io.Discard, c)
		}, []error{ErrBadChecksum, errcode.ErrChecksumMismatch}},
		{"error reply with a payload", func(c net.Conn, h Header, _ Request) {
			b := replyHeader(h, 5)
			binary.LittleEndian.PutUint32(b[8:], uint32(0xFFFFFD00)) // -768
			c.Write(b)
			c.Write([]byte("12345"))
			io.Copy(io.Discard, c)
		}, []error{ErrFrame, errcode.ErrTransferFail}},
		{"request sent to the client", func(c net.Conn, h Header, _ Request) {
			b := make([]byte, HeaderLen)
			(&Header{Op: OpReadRange, ID: h.ID}).Encode(b)
			c.Write(b)
			io.Copy(io.Discard, c)
		}, []error{ErrFrame, errcode.ErrTransferFail}},
		{"reply nobody asked for", func(c net.Conn, h Header, _ Request) {
			h.ID++
			c.Write(replyHeader(h, 0)[:HeaderLen-1])
		}, []error{ErrShortFrame, errcode.ErrTransferFail}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dc := dial(t, fakeNode(t, tc.play))
			buf, guard := guarded(t, n)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			err := dc.ReadRange(ctx, "seg", 0, buf, crc32c.Checksum(val))
			for _, w := range tc.want {
				if !errors.Is(err, w) {
					t.Fatalf("got %v, want %v", err, w)
				}
			}
			guard()
			if !errors.Is(err, ErrBadChecksum) {
				<-dc.readerDone
				if !dc.Broken() {
					t.Fatal("the connection is still offered after a protocol error")
				}
			}
		})
	}
}

// A node that sends more bytes than its header announced: the call gets
// exactly the announced bytes (checked), and the surplus, read as the next
// header, breaks the connection with ErrFrame, so the next call fails
// clearly instead of reading stray bytes.
func TestDataPlaneMoreThanAnnounced(t *testing.T) {
	const n = 64 << 10
	val := rnd(n)
	dc := dial(t, fakeNode(t, func(c net.Conn, h Header, _ Request) {
		c.Write(replyHeader(h, n))
		c.Write(val)
		c.Write(bytes.Repeat([]byte{0xEE}, HeaderLen))
		io.Copy(io.Discard, c)
	}))
	buf, guard := guarded(t, n)
	if err := dc.ReadRange(context.Background(), "seg", 0, buf, crc32c.Checksum(val)); err != nil || !bytes.Equal(buf, val) {
		t.Fatalf("the announced bytes: %v", err)
	}
	guard()
	<-dc.readerDone
	err := dc.ReadRange(context.Background(), "seg", 0, buf, crc32c.Checksum(val))
	if !errors.Is(err, ErrFrame) || !errors.Is(err, errcode.ErrTransferFail) {
		t.Fatalf("after the surplus: %v", err)
	}
}

// cancelWhileFilling cancels once the node has sent half a payload
// (sentHalf), pending calls of dc are left (the earlier ones completed) and
// dc's reader is filling one of them: the context ends mid-payload of
// that call, whatever the load. Bounded.
func cancelWhileFilling(dc *DataConn, pending int, sentHalf <-chan struct{}, cancel func()) {
	<-sentHalf
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		dc.mu.Lock()
		filling := false
		for _, c := range dc.calls {
			filling = filling || c.reading
		}
		filling = filling && len(dc.calls) == pending
		dc.mu.Unlock()
		if filling {
			break
		}
	}
	cancel()
}

// A caller whose context ends while its payload is arriving gets its
// buffer back: the bytes the node sends afterwards never reach it.
func TestDataPlaneCancelMidPayload(t *testing.T) {
	const n = 1 << 20
	val := rnd(n)
	sentHalf := make(chan struct{})
	finish := make(chan struct{})
	dc := dial(t, fakeNode(t, func(c net.Conn, h Header, _ Request) {
		c.Write(replyHeader(h, n))
		c.Write(val[:n/2])
		close(sentHalf)
		<-finish
		c.Write(val[n/2:]) // after the caller returned
	}))
	release := sync.OnceFunc(func() { close(finish) })
	t.Cleanup(release) // before fakeNode's cleanup waits for the node
	buf, guard := guarded(t, n)
	ctx, cancel := context.WithCancel(context.Background())
	go cancelWhileFilling(dc, 1, sentHalf, cancel)
	err := dc.ReadRange(ctx, "seg", 0, buf, crc32c.Checksum(val))
	if !errors.Is(err, errcode.ErrContextCanceled) && !errors.Is(err, errcode.ErrTransferFail) {
		t.Fatalf("cancelled mid-payload: %v", err)
	}
	snapshot := bytes.Clone(buf)
	release()
	<-dc.readerDone // the reader has stopped for good
	if !bytes.Equal(buf, snapshot) {
		t.Fatal("the buffer changed after the call returned")
	}
	guard()
}

// A call whose context has already ended fails at once and leaves the
// connection usable for the others.
func TestDataPlaneEndedContext(t *testing.T) {
	h := newMemHandler(1 << 20)
	dc := dial(t, serveMem(t, h))
	ctx, cancel := context.WithTimeout(context.Background(), -time.Second)
	defer cancel()
	val := rnd(1000)
	if err := dc.Write(ctx, "seg", 0, val, crc32c.Checksum(val), 1); !errors.Is(err, errcode.ErrContextCanceled) {
		t.Fatalf("write with an ended context: %v", err)
	}
	if err := dc.Write(context.Background(), "seg", 0, val, crc32c.Checksum(val), 1); err != nil || dc.Broken() {
		t.Fatalf("the next call: %v", err)
	}
}

// A caller that gives up before its reply arrives is forgotten: the late
// reply is read and dropped, its bytes reach no buffer, and the next call
// on the same connection gets its own reply.
func TestDataPlaneAbandonedCall(t *testing.T) {
	const n = 100 << 10
	val := rnd(n)
	answer := make(chan struct{})
	dc := dial(t, fakeNode(t, func(c net.Conn, h Header, _ Request) {
		<-answer
		c.Write(replyHeader(h, n)) // the late reply to the abandoned call
		c.Write(bytes.Repeat([]byte{0xEE}, n))
		h2, _, err := ReadFrameHead(c, make([]byte, HeaderLen), nil)
		if err != nil {
			return
		}
		c.Write(replyHeader(h2, n))
		c.Write(val)
		io.Copy(io.Discard, c)
	}))
	first, guard := guarded(t, n)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if err := dc.ReadRange(ctx, "seg", 0, first, 0); !errors.Is(err, errcode.ErrContextCanceled) {
		t.Fatalf("abandoned call: %v", err)
	}
	close(answer)
	second := make([]byte, n)
	if err := dc.ReadRange(context.Background(), "seg", 0, second, crc32c.Checksum(val)); err != nil || !bytes.Equal(second, val) {
		t.Fatalf("the next call: %v", err)
	}
	if bytes.IndexByte(first, 0xEE) >= 0 {
		t.Fatal("the late reply reached the abandoned buffer")
	}
	guard()
}

// A client that breaks the protocol (a payload on a read, a reply, bad
// metadata) is answered with the reason and the connection closed.
func TestDataServerRefusesMalformedRequests(t *testing.T) {
	addr := serveMem(t, newMemHandler(1<<20))
	for name, frame := range map[string][]byte{
		"read with a payload": encodeFrame(Header{Op: OpReadRange, ID: 1}, (&Request{Op: OpReadRange, Segment: "seg", Length: 1}).AppendMeta(nil), []byte("x")),
		"a reply":             encodeFrame(Header{Op: OpReadRange | ReplyBit, ID: 1}, nil, nil),
		"short metadata":      encodeFrame(Header{Op: OpReadRange, ID: 1}, []byte("short"), nil),
	} {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		hi := hello()
		c.Write(hi[:])
		io.ReadFull(c, make([]byte, HelloLen))
		c.Write(frame)
		rh, rm, err := ReadFrameHead(c, make([]byte, HeaderLen), nil)
		if err != nil || rh.Status != errcode.TransferFail || len(rm) == 0 {
			t.Errorf("%s: %+v %q %v", name, rh, rm, err)
		}
		if _, err := c.Read(make([]byte, 1)); err != io.EOF {
			t.Errorf("%s: connection not closed: %v", name, err)
		}
		c.Close()
	}
}

// Many calls in flight on one connection, SSD reads answered out of order
// (each waits for the next key's read to start), memory reads between
// them: every caller gets its own bytes.
func TestDataPlanePipelined(t *testing.T) {
	h := newMemHandler(4 << 20)
	const k = 16
	vals := make([][]byte, k)
	started := make([]chan struct{}, k+1)
	for i := range vals {
		vals[i] = rnd(10<<10 + i)
		h.ssd[fmt.Sprint(i)] = vals[i]
		started[i] = make(chan struct{})
	}
	started[k] = make(chan struct{})
	close(started[k])
	h.ssdDelay = func(key []byte) {
		var i int
		fmt.Sscan(string(key), &i)
		close(started[i])
		if i < 7 { // the first seven wait for their successor: replies come back reversed
			<-started[i+1]
		}
	}
	dc := dial(t, serveMem(t, h))
	ctx := context.Background()
	seg := rnd(1 << 20)
	if err := dc.Write(ctx, "seg", 0, seg, crc32c.Checksum(seg), 1); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errc := make(chan error, 2*k)
	for i := 0; i < k; i++ {
		wg.Add(2)
		go func() {
			defer wg.Done()
			buf := make([]byte, len(vals[i]))
			if err := dc.ReadSSD(ctx, []byte(fmt.Sprint(i)), buf, crc32c.Checksum(vals[i])); err != nil {
				errc <- err
			}
		}()
		go func() {
			defer wg.Done()
			off := i * 4096
			buf := make([]byte, 64<<10)
			if err := dc.ReadRange(ctx, "seg", int64(off), buf, crc32c.Checksum(seg[off:off+len(buf)])); err != nil {
				errc <- err
			}
		}()
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Error(err)
	}
}

// DataPool: one connection per slot, a broken one replaced, Close final.
func TestDataPool(t *testing.T) {
	h := newMemHandler(1 << 20)
	addr := serveMem(t, h)
	p := &DataPool{ConnsPerNode: 2}
	ctx := context.Background()
	a, err := p.Get(ctx, addr)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := p.Get(ctx, addr)
	c, _ := p.Get(ctx, addr)
	if a == b || c != a {
		t.Fatalf("slots: %p %p %p", a, b, c)
	}
	a.Close()
	d, err := p.Get(ctx, addr)
	if err != nil || d == a || d.Broken() {
		t.Fatalf("broken connection not replaced: %v", err)
	}
	p.Close()
	if _, err := p.Get(ctx, addr); !errors.Is(err, ErrClosed) {
		t.Fatalf("after Close: %v", err)
	}
	if !d.Broken() || !b.Broken() {
		t.Fatal("Close left connections open")
	}
	if _, err := p.Get(ctx, "127.0.0.1:1"); !errors.Is(err, ErrClosed) {
		t.Fatalf("closed pool dialled: %v", err)
	}
	q := &DataPool{DialTimeout: time.Second}
	if _, err := q.Get(ctx, "127.0.0.1:1"); !errors.Is(err, errcode.ErrRPCFail) {
		t.Fatalf("dial of a closed port: %v", err)
	}
}

// Concurrent Gets of a fresh pool share one dial per slot; a node that
// accepts but never answers (a stopped process) holds a caller no longer
// than its context, and callers waiting for that dial leave with theirs.
func TestDataPoolDials(t *testing.T) {
	h := newMemHandler(1 << 20)
	addr := serveMem(t, h)
	p := &DataPool{ConnsPerNode: 2}
	defer p.Close()
	var wg sync.WaitGroup
	conns := make([]*DataConn, 32)
	for i := range conns {
		wg.Go(func() {
			c, err := p.Get(context.Background(), addr)
			if err != nil {
				t.Error(err)
			}
			conns[i] = c
		})
	}
	wg.Wait()
	distinct := map[*DataConn]bool{}
	for _, c := range conns {
		distinct[c] = true
	}
	if len(distinct) != 2 {
		t.Fatalf("%d connections for 2 slots", len(distinct))
	}

	mute, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var held []net.Conn // accepted, held open, never answered
	acceptDone := make(chan struct{})
	go func() {
		defer close(acceptDone)
		for {
			c, err := mute.Accept()
			if err != nil {
				return
			}
			held = append(held, c)
		}
	}()
	defer func() {
		mute.Close()
		<-acceptDone
		for _, c := range held {
			c.Close()
		}
	}()
	q := &DataPool{ConnsPerNode: 1, DialTimeout: time.Minute}
	defer q.Close()
	silent := mute.Addr().String()
	dialCtx, cancelDial := context.WithCancel(context.Background())
	dialer := make(chan error, 1)
	go func() {
		_, err := q.Get(dialCtx, silent)
		dialer <- err
	}()
	// waitDial waits until the slot's dial has that many waiters.
	waitDial := func(waiters int) {
		for ok := false; !ok; runtime.Gosched() {
			n, _ := q.node(silent)
			n.mu.Lock()
			d := n.slots[0].dialing
			ok = d != nil && d.waiters == waiters
			n.mu.Unlock()
		}
	}
	waitDial(0)
	// Waiters leave with their own context while the dial still hangs.
	waiters := make(chan error, 2)
	for range 2 {
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
			defer cancel()
			_, err := q.Get(ctx, silent)
			waiters <- err
		}()
	}
	for range 2 {
		select {
		case err := <-waiters:
			if !errors.Is(err, errcode.ErrContextCanceled) {
				t.Fatalf("waiter: %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("a waiter is stuck behind a hanging dial")
		}
	}
	// A waiter without a deadline shares the dial's outcome rather than
	// dialling the silent node again.
	sharer := make(chan error, 1)
	go func() {
		_, err := q.Get(context.Background(), silent)
		sharer <- err
	}()
	waitDial(1)
	// The dialer leaves when its context ends, not after DialTimeout.
	cancelDial()
	for name, ch := range map[string]chan error{"the dial of a silent node": dialer, "a waiter sharing the dial": sharer} {
		select {
		case err := <-ch:
			if err == nil {
				t.Fatalf("%s gave a connection", name)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%s outlived the dialler's context", name)
		}
	}
}

// A node that is not a data-plane peer (here a plain gRPC server) is a
// clear error at dial time.
func TestDataDialWrongPeer(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	go func() { _ = srv.Serve(lis) }()
	defer srv.Stop()
	_, err = DialData(context.Background(), lis.Addr().String(), 2*time.Second)
	if err == nil || (!errors.Is(err, errcode.ErrRPCFail) && !errors.Is(err, ErrFrame)) {
		t.Fatalf("dial of a gRPC-only server: %v", err)
	}
}

// A client and a node of different data protocol versions refuse each
// other naming both versions: the node answers its own hello before it
// hangs up, and a client that reads another version's hello refuses it.
func TestDataPlaneVersionMismatch(t *testing.T) {
	addr := serveMem(t, newMemHandler(1<<20))
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Write([]byte{'T', 'S', 'D', 'P', DataVersion + 1, 0, 0, 0}); err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(c)
	if h := hello(); err != nil || !bytes.Equal(got, h[:]) {
		t.Fatalf("node's answer to a hello of another version: %q %v, want its hello and the end", got, err)
	}

	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	go func() {
		c, err := lis.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		var h [HelloLen]byte
		_, _ = io.ReadFull(c, h[:])
		_, _ = c.Write([]byte{'T', 'S', 'D', 'P', DataVersion + 1, 0, 0, 0})
	}()
	_, err = DialData(context.Background(), lis.Addr().String(), 5*time.Second)
	if !errors.Is(err, errcode.ErrVersionMismatch) || !strings.Contains(err.Error(), fmt.Sprintf("version %d, this build version %d", DataVersion+1, DataVersion)) {
		t.Fatalf("dial of a node of another version: %v", err)
	}
}

// The server refuses a malformed request with a reply that says why, then
// hangs up; Close waits for a request in progress and closes idle
// connections.
func TestDataServerRefusesAndCloses(t *testing.T) {
	h := newMemHandler(1 << 20)
	release := make(chan struct{})
	var readDone atomic.Bool // the slow read's handler got past release
	h.ssd["slow"] = []byte("bytes")
	h.ssdDelay = func([]byte) { <-release; readDone.Store(true) }
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := NewDataServer(h, DataServerOptions{Logger: quiet})
	m := NewMux(lis, srv)
	addr := lis.Addr().String()

	// A write without a CRC: refused with a message, then the hang-up.
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	hi := hello()
	c.Write(hi[:])
	io.ReadFull(c, make([]byte, HelloLen))
	meta := (&Request{Op: OpWrite, Segment: "seg", Token: 1}).AppendMeta(nil)
	c.Write(encodeFrame(Header{Op: OpWrite, ID: 5}, meta, []byte("abc")))
	rh, rm, err := ReadFrameHead(c, make([]byte, HeaderLen), nil)
	if err != nil || rh.ID != 5 || rh.Status != errcode.TransferFail || !bytes.Contains(rm, []byte("without a CRC32C")) {
		t.Fatalf("refusal: %+v %q %v", rh, rm, err)
	}
	if _, err := c.Read(make([]byte, 1)); err != io.EOF {
		t.Fatalf("connection not closed after the refusal: %v", err)
	}
	c.Close()
	if h.writes.Load() != 0 {
		t.Fatal("the refused write reached the handler")
	}

	// Close: one connection idle, one with an SSD read in progress.
	idle := dial(t, addr)
	busy := dial(t, addr)
	res := make(chan error, 1)
	go func() {
		res <- busy.ReadSSD(context.Background(), []byte("slow"), make([]byte, 5), crc32c.Checksum([]byte("bytes")))
	}()
	testkit.Eventually(t, "the SSD read reaches the server", func() bool { return srv.inflight() != 0 })
	closed := make(chan struct{})
	var closedAfterRead bool // written before close(closed)
	go func() { m.Close(); closedAfterRead = readDone.Load(); close(closed) }()
	// The idle connection's end shows Close under way; the read is still
	// held by release, so Close must not have returned, and when it does
	// the read's handler must have finished before it.
	<-idle.readerDone
	select {
	case <-closed:
		t.Fatal("Close did not wait for the read in progress")
	default:
	}
	close(release)
	<-closed
	if !closedAfterRead {
		t.Fatal("Close returned before the read in progress finished")
	}
	if err := <-res; err != nil {
		t.Fatalf("the read in progress at Close: %v", err)
	}
	if !idle.Broken() {
		t.Fatal("idle connection survived Close")
	}
	if _, err := DialData(context.Background(), addr, time.Second); err == nil {
		t.Fatal("dial after Close succeeded")
	}
}

// A write the handler refuses mid-payload (its put lost the range between
// two chunks) is aborted, answered with the handler's error, and the rest
// of its payload is read and dropped: the connection carries the next
// write. A write the handler refuses at once never reaches Fill.
func TestDataPlaneWriteRefusedMidPayload(t *testing.T) {
	h := newMemHandler(4 << 20)
	h.setFailFill(func(pos int64) bool { return pos >= 256<<10 })
	dc := dial(t, serveMem(t, h))
	ctx := context.Background()
	val := rnd(2 << 20)
	err := dc.Write(ctx, "seg", 0, val, crc32c.Checksum(val), 1)
	if !errors.Is(err, errcode.ErrInvalidParams) || !strings.Contains(err.Error(), "write refused") {
		t.Fatalf("write refused mid-payload: %v", err)
	}
	if h.writes.Load() != 0 || h.aborts.Load() != 1 || dc.Broken() {
		t.Fatalf("commits %d, aborts %d, broken %v", h.writes.Load(), h.aborts.Load(), dc.Broken())
	}
	h.setFailFill(nil)
	if err := dc.Write(ctx, "seg", 0, val, crc32c.Checksum(val), 2); err != nil || h.writes.Load() != 1 {
		t.Fatalf("the next write on the connection: %v", err)
	}
	if err := dc.Write(ctx, "seg", 0, val, crc32c.Checksum(val), 0); !errors.Is(err, errcode.ErrInvalidParams) || h.aborts.Load() != 1 {
		t.Fatalf("a write refused at once: %v (aborts %d)", err, h.aborts.Load())
	}
	buf := make([]byte, len(val))
	if err := dc.ReadRange(ctx, "seg", 0, buf, crc32c.Checksum(val)); err != nil {
		t.Fatal(err)
	}
}

// A connection without a descriptor (an in-memory pipe) receives writes
// through a bounce buffer, with the same checks: a whole write is
// committed, a write refused mid-payload is aborted and its rest dropped,
// a wrong CRC32C commits nothing.
func TestDataServerWriteWithoutDescriptor(t *testing.T) {
	h := newMemHandler(4 << 20)
	srv := NewDataServer(h, DataServerOptions{Logger: quiet})
	cli, sv := net.Pipe()
	go srv.ServeConn(sv, nil)
	t.Cleanup(func() { cli.Close(); srv.Close() })
	hi := hello()
	go cli.Write(hi[:])
	if _, err := io.ReadFull(cli, hi[:]); err != nil {
		t.Fatal(err)
	}
	val := rnd(600 << 10)
	write := func(token uint64, crc uint32) Header {
		t.Helper()
		meta := (&Request{Op: OpWrite, Segment: "seg", Offset: 4096, Token: token}).AppendMeta(nil)
		go cli.Write(encodeFrame(Header{Op: OpWrite, ID: uint32(token), Flags: FlagCRC, CRC: crc}, meta, val))
		rh, _, err := ReadFrameHead(cli, make([]byte, HeaderLen), nil)
		if err != nil || rh.ID != uint32(token) {
			t.Fatalf("reply: %+v %v", rh, err)
		}
		return rh
	}
	if rh := write(1, crc32c.Checksum(val)); rh.Status != errcode.OK || h.writes.Load() != 1 || !bytes.Equal(h.seg[4096:4096+len(val)], val) {
		t.Fatalf("whole write: status %d, commits %d", rh.Status, h.writes.Load())
	}
	if rh := write(2, crc32c.Checksum(val)^1); rh.Status != errcode.ChecksumMismatch || h.writes.Load() != 1 {
		t.Fatalf("wrong CRC: status %d, commits %d", rh.Status, h.writes.Load())
	}
	h.setFailFill(func(pos int64) bool { return pos >= 128<<10 })
	if rh := write(3, crc32c.Checksum(val)); rh.Status != errcode.InvalidParams || h.aborts.Load() != 2 {
		t.Fatalf("refused mid-payload: status %d, aborts %d", rh.Status, h.aborts.Load())
	}
	h.setFailFill(nil)
	if rh := write(4, crc32c.Checksum(val)); rh.Status != errcode.OK || h.writes.Load() != 2 {
		t.Fatalf("the write after: status %d", rh.Status)
	}
}

// ReadRanges writes every request before awaiting a reply; each read gets
// its own result (a wrong CRC32C, a range the node refuses), every buffer
// exactly its value and nothing beyond, and the connection stays usable.
func TestDataPlaneReadRanges(t *testing.T) {
	h := newMemHandler(8 << 20)
	copy(h.seg, rnd(len(h.seg)))
	dc := dial(t, serveMem(t, h))
	ctx := context.Background()
	spans := []struct {
		off, n int64
		badCRC bool
	}{{0, 2 << 20, false}, {4096, 1000, true}, {8<<20 - 10, 20, false}, {3 << 20, 300 << 10, false}, {5, 1, false}}
	rs := make([]RangeRead, len(spans))
	guards := make([]func(), len(spans))
	for i, s := range spans {
		rs[i].Segment, rs[i].Offset = "seg", s.off
		rs[i].Buf, guards[i] = guarded(t, int(s.n))
		if s.off+s.n <= int64(len(h.seg)) {
			rs[i].CRC = crc32c.Checksum(h.seg[s.off : s.off+s.n])
		}
		if s.badCRC {
			rs[i].CRC ^= 1
		}
	}
	dc.ReadRanges(ctx, rs)
	for i, s := range spans {
		guards[i]()
		switch {
		case s.badCRC:
			if !errors.Is(rs[i].Err, ErrBadChecksum) {
				t.Errorf("read %d with a wrong CRC: %v", i, rs[i].Err)
			}
		case s.off+s.n > int64(len(h.seg)):
			if !errors.Is(rs[i].Err, errcode.ErrInvalidParams) {
				t.Errorf("read %d out of range: %v", i, rs[i].Err)
			}
		case rs[i].Err != nil || !bytes.Equal(rs[i].Buf, h.seg[s.off:s.off+s.n]):
			t.Errorf("read %d: %v", i, rs[i].Err)
		}
	}
	if dc.Broken() {
		t.Fatal("the connection broke")
	}
	buf := make([]byte, 10)
	if err := dc.ReadRange(ctx, "seg", 0, buf, crc32c.Checksum(h.seg[:10])); err != nil {
		t.Fatal(err)
	}
}

// A node that answers the second of several pipelined reads with another
// length than asked breaks the connection: the first read succeeded, the
// others fail, and no buffer is written beyond its length.
func TestDataPlaneReadRangesLyingNode(t *testing.T) {
	val := rnd(64 << 10)
	addr := fakeNode(t, func(c net.Conn, h Header, req Request) {
		c.Write(replyHeader(h, uint64(len(val))))
		c.Write(val)
		h.ID++
		c.Write(replyHeader(h, uint64(len(val))+1)) // asked: len(val)
		c.Write(val)
		c.Write(val[:1])
		io.Copy(io.Discard, c)
	})
	dc := dial(t, addr)
	rs := make([]RangeRead, 3)
	guards := make([]func(), 3)
	for i := range rs {
		rs[i] = RangeRead{Segment: "seg", Offset: int64(i) << 20, CRC: crc32c.Checksum(val)}
		rs[i].Buf, guards[i] = guarded(t, len(val))
	}
	dc.ReadRanges(context.Background(), rs)
	for _, g := range guards {
		g()
	}
	if rs[0].Err != nil || !bytes.Equal(rs[0].Buf, val) {
		t.Fatalf("first read: %v", rs[0].Err)
	}
	for i := 1; i < 3; i++ {
		if !errors.Is(rs[i].Err, errcode.ErrTransferFail) {
			t.Errorf("read %d after the lying reply: %v", i, rs[i].Err)
		}
	}
	if !dc.Broken() {
		t.Fatal("the connection survived a reply of the wrong length")
	}
}

// A ReadRanges whose context ends while the second payload arrives
// returns only once no buffer can change any more: the first read
// succeeded, the others failed, and bytes the node sends afterwards land
// nowhere.
func TestDataPlaneReadRangesCancelMidPayload(t *testing.T) {
	const n = 1 << 20
	val := rnd(n)
	sentHalf := make(chan struct{})
	finish := make(chan struct{})
	dc := dial(t, fakeNode(t, func(c net.Conn, h Header, _ Request) {
		c.Write(replyHeader(h, n))
		c.Write(val)
		h.ID++
		c.Write(replyHeader(h, n))
		c.Write(val[:n/2])
		close(sentHalf)
		<-finish
		c.Write(val[n/2:]) // after the caller returned
		h.ID++
		c.Write(replyHeader(h, n))
		c.Write(val)
	}))
	rs := make([]RangeRead, 3)
	guards := make([]func(), 3)
	for i := range rs {
		rs[i] = RangeRead{Segment: "seg", CRC: crc32c.Checksum(val)}
		rs[i].Buf, guards[i] = guarded(t, n)
	}
	release := sync.OnceFunc(func() { close(finish) })
	t.Cleanup(release) // before fakeNode's cleanup waits for the node
	ctx, cancel := context.WithCancel(context.Background())
	go cancelWhileFilling(dc, 2, sentHalf, cancel) // the first read completed
	dc.ReadRanges(ctx, rs)
	if rs[0].Err != nil || !bytes.Equal(rs[0].Buf, val) {
		t.Fatalf("first read: %v", rs[0].Err)
	}
	snapshots := make([][]byte, 3)
	for i := 1; i < 3; i++ {
		if !errors.Is(rs[i].Err, errcode.ErrContextCanceled) && !errors.Is(rs[i].Err, errcode.ErrTransferFail) {
			t.Fatalf("read %d cancelled: %v", i, rs[i].Err)
		}
		snapshots[i] = bytes.Clone(rs[i].Buf)
	}
	release()
	dc.Close() // waits for the reader (stopped already if it was mid-payload)
	for i := 1; i < 3; i++ {
		if !bytes.Equal(rs[i].Buf, snapshots[i]) {
			t.Fatalf("buffer %d changed after ReadRanges returned", i)
		}
	}
	for _, g := range guards {
		g()
	}
}
