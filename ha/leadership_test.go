package ha

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/tierstore/tierstore/ha/hatest"
)

// testTTL is the smallest TTL etcd grants with its default election
// timeout; it keeps takeovers in these tests near 2-3 s.
const testTTL = 2 * time.Second

// takeoverBound is a generous bound for one takeover on a loaded 2-core
// machine; the real figure is logged (and measured by the benchmark).
const takeoverBound = 15 * time.Second

func candidate(endpoints []string, addr string) Config {
	return Config{
		Endpoints:  endpoints,
		Address:    addr,
		SessionTTL: testTTL,
		Logger:     slog.New(slog.DiscardHandler),
	}
}

func testCtx(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// campaignAsync starts Campaign in a goroutine; the result arrives on the
// channel. The test's cleanup resigns whatever was won.
func campaignAsync(t *testing.T, ctx context.Context, cfg Config) <-chan campaignResult {
	ch := make(chan campaignResult, 1)
	go func() {
		l, err := Campaign(ctx, cfg)
		ch <- campaignResult{l, err, time.Now()}
	}()
	return ch
}

type campaignResult struct {
	l   *Leadership
	err error
	at  time.Time
}

func mustCampaign(t *testing.T, ctx context.Context, cfg Config) *Leadership {
	t.Helper()
	l, err := Campaign(ctx, cfg)
	if err != nil {
		t.Fatalf("Campaign %s: %v", cfg.Address, err)
	}
	t.Cleanup(func() { _ = l.Resign(context.Background()) })
	return l
}

func etcdClient(t testing.TB, endpoints []string) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cli.Close() })
	return cli
}

// waitCandidates blocks until n candidate keys exist under the prefix: a
// standby's key appears when it starts waiting in Campaign.
func waitCandidates(t testing.TB, ctx context.Context, cli *clientv3.Client, prefix string, n int) {
	t.Helper()
	for {
		resp, err := cli.Get(ctx, prefix+"/", clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err != nil {
			t.Fatalf("count candidates: %v", err)
		}
		if int(resp.Count) >= n {
			return
		}
		w := cli.Watch(ctx, prefix+"/", clientv3.WithPrefix(), clientv3.WithRev(resp.Header.Revision+1))
		select {
		case <-w:
		case <-ctx.Done():
			t.Fatalf("waiting for %d candidates: %v", n, ctx.Err())
		}
	}
}

func waitDone(t *testing.T, l *Leadership, within time.Duration) {
	t.Helper()
	select {
	case <-l.Done():
	case <-time.After(within):
		t.Fatalf("leadership term %d not lost within %v", l.Term(), within)
	}
}

func TestSingleCandidateLeads(t *testing.T) {
	etcd := hatest.Start(t)
	ctx := testCtx(t, time.Minute)
	l := mustCampaign(t, ctx, candidate(etcd.Endpoints(), "127.0.0.1:7001"))
	if l.Term() == 0 || !l.Valid() || l.Fence() != nil || l.Err() != nil {
		t.Fatalf("new leader: term %d valid %v check %v err %v", l.Term(), l.Valid(), l.Fence(), l.Err())
	}
	if r := l.Remaining(); r <= 0 || r > testTTL {
		t.Fatalf("Remaining = %v, want in (0, %v]", r, testTTL)
	}
	cli := etcdClient(t, etcd.Endpoints())
	get, err := cli.Get(ctx, l.Key())
	if err != nil || len(get.Kvs) != 1 {
		t.Fatalf("leader key %s: %v %v", l.Key(), get, err)
	}
	if kv := get.Kvs[0]; string(kv.Value) != "127.0.0.1:7001" || uint64(kv.CreateRevision) != l.Term() {
		t.Fatalf("leader key holds %q rev %d, want the address at the term %d", kv.Value, kv.CreateRevision, l.Term())
	}
	// The fence holds across several keepalive periods.
	select {
	case <-l.Done():
		t.Fatalf("leadership lost while etcd is up: %v", l.Err())
	case <-time.After(2 * testTTL):
	}
	if !l.Valid() {
		t.Fatal("fence down while etcd is up")
	}
	if err := l.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	waitDone(t, l, time.Second)
	if l.Valid() || !errors.Is(l.Err(), ErrResigned) || !errors.Is(l.Fence(), ErrNotLeader) || !errors.Is(l.Fence(), ErrResigned) {
		t.Fatalf("after Resign: valid %v err %v check %v", l.Valid(), l.Err(), l.Fence())
	}
	if get, err := cli.Get(ctx, DefaultPrefix+"/", clientv3.WithPrefix()); err != nil || len(get.Kvs) != 0 {
		t.Fatalf("keys left after Resign: %v %v", get.Kvs, err)
	}
	if err := l.Resign(ctx); err != nil {
		t.Fatalf("second Resign: %v", err)
	}
}

// killSession simulates the death of the leader's process: its own
// goroutines stop (so no cleanup deletes the key, as in a dead process) and
// its etcd client goes away without resigning, so its key lives until the
// lease expires. The returned func lets the goroutines run again (to end
// the Leadership object once the test has seen the takeover).
func killSession(l *Leadership) (release func()) {
	hold := make(chan struct{})
	l.paused.Store(&hold)
	_ = l.client.Close()
	return func() { close(hold) }
}

// TestTakeover: one of two candidates leads, the other waits; when the
// leader dies (session gone, no resign) or resigns, the standby takes over
// with a greater term and the resolver follows.
func TestTakeover(t *testing.T) {
	for _, how := range []string{"die", "resign"} {
		t.Run(how, func(t *testing.T) {
			etcd := hatest.Start(t)
			ctx := testCtx(t, time.Minute)
			res := newTestResolver(t, etcd.MasterURL())
			a := mustCampaign(t, ctx, candidate(etcd.Endpoints(), "127.0.0.1:7001"))
			waitResolved(t, ctx, res, Leader{Addr: "127.0.0.1:7001", Term: a.Term()})

			bCh := campaignAsync(t, ctx, candidate(etcd.Endpoints(), "127.0.0.1:7002"))
			waitCandidates(t, ctx, etcdClient(t, etcd.Endpoints()), DefaultPrefix, 2)
			select {
			case r := <-bCh:
				t.Fatalf("standby won while the leader holds: %v %v", r.l, r.err)
			default:
			}
			if !a.Valid() {
				t.Fatal("leader invalid while the standby waits")
			}

			start := time.Now()
			release := func() {}
			if how == "die" {
				release = killSession(a)
			} else if err := a.Resign(ctx); err != nil {
				t.Fatal(err)
			}
			var b campaignResult
			select {
			case b = <-bCh:
			case <-time.After(takeoverBound):
				t.Fatalf("standby not elected within %v", takeoverBound)
			}
			if b.err != nil {
				t.Fatal(b.err)
			}
			t.Cleanup(func() { _ = b.l.Resign(context.Background()) })
			t.Logf("takeover after %s: standby elected %v after the leader went", how, b.at.Sub(start))
			if b.l.Term() <= a.Term() {
				t.Fatalf("new term %d not above old term %d", b.l.Term(), a.Term())
			}
			if a.Valid() {
				t.Fatal("old leader still valid after the new one was elected")
			}
			release()
			waitDone(t, a, takeoverBound)
			// A dead client shows as an ended session or an ended watch,
			// whichever the monitor sees first.
			if how == "resign" && !errors.Is(a.Err(), ErrResigned) ||
				how == "die" && !errors.Is(a.Err(), ErrLeaseExpired) && !errors.Is(a.Err(), ErrWatchFailed) {
				t.Fatalf("old leader's cause after %s: %v", how, a.Err())
			}
			waitResolved(t, ctx, res, Leader{Addr: "127.0.0.1:7002", Term: b.l.Term()})
			t.Logf("resolver followed %v after the leader went", time.Since(start))
		})
	}
}

// TestTermsIncrease: across a chain of leaders (resign, death, re-election
// of the same address), every term is strictly greater than the last.
func TestTermsIncrease(t *testing.T) {
	etcd := hatest.Start(t)
	ctx := testCtx(t, 2*time.Minute)
	var last uint64
	for i := 0; i < 4; i++ {
		// Interleave unrelated writes so revisions move between terms.
		if _, err := etcdClient(t, etcd.Endpoints()).Put(ctx, fmt.Sprintf("/other/%d", i), "x"); err != nil {
			t.Fatal(err)
		}
		l := mustCampaign(t, ctx, candidate(etcd.Endpoints(), fmt.Sprintf("127.0.0.1:%d", 7001+i%2)))
		if l.Term() <= last {
			t.Fatalf("leader %d: term %d not above %d", i, l.Term(), last)
		}
		last = l.Term()
		if i%2 == 0 {
			_ = l.Resign(ctx)
		} else {
			// The next Campaign waits for this lease to expire.
			t.Cleanup(killSession(l))
		}
	}
}

// TestOperatorDeletesKey: a leader whose key is deleted behind its back
// steps down (ErrKeyDeleted) instead of leading without a key.
func TestOperatorDeletesKey(t *testing.T) {
	etcd := hatest.Start(t)
	ctx := testCtx(t, time.Minute)
	l := mustCampaign(t, ctx, candidate(etcd.Endpoints(), "127.0.0.1:7001"))
	if _, err := etcdClient(t, etcd.Endpoints()).Delete(ctx, l.Key()); err != nil {
		t.Fatal(err)
	}
	waitDone(t, l, takeoverBound)
	if l.Valid() || !errors.Is(l.Err(), ErrKeyDeleted) {
		t.Fatalf("after key deletion: valid %v err %v", l.Valid(), l.Err())
	}
}

// TestCampaignCancelled: a standby whose ctx ends returns ctx's error and
// leaves no key behind that would delay later candidates.
func TestCampaignCancelled(t *testing.T) {
	etcd := hatest.Start(t)
	ctx := testCtx(t, time.Minute)
	a := mustCampaign(t, ctx, candidate(etcd.Endpoints(), "127.0.0.1:7001"))
	cli := etcdClient(t, etcd.Endpoints())
	bctx, cancel := context.WithCancel(ctx)
	bCh := campaignAsync(t, bctx, candidate(etcd.Endpoints(), "127.0.0.1:7002"))
	waitCandidates(t, ctx, cli, DefaultPrefix, 2)
	cancel()
	r := <-bCh
	if !errors.Is(r.err, context.Canceled) || r.l != nil {
		t.Fatalf("cancelled Campaign = %v, %v; want context.Canceled", r.l, r.err)
	}
	get, err := cli.Get(ctx, DefaultPrefix+"/", clientv3.WithPrefix())
	if err != nil || len(get.Kvs) != 1 || string(get.Kvs[0].Key) != a.Key() {
		t.Fatalf("keys after cancel: %v %v; want only the leader's", get.Kvs, err)
	}
}

// TestCampaignUnreachable: with no etcd at all Campaign blocks until its
// ctx ends.
func TestCampaignUnreachable(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := l.Addr().String()
	_ = l.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
	defer cancel()
	lead, err := Campaign(ctx, candidate([]string{dead}, "127.0.0.1:7001"))
	if !errors.Is(err, context.DeadlineExceeded) || lead != nil {
		t.Fatalf("Campaign without etcd = %v, %v; want DeadlineExceeded", lead, err)
	}
}

// TestVerifyRefusesLostKey: Campaign only waits for older keys to go; if
// the candidate's own key vanished meanwhile, verify refuses the win.
func TestVerifyRefusesLostKey(t *testing.T) {
	etcd := hatest.Start(t)
	ctx := testCtx(t, time.Minute)
	cfg, err := candidate(etcd.Endpoints(), "127.0.0.1:7001").withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	cli := etcdClient(t, etcd.Endpoints())
	sess, err := concurrency.NewSession(cli, concurrency.WithTTL(2))
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	el := concurrency.NewElection(sess, cfg.Prefix)
	if err := el.Campaign(ctx, cfg.Address); err != nil {
		t.Fatal(err)
	}
	l := &Leadership{cfg: cfg, key: el.Key(), client: cli, session: sess}
	l.fence.now, l.fence.margin = systemClock, cfg.SafetyMargin
	if _, err := l.verify(ctx, sess.Lease(), el.Rev()); err != nil {
		t.Fatalf("verify of a held key: %v", err)
	}
	if _, err := cli.Delete(ctx, el.Key()); err != nil {
		t.Fatal(err)
	}
	if _, err := l.verify(ctx, sess.Lease(), el.Rev()); !errors.Is(err, ErrKeyDeleted) {
		t.Fatalf("verify of a deleted key = %v, want ErrKeyDeleted", err)
	}
}
