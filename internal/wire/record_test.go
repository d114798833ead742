package wire

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tierstore/tierstore/internal/crc32c"
	"github.com/tierstore/tierstore/internal/errcode"
	"github.com/tierstore/tierstore/internal/tlsconf"
)

// recordPair is both ends of a data connection over TLS switched to the
// record layer: the client's end first.
func recordPair(t *testing.T) (*recordConn, *recordConn) {
	t.Helper()
	cc, sc := tlsPair(t)
	c, err := newRecordConn(cc, true)
	if err != nil {
		t.Fatal(err)
	}
	s, err := newRecordConn(sc, false)
	if err != nil {
		t.Fatal(err)
	}
	return c, s
}

// captureConn keeps what is written to it.
type captureConn struct {
	net.Conn
	out bytes.Buffer
}

func (c *captureConn) Write(p []byte) (int, error) { return c.out.Write(p) }

// sealed returns the records rc makes of each message (each at most
// maxRecord bytes: one record), without sending them.
func sealed(t *testing.T, rc *recordConn, msgs ...[]byte) [][]byte {
	t.Helper()
	sock := rc.Conn
	defer func() { rc.Conn = sock }()
	var out [][]byte
	for _, m := range msgs {
		cap := &captureConn{Conn: sock}
		rc.Conn = cap
		if _, err := rc.Write(m); err != nil {
			t.Fatal(err)
		}
		out = append(out, cap.out.Bytes())
	}
	return out
}

// Bytes of every size cross the record layer both ways intact, read into
// buffers larger and smaller than a record.
func TestRecordRoundTrip(t *testing.T) {
	c, s := recordPair(t)
	for _, n := range []int{1, 100, maxRecord - 1, maxRecord, maxRecord + 1, 1<<20 + 7} {
		for _, dir := range []struct {
			name string
			w, r *recordConn
		}{{"client to node", c, s}, {"node to client", s, c}} {
			want := rnd(n)
			errc := make(chan error, 1)
			go func() { _, err := dir.w.Write(want); errc <- err }()
			got := make([]byte, n)
			// The first half into a buffer that takes whole records,
			// the rest 7 bytes at a time.
			if _, err := io.ReadFull(dir.r, got[:n/2]); err != nil {
				t.Fatal(err)
			}
			for off := n / 2; off < n; {
				k, err := dir.r.Read(got[off:min(n, off+7)])
				if err != nil {
					t.Fatal(err)
				}
				off += k
			}
			if err := <-errc; err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("%s, %d bytes: other bytes arrived", dir.name, n)
			}
		}
	}
}

// Every alteration of the records on the way fails the reader with
// ErrRecordAuth (and errcode.ErrTransferFail), which names the record,
// and closes the connection: the writer's socket sees it end.
func TestRecordTampered(t *testing.T) {
	flip := func(i int) func(recs [][]byte) []byte {
		return func(recs [][]byte) []byte {
			b := bytes.Clone(recs[0])
			if i < 0 {
				i += len(b)
			}
			b[i] ^= 0x10
			return b
		}
	}
	cases := []struct {
		name string
		// alter makes the bytes sent from the records of "one", "two".
		alter func(recs [][]byte) []byte
		// other: the records are sealed in another TLS session.
		other bool
		want  string
	}{
		{"ciphertext", flip(recHdrLen + 1), false, "fail to open"},
		{"tag", flip(-1), false, "fail to open"},
		{"length, smaller", func(recs [][]byte) []byte {
			b := bytes.Clone(recs[0])
			b[0]-- // "one" is 3 bytes: 2, and the tag starts a byte early
			return append(b, recs[1]...)
		}, false, "fail to open"},
		{"length, zero", func(recs [][]byte) []byte {
			b := bytes.Clone(recs[0])
			b[0] = 0
			return b
		}, false, "a record of 0 bytes"},
		{"length, too large", func(recs [][]byte) []byte {
			b := bytes.Clone(recs[0])
			b[3] = 0x80
			return b
		}, false, "a record of 2147483651 bytes"},
		{"replayed", func(recs [][]byte) []byte { return append(bytes.Clone(recs[0]), recs[0]...) }, false, "record 1 "},
		{"reordered", func(recs [][]byte) []byte { return append(bytes.Clone(recs[1]), recs[0]...) }, false, "record 0 "},
		{"dropped", func(recs [][]byte) []byte { return bytes.Clone(recs[1]) }, false, "record 0 "},
		{"another session's key", func(recs [][]byte) []byte { return bytes.Clone(recs[0]) }, true, "record 0 "},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c, s := recordPair(t)
			w := s
			if tc.other {
				_, w = recordPair(t)
			}
			recs := sealed(t, w, []byte("one"), []byte("two"))
			if _, err := s.Conn.Write(tc.alter(recs)); err != nil {
				t.Fatal(err)
			}
			buf := make([]byte, 16)
			var err error
			// The deadline only bounds a failing test (a reader that
			// accepted an altered record waits for more).
			_ = c.Conn.SetReadDeadline(time.Now().Add(10 * time.Second))
			for err == nil { // the replayed and reordered cases read "one" first
				var n int
				n, err = c.Read(buf)
				if err == nil && string(buf[:n]) != "one" {
					t.Fatalf("read %q through altered records", buf[:n])
				}
			}
			if !errors.Is(err, ErrRecordAuth) || !errors.Is(err, errcode.ErrTransferFail) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("read: %v; want ErrRecordAuth and TRANSFER_FAIL, with %q", err, tc.want)
			}
			if _, err2 := c.Read(buf); !errors.Is(err2, ErrRecordAuth) {
				t.Fatalf("the next read: %v; want the same ErrRecordAuth", err2)
			}
			// The reader closed its socket: the writer's side ends (the
			// deadline only bounds a failing test).
			_ = s.Conn.SetReadDeadline(time.Now().Add(10 * time.Second))
			if _, err := io.Copy(io.Discard, s.Conn); err != nil && !strings.Contains(err.Error(), "reset") {
				t.Fatalf("the writer's socket: %v (the reader did not close its connection)", err)
			}
		})
	}
}

// proxy relays TCP connections to a target, one at a time, and can alter
// the stream: flip a byte at a position counted from arming, in either
// direction, or replay to the target what the client sent since arming.
type proxy struct {
	lis    net.Listener
	target string

	mu    sync.Mutex
	flip  [2]int64 // per direction (0: client to target), -1: off; bytes from arming
	rec   bool
	sent  []byte   // client to target since arming, when rec
	up    net.Conn // the current connection to the target
	wg    sync.WaitGroup
	close []net.Conn
}

func newProxy(t *testing.T, target string) *proxy {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{lis: lis, target: target, flip: [2]int64{-1, -1}}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(func() {
		lis.Close()
		p.mu.Lock()
		for _, c := range p.close {
			c.Close()
		}
		p.mu.Unlock()
		p.wg.Wait()
	})
	return p
}

func (p *proxy) addr() string { return p.lis.Addr().String() }

func (p *proxy) accept() {
	defer p.wg.Done()
	for {
		down, err := p.lis.Accept()
		if err != nil {
			return
		}
		up, err := net.Dial("tcp", p.target)
		if err != nil {
			down.Close()
			continue
		}
		p.mu.Lock()
		p.up = up
		p.close = append(p.close, up, down)
		p.mu.Unlock()
		p.wg.Add(2)
		go p.relay(down, up, 0)
		go p.relay(up, down, 1)
	}
}

// relay copies from src to dst, altering as armed; at the end it closes
// both (the other side's end reaches the other peer).
func (p *proxy) relay(src, dst net.Conn, dir int) {
	defer p.wg.Done()
	defer src.Close()
	defer dst.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			b := buf[:n]
			p.mu.Lock()
			if f := p.flip[dir]; f >= 0 {
				if f < int64(n) {
					b[f] ^= 0x01
					p.flip[dir] = -1
				} else {
					p.flip[dir] -= int64(n)
				}
			}
			if dir == 0 && p.rec {
				p.sent = append(p.sent, b...)
			}
			p.mu.Unlock()
			if _, err := dst.Write(b); err != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// armFlip flips the byte at off of what goes in direction dir from now.
func (p *proxy) armFlip(dir int, off int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.flip[dir] = off
}

// record starts keeping what the client sends; replay sends it to the
// target again.
func (p *proxy) record() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.rec, p.sent = true, nil
}

func (p *proxy) replay(t *testing.T) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, err := p.up.Write(p.sent); err != nil {
		t.Fatal(err)
	}
}

// logCatcher passes the records of a logger to a channel.
type logCatcher struct{ ch chan slog.Record }

func (l logCatcher) Enabled(context.Context, slog.Level) bool { return true }
func (l logCatcher) Handle(_ context.Context, r slog.Record) error {
	select {
	case l.ch <- r:
	default:
	}
	return nil
}
func (l logCatcher) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l logCatcher) WithGroup(string) slog.Handler      { return l }

// waitLog returns the first record whose message is msg and whose err
// attribute wraps want.
func waitLog(t *testing.T, ch chan slog.Record, msg string, want error) string {
	t.Helper()
	timeout := time.After(30 * time.Second)
	for {
		select {
		case r := <-ch:
			if r.Message != msg {
				continue
			}
			var text string
			var ok bool
			r.Attrs(func(a slog.Attr) bool {
				if e, isErr := a.Value.Any().(error); a.Key == "err" && isErr {
					text, ok = e.Error(), errors.Is(e, want)
				}
				return true
			})
			if ok {
				return text
			}
		case <-timeout:
			t.Fatalf("no %q log naming %v", msg, want)
		}
	}
}

// Through a node's data server over mutual TLS, with the bytes altered on
// the way by a relay: a reply with one bit flipped fails the client's
// read with ErrRecordAuth and breaks its connection; a write with one bit
// flipped, and a request replayed to the node, end the connection at the
// node, which logs why (ErrRecordAuth) and records nothing of the write.
// A new connection then works.
func TestRecordTamperedThroughNode(t *testing.T) {
	srv, cli := testSources(t)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	logs := make(chan slog.Record, 64)
	h := newMemHandler(4 << 20)
	m := NewMuxWith(lis, NewDataServer(h, DataServerOptions{Logger: slog.New(logCatcher{logs})}), MuxOptions{TLS: srv.ServerConfig()})
	t.Cleanup(func() { m.Close() })
	px := newProxy(t, lis.Addr().String())
	ctx := context.Background()
	dial := func() *DataConn {
		dc, err := DialDataTLS(ctx, px.addr(), 10*time.Second, cli.ClientConfig(tlsconf.Node))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { dc.Close() })
		return dc
	}
	val := rnd(1 << 20)
	crc := crc32c.Checksum(val)

	// A reply altered: the first payload record's 100th byte (after the
	// reply's head record: 4 + 32 + 16 bytes, and the record's length).
	dc := dial()
	if err := dc.Write(ctx, "seg", 0, val, crc, 1); err != nil {
		t.Fatal(err)
	}
	px.armFlip(1, recHdrLen+HeaderLen+tagLen+recHdrLen+100)
	buf := make([]byte, len(val))
	err = dc.ReadRange(ctx, "seg", 0, buf, crc)
	if !errors.Is(err, ErrRecordAuth) || !errors.Is(err, errcode.ErrTransferFail) {
		t.Fatalf("read of an altered reply: %v; want ErrRecordAuth, TRANSFER_FAIL", err)
	}
	if !dc.Broken() {
		t.Fatal("the connection carries on after a record failed")
	}
	t.Logf("client: %v", err)

	// A write altered: the node closes the connection, records nothing.
	dc = dial()
	px.armFlip(0, 2000)
	writes := h.writes.Load()
	if err := dc.Write(ctx, "seg", 1<<20, val, crc, 2); err == nil {
		t.Fatal("an altered write succeeded")
	}
	t.Logf("node: %s", waitLog(t, logs, "data connection closed", ErrRecordAuth))
	if h.writes.Load() != writes {
		t.Fatal("the node committed an altered write")
	}

	// A request replayed to the node.
	dc = dial()
	px.record()
	if err := dc.ReadRange(ctx, "seg", 0, buf, crc); err != nil {
		t.Fatal(err)
	}
	px.replay(t)
	t.Logf("node: %s", waitLog(t, logs, "data connection closed", ErrRecordAuth))
	if err := dc.ReadRange(ctx, "seg", 0, buf, crc); err == nil {
		t.Fatal("a read succeeded on a connection the node closed")
	}

	// A new connection works.
	dc = dial()
	if err := dc.ReadRange(ctx, "seg", 0, buf, crc); err != nil || !bytes.Equal(buf, val) {
		t.Fatalf("a new connection: %v", err)
	}
}

// A TLS connection whose record keys carried RetireBytes is replaced: the
// next Acquire gets a new connection (a new handshake, new keys), while
// the call still holding the old one finishes on it; its last Release
// closes it.
func TestSpentConnectionRetired(t *testing.T) {
	old := RetireBytes
	RetireBytes = 1 << 20
	t.Cleanup(func() { RetireBytes = old })
	h := newMemHandler(4 << 20)
	addr, _, pool := serveTLS(t, h)
	pool.ConnsPerNode = 1
	ctx := context.Background()
	val := rnd(1<<20 + 1)
	crc := crc32c.Checksum(val)
	a, err := pool.Acquire(ctx, addr)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Write(ctx, "seg", 0, val, crc, 1); err != nil {
		t.Fatal(err)
	}
	if !a.spent() {
		t.Fatal("a connection that sealed more than RetireBytes is not spent")
	}
	b, err := pool.Acquire(ctx, addr)
	if err != nil {
		t.Fatal(err)
	}
	if b == a {
		t.Fatal("a spent connection was handed out again")
	}
	buf := make([]byte, len(val))
	if err := a.ReadRange(ctx, "seg", 0, buf, crc); err != nil || !bytes.Equal(buf, val) {
		t.Fatalf("a call still holding the retired connection: %v", err)
	}
	a.Release()
	if !a.Broken() {
		t.Fatal("the retired connection stayed open after its last Release")
	}
	if err := b.ReadRange(ctx, "seg", 0, buf, crc); err != nil || !bytes.Equal(buf, val) {
		t.Fatalf("the new connection: %v", err)
	}
	b.Release()
	if b.Broken() {
		t.Fatal("a connection not retired was closed by its Release")
	}
}

// Callers at once on a TLS pool whose connections are spent every few
// calls: no call fails because its connection was retired under it.
func TestSpentConnectionsUnderLoad(t *testing.T) {
	old := RetireBytes
	RetireBytes = 256 << 10
	t.Cleanup(func() { RetireBytes = old })
	const callers, rounds, size = 8, 15, 64 << 10
	h := newMemHandler(callers * size)
	addr, _, pool := serveTLS(t, h)
	var seenMu sync.Mutex
	seen := map[*DataConn]bool{}
	poundPool(t, pool, context.Background(), addr, callers, rounds, size, func(dc *DataConn) {
		seenMu.Lock()
		seen[dc] = true
		seenMu.Unlock()
	})
	if len(seen) <= pool.Conns() {
		t.Fatalf("%d connections served the calls: none was retired", len(seen))
	}
}

// fill never reads the socket (it runs under the node's lock): with
// nothing made ready it answers errAgain at once; after ready it opens the
// record, and hands out the rest of a record a small buffer left behind.
func TestRecordFillDoesNotBlock(t *testing.T) {
	c, s := recordPair(t)
	if _, err := s.fill(make([]byte, 8)); !errors.Is(err, errAgain) {
		t.Fatalf("fill before ready: %v, want errAgain", err)
	}
	want := rnd(100)
	errc := make(chan error, 1)
	go func() { _, err := c.Write(want); errc <- err }()
	if err := s.ready(); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 100)
	n, err := s.fill(got[:60])
	if err != nil || n != 60 {
		t.Fatalf("fill after ready: %d, %v", n, err)
	}
	if err := s.ready(); err != nil { // the rest is already opened: no read
		t.Fatal(err)
	}
	if k, err := s.fill(got[60:]); err != nil || k != 40 {
		t.Fatalf("fill of the rest: %d, %v", k, err)
	}
	if !bytes.Equal(got, want) {
		t.Fatal("other bytes arrived")
	}
	if _, err := s.fill(make([]byte, 8)); !errors.Is(err, errAgain) {
		t.Fatalf("fill with the record consumed: %v, want errAgain", err)
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
}
