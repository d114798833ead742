package wire

import (
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tierstore/tierstore/internal/crc32c"
	"github.com/tierstore/tierstore/internal/errcode"
	"github.com/tierstore/tierstore/internal/testkit"
)

// limitedServer serves h on 127.0.0.1 with opts and mo, and records what
// Limited and the Mux's Refused are told.
type limitedServer struct {
	addr    string
	srv     *DataServer
	mu      sync.Mutex // protects limited and refused
	limited []error
	refused []error
}

func serveLimited(t *testing.T, h DataHandler, opts DataServerOptions, mo MuxOptions) *limitedServer {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ls := &limitedServer{addr: lis.Addr().String()}
	opts.Logger = quiet
	opts.Limited = func(_ net.Addr, err error) { ls.mu.Lock(); ls.limited = append(ls.limited, err); ls.mu.Unlock() }
	mo.Refused = func(_ net.Addr, err error) { ls.mu.Lock(); ls.refused = append(ls.refused, err); ls.mu.Unlock() }
	ls.srv = NewDataServer(h, opts)
	m := NewMuxWith(lis, ls.srv, mo)
	t.Cleanup(func() { m.Close() })
	return ls
}

// rawData dials addr and exchanges hellos.
func rawData(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	hi := hello()
	if _, err := c.Write(hi[:]); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(c, make([]byte, HelloLen)); err != nil {
		t.Fatal(err)
	}
	return c
}

// A request frame that does not arrive within its deadline (a header sent
// in part, or a write's payload trickled) ends its connection; the write
// is answered PEER_LIMIT_EXCEEDED (ErrSlowFrame) first; both are passed
// to Limited. A connection idle between frames is not timed, and a
// well-behaved client on another connection is served meanwhile.
func TestDataServerSlowFrames(t *testing.T) {
	h := newMemHandler(4 << 20)
	ft := 300 * time.Millisecond
	ls := serveLimited(t, h, DataServerOptions{FrameTimeout: ft}, MuxOptions{})

	// Half a header, then nothing.
	half := rawData(t, ls.addr)
	meta := (&Request{Op: OpReadRange, Segment: "seg", Length: 1}).AppendMeta(nil)
	frame := encodeFrame(Header{Op: OpReadRange, ID: 1}, meta, nil)
	if _, err := half.Write(frame[:HeaderLen/2]); err != nil {
		t.Fatal(err)
	}
	// A write of 64 KiB whose payload stops after 1 KiB.
	trickle := rawData(t, ls.addr)
	val := rnd(64 << 10)
	wmeta := (&Request{Op: OpWrite, Segment: "seg", Token: 1}).AppendMeta(nil)
	wf := encodeFrame(Header{Op: OpWrite, ID: 9, Flags: FlagCRC, CRC: crc32c.Checksum(val)}, wmeta, val)
	if _, err := trickle.Write(wf[:len(wf)-len(val)+1024]); err != nil {
		t.Fatal(err)
	}
	// An idle connection (hello only) and a client that keeps working.
	idle := rawData(t, ls.addr)
	good := dial(t, ls.addr)
	ctx := context.Background()
	buf := make([]byte, 4096)
	start := time.Now()
	for time.Since(start) < 3*ft {
		if err := good.ReadRange(ctx, "seg", 2<<20, buf, crc32c.Checksum(make([]byte, 4096))); err != nil {
			t.Fatalf("a well-behaved read beside slow frames: %v", err)
		}
	}

	_ = trickle.SetReadDeadline(time.Now().Add(5 * time.Second))
	rh, rm, err := ReadFrameHead(trickle, make([]byte, HeaderLen), nil)
	if err != nil || rh.ID != 9 || rh.Status != errcode.PeerLimit {
		t.Fatalf("trickled write: want its reply with PEER_LIMIT_EXCEEDED, got %+v %q %v", rh, rm, err)
	}
	for name, c := range map[string]net.Conn{"half header": half, "trickled write": trickle} {
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := c.Read(make([]byte, 1)); err == nil || isTimeout(err) {
			t.Errorf("%s: connection still open: %v", name, err)
		}
	}
	ls.mu.Lock()
	lim := append([]error(nil), ls.limited...)
	ls.mu.Unlock()
	if len(lim) != 2 {
		t.Fatalf("Limited told %d frames, want 2: %v", len(lim), lim)
	}
	for _, err := range lim {
		if !errors.Is(err, ErrSlowFrame) || !errors.Is(err, errcode.ErrPeerLimit) {
			t.Errorf("Limited got %v, want ErrSlowFrame and PEER_LIMIT_EXCEEDED", err)
		}
	}
	if h.writes.Load() != 0 || h.aborts.Load() != 1 {
		t.Errorf("writes %d, aborts %d: the trickled write must be aborted", h.writes.Load(), h.aborts.Load())
	}
	// The idle connection still works.
	if _, err := idle.Write(frame); err != nil {
		t.Fatal(err)
	}
	if rh, _, err := ReadFrameHead(idle, make([]byte, HeaderLen), nil); err != nil || rh.Status != errcode.OK {
		t.Fatalf("idle connection after %v: %+v %v", time.Since(start), rh, err)
	}
}

// A connection that sends nothing after connecting is closed after the
// Mux's handshake timeout and passed to Refused as a timeout.
func TestMuxHandshakeTimeout(t *testing.T) {
	ls := serveLimited(t, newMemHandler(1<<10), DataServerOptions{}, MuxOptions{HandshakeTimeout: 200 * time.Millisecond})
	c, err := net.Dial("tcp", ls.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Read(make([]byte, 1)); err != io.EOF {
		t.Fatalf("a silent connection: want it closed (EOF), got %v", err)
	}
	ls.mu.Lock()
	defer ls.mu.Unlock()
	if len(ls.refused) != 1 || !isTimeout(ls.refused[0]) {
		t.Fatalf("Refused told %v, want one timeout", ls.refused)
	}
}

// budget is a Hold of a fixed number of bytes for all connections.
type budget struct {
	mu        sync.Mutex // protects held
	held, max int64
	refused   atomic.Int64
	asked     []int64 // under mu
}

func (b *budget) hold(_ net.Conn, n int64) (func(), error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.asked = append(b.asked, n)
	if b.held+n > b.max {
		b.refused.Add(1)
		return nil, errcode.Errorf(errcode.PeerLimit, "test budget")
	}
	b.held += n
	return func() { b.mu.Lock(); b.held -= n; b.mu.Unlock() }, nil
}

// An SSD read holds StreamHold bytes of the peer's budget (its whole
// length when verified) until its reply is out; a read beyond the budget
// is answered PEER_LIMIT_EXCEEDED and the connection carries on.
func TestDataServerHoldsSSDReads(t *testing.T) {
	h := newMemHandler(1 << 10)
	release := make(chan struct{})
	h.setSSD("big", rnd(3<<20))
	h.setSSD("small", rnd(100))
	h.ssdDelay = func(k []byte) {
		if string(k) == "big" {
			<-release
		}
	}
	b := &budget{max: 2 << 20}
	ls := serveLimited(t, h, DataServerOptions{Hold: b.hold, StreamHold: 1 << 20}, MuxOptions{})
	free := sync.OnceFunc(func() { close(release) })
	t.Cleanup(free) // before the server's Close, which waits for the reads
	dc := dial(t, ls.addr)
	ctx := context.Background()
	h.mu.Lock()
	big, small := h.ssd["big"], h.ssd["small"]
	h.mu.Unlock()
	res := make(chan error, 2)
	for range 2 {
		go func() { res <- dc.ReadSSD(ctx, []byte("big"), make([]byte, len(big)), crc32c.Checksum(big)) }()
	}
	testkit.Eventually(t, "two reads hold the budget", func() bool { b.mu.Lock(); defer b.mu.Unlock(); return b.held == 2<<20 })
	// The budget is spent: a third read is refused, named.
	err := dc.ReadSSD(ctx, []byte("small"), make([]byte, len(small)), crc32c.Checksum(small))
	if !errors.Is(err, errcode.ErrPeerLimit) {
		t.Fatalf("a read beyond the budget: want PEER_LIMIT_EXCEEDED, got %v", err)
	}
	free()
	for range 2 {
		if err := <-res; err != nil {
			t.Fatal(err)
		}
	}
	testkit.Eventually(t, "the reads release the budget", func() bool { b.mu.Lock(); defer b.mu.Unlock(); return b.held == 0 })
	// A verified read holds its whole length: 3 MiB > 2 MiB is refused.
	raw := rawData(t, ls.addr)
	vmeta := (&Request{Op: OpReadSSD, Key: []byte("big"), Length: uint64(len(big))}).AppendMeta(nil)
	if _, err := raw.Write(encodeFrame(Header{Op: OpReadSSD, ID: 3, Flags: FlagVerify}, vmeta, nil)); err != nil {
		t.Fatal(err)
	}
	if rh, rm, err := ReadFrameHead(raw, make([]byte, HeaderLen), nil); err != nil || rh.ID != 3 || rh.Status != errcode.PeerLimit {
		t.Fatalf("a verified read of 3 MiB with 2 MiB of budget: want PEER_LIMIT_EXCEEDED, got %+v %q %v", rh, rm, err)
	}
	if err := dc.ReadSSD(ctx, []byte("small"), make([]byte, len(small)), crc32c.Checksum(small)); err != nil {
		t.Fatalf("the connection after the refusals: %v", err)
	}
	// The reply goes out before its read's release (the client may see
	// it first).
	testkit.Eventually(t, "the last read releases its bytes", func() bool { b.mu.Lock(); defer b.mu.Unlock(); return b.held == 0 })
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.refused.Load() != 2 || b.held != 0 {
		t.Fatalf("refused %d (want 2), held %d (want 0), asked %v", b.refused.Load(), b.held, b.asked)
	}
}
