package wire

import (
	"bytes"
	"context"
	"errors"
	"net"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tierstore/tierstore/internal/crc32c"
	"github.com/tierstore/tierstore/internal/errcode"
)

// acquireOwn is Acquire with WithCallerThread, failing the test on error.
func acquireOwn(t *testing.T, p *DataPool, ctx context.Context, addr string) *DataConn {
	t.Helper()
	dc, err := p.Acquire(WithCallerThread(ctx), addr)
	if err != nil {
		t.Fatal(err)
	}
	return dc
}

// A call marked WithCallerThread gets a connection of its own, without a
// reader goroutine, on which writes, reads (one buffer, scattered parts
// through readv, SSD, several ranges at once) and refusals cross as on a
// shared one; given back it serves the next caller; two callers at once
// get two. Unmarked calls share Get's connections.
func TestOwnConnRoundTrip(t *testing.T) {
	h := newMemHandler(8 << 20)
	addr := serveMem(t, h)
	p := &DataPool{}
	t.Cleanup(p.Close)
	ctx := context.Background()

	dc := acquireOwn(t, p, ctx, addr)
	if dc.own == nil {
		t.Fatal("a marked Acquire returned a shared connection")
	}
	val := rnd(3<<20 + 17)
	crc := crc32c.Checksum(val)
	if err := dc.Write(ctx, "seg", 4096, val, crc, 1); err != nil {
		t.Fatal(err)
	}
	buf, guard := guarded(t, len(val))
	if err := dc.ReadRange(ctx, "seg", 4096, buf, crc); err != nil || !bytes.Equal(buf, val) {
		t.Fatalf("read back: %v", err)
	}
	guard()
	parts := [][]byte{make([]byte, 1000), make([]byte, 1<<20), make([]byte, len(val)-1000-1<<20)}
	if err := dc.ReadRangeParts(ctx, "seg", 4096, parts, crc, nil); err != nil || !bytes.Equal(bytes.Join(parts, nil), val) {
		t.Fatalf("scattered read: %v", err)
	}
	h.setSSD("k", val[:5000])
	sb := make([]byte, 5000)
	if err := dc.ReadSSD(ctx, []byte("k"), sb, crc32c.Checksum(val[:5000])); err != nil || !bytes.Equal(sb, val[:5000]) {
		t.Fatalf("ssd read: %v", err)
	}
	if err := dc.ReadSSD(ctx, []byte("missing"), sb, 0); !errors.Is(err, errcode.ErrObjectNotFound) || dc.Broken() {
		t.Fatalf("missing SSD key: %v (broken %v)", err, dc.Broken())
	}
	rs := make([]RangeRead, 3)
	for i := range rs {
		rs[i] = RangeRead{Segment: "seg", Offset: 4096 + int64(i)<<20, Buf: make([]byte, 1<<19), CRC: crc32c.Checksum(val[i<<20 : i<<20+1<<19])}
	}
	dc.ReadRanges(ctx, rs)
	for i, r := range rs {
		if r.Err != nil || !bytes.Equal(r.Buf, val[i<<20:i<<20+1<<19]) {
			t.Fatalf("range %d: %v", i, r.Err)
		}
	}

	other := acquireOwn(t, p, ctx, addr)
	if other == dc || other.own == nil {
		t.Fatal("two callers at once share an own connection")
	}
	other.Release()
	dc.Release()
	again := acquireOwn(t, p, ctx, addr)
	if again != dc && again != other {
		t.Fatal("a given-back connection was not reused")
	}
	again.Release()

	shared, err := p.Acquire(ctx, addr)
	if err != nil || shared.own != nil {
		t.Fatalf("an unmarked Acquire: %v (own %v)", err, shared != nil && shared.own != nil)
	}
	shared.Release()
	if g, _ := p.Get(ctx, addr); g.own != nil {
		t.Fatal("Get returned an own connection")
	}
}

// A caller whose context ends while it waits for its reply on its own
// connection (a node that never answers) returns CONTEXT_CANCELED, by
// deadline and by cancellation; the connection is broken and not kept.
func TestOwnConnContextEnds(t *testing.T) {
	for _, mark := range []string{"thread", "reads"} {
		for _, how := range []string{"deadline", "cancel"} {
			t.Run(mark+"/"+how, func(t *testing.T) { ownConnContextEnds(t, mark, how) })
		}
	}
}

// ownConnContextEnds is TestOwnConnContextEnds for a call marked
// WithCallerThread (thread) or WithCallerReads (reads), its context
// ending by deadline or cancellation.
func ownConnContextEnds(t *testing.T, mark, how string) {
	seen := make(chan struct{})
	addr := fakeNode(t, func(c net.Conn, h Header, req Request) {
		close(seen)
		_, _ = c.Read(make([]byte, 1)) // until the client closes
	})
	p := &DataPool{}
	t.Cleanup(p.Close)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if how == "deadline" {
		ctx, cancel = context.WithTimeout(ctx, 100*time.Millisecond)
		defer cancel()
	} else {
		go func() { <-seen; cancel() }()
	}
	if mark == "reads" {
		ctx = WithCallerReads(ctx)
	} else {
		ctx = WithCallerThread(ctx)
	}
	dc, err := p.Acquire(ctx, addr)
	if err != nil || dc.own == nil {
		t.Fatalf("Acquire: %v (own %v)", err, dc != nil && dc.own != nil)
	}
	err = dc.ReadRange(ctx, "seg", 0, make([]byte, 100), 0)
	if !errors.Is(err, errcode.ErrContextCanceled) || !dc.Broken() {
		t.Fatalf("got %v (broken %v), want CONTEXT_CANCELED and a broken connection", err, dc.Broken())
	}
	dc.Release()
	p.mu.Lock()
	kept := len(p.own[addr])
	p.mu.Unlock()
	if kept != 0 {
		t.Fatal("a broken own connection was kept")
	}
}

// An idle own connection the node closed (a node restart) is not handed
// out again: the next caller gets a new one, and its call succeeds.
func TestOwnConnIdleClosedByNode(t *testing.T) {
	h := newMemHandler(1 << 20)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	accepted := make(chan net.Conn, 4)
	m := NewMux(recordingListener{lis, accepted}, NewDataServer(h, DataServerOptions{Logger: quiet}))
	t.Cleanup(func() { m.Close() })
	addr := lis.Addr().String()
	p := &DataPool{}
	t.Cleanup(p.Close)
	ctx := context.Background()
	val := rnd(4096)
	dc := acquireOwn(t, p, ctx, addr)
	if err := dc.Write(ctx, "seg", 0, val, crc32c.Checksum(val), 1); err != nil {
		t.Fatal(err)
	}
	dc.Release()
	(<-accepted).Close() // the node's side of dc
	// Wait until the close reached dc's socket (no sleep: poll it).
	if err := dc.own.raw.Control(func(fd uintptr) {
		_, _ = unix.Poll([]unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}, 5000)
	}); err != nil {
		t.Fatal(err)
	}
	next := acquireOwn(t, p, ctx, addr)
	defer next.Release()
	if next == dc {
		t.Fatal("an own connection the node closed was handed out again")
	}
	buf := make([]byte, len(val))
	if err := next.ReadRange(ctx, "seg", 0, buf, crc32c.Checksum(val)); err != nil || !bytes.Equal(buf, val) {
		t.Fatalf("read on the new connection: %v", err)
	}
}

// recordingListener hands every accepted connection to the test as well.
type recordingListener struct {
	net.Listener
	accepted chan<- net.Conn
}

func (l recordingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.accepted <- c
	}
	return c, err
}

// Callers on their own connections at once, each reading and writing its
// own range, get their own bytes; the pool keeps at most OwnIdle idle.
func TestOwnConnConcurrent(t *testing.T) {
	const callers, rounds, size = 12, 20, 64 << 10
	h := newMemHandler(callers * size)
	addr := serveMem(t, h)
	p := &DataPool{}
	t.Cleanup(p.Close)
	poundPool(t, p, WithCallerThread(context.Background()), addr, callers, rounds, size, nil)
	p.mu.Lock()
	defer p.mu.Unlock()
	if n := len(p.own[addr]); n > OwnIdle || n == 0 {
		t.Fatalf("%d idle own connections kept, want 1..%d", n, OwnIdle)
	}
}

// poundPool has callers goroutines each write and read back its own range
// of size bytes rounds times, every round on a connection from
// p.Acquire(ctx) given back (Release) after it; seen, when not nil, is told every
// connection. It fails t on any error or wrong byte.
func poundPool(t *testing.T, p *DataPool, ctx context.Context, addr string, callers, rounds, size int, seen func(*DataConn)) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, callers)
	for w := range callers {
		wg.Go(func() {
			buf := make([]byte, size)
			for r := range rounds {
				val := rnd(size)
				val[0] = byte(w + r)
				crc := crc32c.Checksum(val)
				dc, err := p.Acquire(ctx, addr)
				if err != nil {
					errs <- err
					return
				}
				if seen != nil {
					seen(dc)
				}
				err = dc.Write(ctx, "seg", int64(w*size), val, crc, 1)
				if err == nil {
					err = dc.ReadRange(ctx, "seg", int64(w*size), buf, crc)
				}
				dc.Release()
				if err == nil && !bytes.Equal(buf, val) {
					err = errors.New("other bytes read back")
				}
				if err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

// A call marked WithCallerReads gets a connection of its own and reads its
// reply on its own goroutine through the runtime's poller (no poll(2));
// writes and reads cross as on a shared connection. At most OwnBusy such
// calls hold own connections at once: the next shares, until one is given
// back. WithCallerThread calls are not bounded.
func TestCallerReadsOwnConn(t *testing.T) {
	h := newMemHandler(4 << 20)
	addr := serveMem(t, h)
	p := &DataPool{}
	t.Cleanup(p.Close)
	ctx := WithCallerReads(context.Background())
	dc, err := p.Acquire(ctx, addr)
	if err != nil || dc.own == nil {
		t.Fatalf("a WithCallerReads Acquire: %v (own %v)", err, dc != nil && dc.own != nil)
	}
	val := rnd(2<<20 + 5)
	crc := crc32c.Checksum(val)
	if err := dc.Write(ctx, "seg", 0, val, crc, 1); err != nil {
		t.Fatal(err)
	}
	parts := [][]byte{make([]byte, 1<<20), make([]byte, len(val)-1<<20)}
	if err := dc.ReadRangeParts(ctx, "seg", 0, parts, crc, nil); err != nil || !bytes.Equal(bytes.Join(parts, nil), val) {
		t.Fatalf("scattered read: %v", err)
	}
	if !dc.own.runtime {
		t.Fatal("a WithCallerReads call waited with poll(2), not through the runtime's poller")
	}
	held := []*DataConn{dc}
	for len(held) < OwnBusy {
		o, err := p.Acquire(ctx, addr)
		if err != nil || o.own == nil {
			t.Fatalf("own connection %d of %d: %v", len(held)+1, OwnBusy, err)
		}
		held = append(held, o)
	}
	shared, err := p.Acquire(ctx, addr)
	if err != nil || shared.own != nil {
		t.Fatalf("Acquire beyond OwnBusy: %v (own %v), want a shared connection", err, shared != nil && shared.own != nil)
	}
	buf := make([]byte, len(val))
	if err := shared.ReadRange(ctx, "seg", 0, buf, crc); err != nil || !bytes.Equal(buf, val) {
		t.Fatalf("read on the shared connection: %v", err)
	}
	shared.Release()
	thread, err := p.Acquire(WithCallerThread(context.Background()), addr)
	if err != nil || thread.own == nil {
		t.Fatalf("a WithCallerThread Acquire beyond OwnBusy: %v, want an own connection", err)
	}
	thread.Release()
	held[0].Release()
	again, err := p.Acquire(ctx, addr)
	if err != nil || again.own == nil {
		t.Fatalf("Acquire after a give-back: %v, want an own connection", err)
	}
	again.Release()
	for _, o := range held[1:] {
		o.Release()
	}
	if n := p.ownBusy.Load(); n != 0 {
		t.Fatalf("%d own connections counted in use after every release", n)
	}
}

// An own connection a WithCallerReads call used, with a deadline that has
// passed since, serves a WithCallerThread call (the Python package's
// direct calls and its queued ones share a pool): the earlier call's
// deadline is not left on the socket.
func TestOwnConnDeadlineNotLeftBehind(t *testing.T) {
	h := newMemHandler(1 << 20)
	addr := serveMem(t, h)
	p := &DataPool{}
	t.Cleanup(p.Close)
	val := rnd(64 << 10)
	crc := crc32c.Checksum(val)
	short, cancel := context.WithTimeout(WithCallerReads(context.Background()), 200*time.Millisecond)
	defer cancel()
	dc, err := p.Acquire(short, addr)
	if err != nil || dc.own == nil {
		t.Fatalf("Acquire: %v", err)
	}
	if err := dc.Write(short, "seg", 0, val, crc, 1); err != nil {
		t.Fatal(err)
	}
	dc.Release()
	<-short.Done() // the first call's deadline is past
	next := acquireOwn(t, p, context.Background(), addr)
	defer next.Release()
	if next != dc {
		t.Fatal("the idle own connection was not reused")
	}
	buf := make([]byte, len(val))
	if err := next.ReadRange(WithCallerThread(context.Background()), "seg", 0, buf, crc); err != nil || !bytes.Equal(buf, val) {
		t.Fatalf("a call on the caller's thread after an expired deadline: %v", err)
	}
}
