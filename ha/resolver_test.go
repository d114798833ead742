package ha

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/tierstore/tierstore/ha/hatest"
)

func newTestResolver(t *testing.T, url string) *Resolver {
	t.Helper()
	u, err := ParseMasterURL(url)
	if err != nil {
		t.Fatal(err)
	}
	r, err := NewResolver(u, ResolverOptions{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Close() })
	return r
}

// waitResolved blocks until the resolver reports want (through Changed,
// not by polling).
func waitResolved(t *testing.T, ctx context.Context, r *Resolver, want Leader) {
	t.Helper()
	for {
		cur, ch := r.Changed()
		if cur == want {
			return
		}
		select {
		case <-ch:
		case <-ctx.Done():
			t.Fatalf("resolver at %+v, want %+v: %v", r.Current(), want, ctx.Err())
		}
	}
}

func TestResolverDirect(t *testing.T) {
	r := newTestResolver(t, "127.0.0.1:50051")
	want := Leader{Addr: "127.0.0.1:50051"}
	if got := r.Current(); got != want {
		t.Fatalf("Current = %+v", got)
	}
	ctx := testCtx(t, time.Second)
	if got, err := r.WaitLeader(ctx); err != nil || got != want {
		t.Fatalf("WaitLeader = %+v, %v", got, err)
	}
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if _, err := r.WaitNewer(short, 0); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("WaitNewer in direct mode = %v, want DeadlineExceeded", err)
	}
	if _, err := NewResolver(MasterURL{Addr: "nope"}, ResolverOptions{}); !errors.Is(err, ErrConfig) {
		t.Fatalf("NewResolver(bad addr) = %v", err)
	}
}

// TestResolverWaitsForFirstLeader: a resolver started before any candidate
// reports no leader, then the first one; WaitNewer skips the old term.
func TestResolverWaitsForFirstLeader(t *testing.T) {
	etcd := hatest.Start(t)
	ctx := testCtx(t, time.Minute)
	r := newTestResolver(t, etcd.MasterURL())
	got := make(chan Leader, 1)
	go func() {
		l, _ := r.WaitLeader(ctx)
		got <- l
	}()
	if r.Current().Known() {
		t.Fatalf("leader %+v before any candidate", r.Current())
	}
	a := mustCampaign(t, ctx, candidate(etcd.Endpoints(), "127.0.0.1:7001"))
	if l := <-got; l != (Leader{Addr: "127.0.0.1:7001", Term: a.Term()}) {
		t.Fatalf("WaitLeader = %+v, want term %d", l, a.Term())
	}
	newer := make(chan Leader, 1)
	go func() {
		l, _ := r.WaitNewer(ctx, a.Term())
		newer <- l
	}()
	_ = a.Resign(ctx)
	waitResolved(t, ctx, r, Leader{})
	b := mustCampaign(t, ctx, candidate(etcd.Endpoints(), "127.0.0.1:7001"))
	if l := <-newer; l.Term != b.Term() || l.Term <= a.Term() {
		t.Fatalf("WaitNewer = %+v, want term %d > %d", l, b.Term(), a.Term())
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := r.WaitNewer(ctx, b.Term()); !errors.Is(err, ErrResolverClosed) {
		t.Fatalf("WaitNewer after Close = %v", err)
	}
}

// TestResolverSurvivesEtcdRestart: etcd goes down long enough for the
// leader to fence itself, comes back on the same data and ports, a new
// leader is elected, and the resolver (never recreated) reports it.
func TestResolverSurvivesEtcdRestart(t *testing.T) {
	etcd := hatest.Start(t)
	ctx := testCtx(t, 2*time.Minute)
	r := newTestResolver(t, etcd.MasterURL())
	a := mustCampaign(t, ctx, candidate(etcd.Endpoints(), "127.0.0.1:7001"))
	waitResolved(t, ctx, r, Leader{Addr: "127.0.0.1:7001", Term: a.Term()})
	// A standby already waits; its session dies during the outage too and
	// Campaign must retry with a new one.
	bCh := campaignAsync(t, ctx, candidate(etcd.Endpoints(), "127.0.0.1:7002"))
	waitCandidates(t, ctx, etcdClient(t, etcd.Endpoints()), DefaultPrefix, 2)

	etcd.Stop()
	stopped := time.Now()
	waitDone(t, a, takeoverBound)
	t.Logf("leader fenced itself %v after etcd stopped (TTL %v): %v", time.Since(stopped), testTTL, a.Err())
	if a.Valid() || !errors.Is(a.Err(), ErrLeaseUnconfirmed) && !errors.Is(a.Err(), ErrLeaseExpired) {
		t.Fatalf("leader after etcd stop: valid %v err %v", a.Valid(), a.Err())
	}
	// The resolver keeps the last leader while etcd is unreachable.
	if got := r.Current(); got.Term != a.Term() {
		t.Fatalf("resolver dropped the leader while etcd is down: %+v", got)
	}
	time.Sleep(testTTL) // an outage longer than the TTL: the standby's session dies too
	etcd.Restart(t)
	var b campaignResult
	select {
	case b = <-bCh:
	case <-time.After(2 * takeoverBound):
		t.Fatal("standby not elected after etcd came back")
	}
	if b.err != nil {
		t.Fatal(b.err)
	}
	t.Cleanup(func() { _ = b.l.Resign(context.Background()) })
	if b.l.Term() <= a.Term() {
		t.Fatalf("term after restart %d not above %d", b.l.Term(), a.Term())
	}
	waitResolved(t, ctx, r, Leader{Addr: "127.0.0.1:7002", Term: b.l.Term()})
	// A quick restart while a leader holds: the watch resumes and later
	// changes still arrive.
	etcd.Stop()
	etcd.Restart(t)
	_ = b.l.Resign(ctx)
	waitResolved(t, ctx, r, Leader{})
}
