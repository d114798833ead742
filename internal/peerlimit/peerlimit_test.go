package peerlimit

import (
	"errors"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/tierstore/tierstore/internal/errcode"
)

var quiet = slog.New(slog.DiscardHandler)

// dialFrom dials addr from local IP from (127.0.0.0/8 all reach the
// loopback interface on Linux).
func dialFrom(t *testing.T, from, addr string) net.Conn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}, Timeout: 5 * time.Second}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// closedByServer reports whether the server closed c (EOF or reset within
// 5 s) rather than keeping it open.
func closedByServer(c net.Conn) bool {
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	_, err := c.Read(make([]byte, 1))
	var ne net.Error
	return err != nil && !(errors.As(err, &ne) && ne.Timeout())
}

// One address gets ConnsPerPeer connections; the next is closed at once
// and counted; another address is not affected; closing one frees its
// slot. Accepted TCP connections keep *net.TCPConn's methods.
func TestListenerConnsPerPeer(t *testing.T) {
	g := New(Limits{ConnsPerPeer: 3}, quiet)
	base, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	lis := g.Listener(base)
	defer lis.Close()
	accepted := make(chan net.Conn, 16)
	go func() {
		for {
			c, err := lis.Accept()
			if err != nil {
				close(accepted)
				return
			}
			accepted <- c
		}
	}()
	addr := base.Addr().String()
	var mine []net.Conn
	for range 3 {
		dialFrom(t, "127.0.0.2", addr)
		mine = append(mine, <-accepted)
	}
	for _, c := range mine {
		if _, ok := c.(interface {
			CloseWrite() error
			CloseRead() error
		}); !ok {
			t.Fatalf("accepted %T lost CloseRead/CloseWrite", c)
		}
	}
	over := dialFrom(t, "127.0.0.2", addr)
	if !closedByServer(over) {
		t.Fatal("a fourth connection from one address stayed open")
	}
	if n := g.Refusals(LimitConnsPerPeer); n != 1 {
		t.Fatalf("refusals counted %d, want 1", n)
	}
	other := dialFrom(t, "127.0.0.3", addr)
	oc := <-accepted
	if _, conns := g.Held(oc.RemoteAddr()); conns != 1 {
		t.Fatalf("127.0.0.3 has %d connections counted, want 1", conns)
	}
	_ = other
	mine[0].Close()
	mine[0].Close() // a second Close frees nothing more
	dialFrom(t, "127.0.0.2", addr)
	select {
	case c := <-accepted:
		defer c.Close()
	case <-time.After(5 * time.Second):
		t.Fatal("a connection after one was closed was not accepted")
	}
	if _, conns := g.Held(mine[1].RemoteAddr()); conns != 3 {
		t.Fatalf("127.0.0.2 has %d connections counted, want 3", conns)
	}
	if n := g.Refusals(LimitConnsPerPeer); n != 1 {
		t.Fatalf("refusals counted %d, want still 1", n)
	}
}

// Hold grants bytes up to PeerBuffer per address, refuses beyond with a
// counted ErrPeerBuffer (PEER_LIMIT_EXCEEDED), and release (once) gives
// them back; addresses have budgets of their own.
func TestHoldPerPeer(t *testing.T) {
	g := New(Limits{PeerBuffer: 100}, quiet)
	a := &net.TCPAddr{IP: net.ParseIP("10.0.0.1"), Port: 1}
	a2 := &net.TCPAddr{IP: net.ParseIP("10.0.0.1"), Port: 2} // same peer, another port
	b := &net.TCPAddr{IP: net.ParseIP("10.0.0.2"), Port: 1}
	r1, err := g.Hold(a, 60)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := g.Hold(a2, 41); !errors.Is(err, ErrPeerBuffer) || !errors.Is(err, errcode.ErrPeerLimit) {
		t.Fatalf("61+41 of 100: want ErrPeerBuffer and PEER_LIMIT_EXCEEDED, got %v", err)
	}
	r2, err := g.Hold(a2, 40)
	if err != nil {
		t.Fatalf("60+40 of 100: %v", err)
	}
	rb, err := g.Hold(b, 100)
	if err != nil {
		t.Fatalf("another address: %v", err)
	}
	r1()
	r1()
	if held, _ := g.Held(a); held != 40 {
		t.Fatalf("after release: %d held, want 40", held)
	}
	r2()
	rb()
	if held, _ := g.Held(a); held != 0 {
		t.Fatalf("%d held after every release", held)
	}
	if n := g.Refusals(LimitPeerBuffer); n != 1 {
		t.Fatalf("refusals %d, want 1", n)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.peers) != 0 {
		t.Fatalf("records of idle peers kept: %v", g.peers)
	}
}

// Only timeouts are counted as handshake_timeout.
func TestHandshakeRefused(t *testing.T) {
	g := New(Limits{}, quiet)
	from := &net.TCPAddr{IP: net.ParseIP("10.0.0.1"), Port: 1}
	if g.HandshakeRefused(from, errors.New("tls: bad certificate")) {
		t.Fatal("a refused certificate counted as a timeout")
	}
	c1, c2 := net.Pipe()
	defer c1.Close()
	defer c2.Close()
	_ = c1.SetReadDeadline(time.Now())
	_, err := c1.Read(make([]byte, 1))
	if !g.HandshakeRefused(from, err) {
		t.Fatalf("a deadline's error %v not counted", err)
	}
	if n := g.Refusals(LimitHandshakeTimeout); n != 1 {
		t.Fatalf("handshake_timeout counted %d, want 1", n)
	}
}

func TestLimitsCheck(t *testing.T) {
	if err := Defaults().Check(); err != nil {
		t.Fatal(err)
	}
	for flag, l := range map[string]Limits{
		"--max_conns_per_peer":    {ConnsPerPeer: 0, StreamsPerConn: 1, HandshakeTimeout: 1, PeerBuffer: 1},
		"--max_streams_per_conn":  {ConnsPerPeer: 1, StreamsPerConn: -1, HandshakeTimeout: 1, PeerBuffer: 1},
		"--tls_handshake_timeout": {ConnsPerPeer: 1, StreamsPerConn: 1, HandshakeTimeout: 0, PeerBuffer: 1},
		"--max_peer_buffer":       {ConnsPerPeer: 1, StreamsPerConn: 1, HandshakeTimeout: 1, PeerBuffer: -5},
	} {
		if err := l.Check(); err == nil || !strings.Contains(err.Error(), flag) {
			t.Errorf("%+v: want an error naming %s, got %v", l, flag, err)
		}
	}
}
