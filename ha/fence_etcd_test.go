package ha

import (
	"errors"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/tierstore/tierstore/ha/hatest"
)

// freezeProxy forwards TCP between the leader's etcd client and etcd, and
// can hold every byte in both directions (a partition, or a paused
// process's view of the network) and later release them.
type freezeProxy struct {
	ln     net.Listener
	target string

	mu     sync.Mutex     // protects frozen, thaw, conns
	frozen bool           // hold bytes while true
	thaw   chan struct{}  // closed when frozen ends or the proxy closes
	conns  []net.Conn     // every connection, closed by close
	wg     sync.WaitGroup // pipes and the accept loop
}

func startFreezeProxy(t *testing.T, target string) *freezeProxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &freezeProxy{ln: ln, target: target, thaw: make(chan struct{})}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.close)
	return p
}

func (p *freezeProxy) addr() string { return p.ln.Addr().String() }

func (p *freezeProxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		up, err := net.Dial("tcp", p.target)
		if err != nil {
			_ = c.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, c, up)
		p.mu.Unlock()
		p.wg.Add(2)
		go p.pipe(up, c)
		go p.pipe(c, up)
	}
}

func (p *freezeProxy) pipe(dst, src net.Conn) {
	defer p.wg.Done()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			p.gate()
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			if !errors.Is(err, io.EOF) {
				_ = dst.Close()
			}
			return
		}
	}
}

// gate blocks while the proxy is frozen.
func (p *freezeProxy) gate() {
	p.mu.Lock()
	frozen, thaw := p.frozen, p.thaw
	p.mu.Unlock()
	if frozen {
		<-thaw
	}
}

func (p *freezeProxy) freeze() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.frozen = true
}

func (p *freezeProxy) unfreeze() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.frozen {
		p.frozen = false
		close(p.thaw)
		p.thaw = make(chan struct{})
	}
}

func (p *freezeProxy) close() {
	_ = p.ln.Close()
	p.unfreeze()
	p.mu.Lock()
	for _, c := range p.conns {
		_ = c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

// TestFenceDownBeforeNextLeader is the fencing guarantee on a real etcd.
// The leader's link to etcd freezes, so its keepalives stop reaching etcd;
// in "paused" its own goroutines are also held, which together is what
// SIGSTOP does to it. A standby with a healthy link is elected once the
// lease expires, and at that very moment the old leader's Valid is already
// false: in "paused" without any of its goroutines having run, because
// Valid reads the clock itself. When the link thaws and the goroutines
// resume, the held keepalive answers cannot raise the fence again.
func TestFenceDownBeforeNextLeader(t *testing.T) {
	for _, mode := range []string{"partitioned", "paused"} {
		t.Run(mode, func(t *testing.T) { testFenceDownBeforeNextLeader(t, mode == "paused") })
	}
}

func testFenceDownBeforeNextLeader(t *testing.T, pause bool) {
	etcd := hatest.Start(t)
	ctx := testCtx(t, time.Minute)
	proxy := startFreezeProxy(t, etcd.Endpoints()[0])
	a := mustCampaign(t, ctx, candidate([]string{proxy.addr()}, "127.0.0.1:7001"))
	aDown := make(chan time.Time, 1)
	go func() { <-a.Done(); aDown <- time.Now() }()

	bCh := campaignAsync(t, ctx, candidate(etcd.Endpoints(), "127.0.0.1:7002"))
	waitCandidates(t, ctx, etcdClient(t, etcd.Endpoints()), DefaultPrefix, 2)
	if !a.Valid() {
		t.Fatal("leader invalid before the freeze")
	}
	resume := make(chan struct{})
	if pause {
		a.paused.Store(&resume)
	}
	proxy.freeze()
	frozen := time.Now()

	var b campaignResult
	select {
	case b = <-bCh:
	case <-time.After(takeoverBound):
		t.Fatalf("standby not elected within %v of the freeze", takeoverBound)
	}
	// The safety property: the instant a new leader exists, the old one
	// already refuses to act.
	oldValid := a.Valid()
	if b.err != nil {
		t.Fatal(b.err)
	}
	t.Cleanup(func() { _ = b.l.Resign(ctx) })
	if oldValid {
		t.Fatalf("old leader (term %d) still Valid when the new leader (term %d) was elected", a.Term(), b.l.Term())
	}
	if b.l.Term() <= a.Term() {
		t.Fatalf("new term %d not above %d", b.l.Term(), a.Term())
	}
	if pause {
		select {
		case <-a.Done():
			t.Fatal("a paused leader's goroutines ran")
		default:
		}
		close(resume)
	}
	select {
	case at := <-aDown:
		t.Logf("freeze -> old leader's Done %v, -> new leader elected %v", at.Sub(frozen), b.at.Sub(frozen))
	case <-time.After(takeoverBound):
		t.Fatal("old leader's Done not closed")
	}
	if !errors.Is(a.Err(), ErrLeaseUnconfirmed) && !errors.Is(a.Err(), ErrLeaseExpired) {
		t.Fatalf("old leader's cause: %v", a.Err())
	}

	proxy.unfreeze() // held keepalive requests and answers flow again
	if err := a.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	if a.Valid() || !b.l.Valid() {
		t.Fatalf("after thaw: old valid %v, new valid %v", a.Valid(), b.l.Valid())
	}
}
