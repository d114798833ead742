package ha_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tierstore/tierstore/ha"
	"github.com/tierstore/tierstore/ha/hatest"
	"github.com/tierstore/tierstore/internal/errcode"
	"github.com/tierstore/tierstore/master"
	"github.com/tierstore/tierstore/masterapi"
	"github.com/tierstore/tierstore/mastergrpc"
)

// The tests drive the election keys themselves (the resolver follows the
// first-created key under the prefix, whoever wrote it), so a "failover"
// is one etcd write instead of a lease expiry.

type election struct {
	t   *testing.T
	cli *clientv3.Client
	url string
}

func newElection(t *testing.T) *election {
	e := hatest.Start(t)
	cli, err := clientv3.New(clientv3.Config{Endpoints: e.Endpoints(), DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return &election{t: t, cli: cli, url: e.MasterURL()}
}

// campaign publishes addr as a candidate; it returns the key's term (create
// revision) and a function deleting the key (the candidate is gone).
func (e *election) campaign(addr string) (uint64, func()) {
	e.t.Helper()
	key := fmt.Sprintf("%s/%s-%d", ha.DefaultPrefix, addr, time.Now().UnixNano())
	r, err := e.cli.Put(context.Background(), key, addr)
	if err != nil {
		e.t.Fatal(err)
	}
	return uint64(r.Header.Revision), func() {
		if _, err := e.cli.Delete(context.Background(), key); err != nil {
			e.t.Error(err)
		}
	}
}

// goneWhen calls gone (a candidate's removal) on its own goroutine once
// when() holds, polled every 5 ms. The goroutine ends before the test's
// cleanups close the etcd client (cleanups run last registered first), so
// a removal never runs against a closed client after the test completed.
func goneWhen(t *testing.T, when func() bool, gone func()) {
	stop, done := make(chan struct{}), make(chan struct{})
	t.Cleanup(func() { close(stop); <-done })
	go func() {
		defer close(done)
		for !when() {
			select {
			case <-stop:
				return
			case <-time.After(5 * time.Millisecond): // poll
			}
		}
		gone()
	}()
}

// listen reserves an address for a master started later.
func listen(t *testing.T) net.Listener {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return lis
}

// leader serves a master.Service of term on lis (with the HA interceptor).
func leader(t *testing.T, lis net.Listener, term uint64) (*master.Service, func()) {
	t.Helper()
	cfg := master.DefaultConfig()
	cfg.Logger = slog.New(slog.DiscardHandler)
	cfg.PutStartMaxWait = 0
	cfg.HA = master.HAConfig{Term: term}
	svc, err := master.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	srv := master.NewServer(svc)
	go func() { _ = srv.Serve(lis) }()
	stop := func() { srv.Stop(); svc.Close() }
	t.Cleanup(stop)
	return svc, stop
}

// fake serves every call with answer (counting calls by method).
func fake(t *testing.T, lis net.Listener, answer func(ctx context.Context, method string) error) *atomic.Int64 {
	t.Helper()
	var calls atomic.Int64
	srv := grpc.NewServer(grpc.UnknownServiceHandler(func(_ any, st grpc.ServerStream) error {
		calls.Add(1)
		m, _ := grpc.MethodFromServerStream(st)
		return answer(st.Context(), m)
	}))
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	return &calls
}

func dial(t *testing.T, url string) *mastergrpc.Client {
	t.Helper()
	r, err := mastergrpc.Dial(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

func ctxFor(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// Calls go to the leader etcd names, and to the next one after a failover.
func TestRemoteFollowsLeader(t *testing.T) {
	e := newElection(t)
	la, lb := listen(t), listen(t)
	ta, gone := e.campaign(la.Addr().String())
	tb, _ := e.campaign(lb.Addr().String())
	a, stopA := leader(t, la, ta)
	b, _ := leader(t, lb, tb)
	r := dial(t, e.url)
	ctx := ctxFor(t, 20*time.Second)
	if err := r.MountSegment(ctx, masterapi.MountRequest{Node: "n", Segment: "s", Size: 1 << 20}); err != nil {
		t.Fatal(err)
	}
	if st, _ := a.Stats(ctx); st.Nodes != 1 {
		t.Fatal("the call did not reach the leader")
	}
	if r.Term() != ta || r.LeaderAddr() != la.Addr().String() {
		t.Fatalf("term %d addr %s, want %d %s", r.Term(), r.LeaderAddr(), ta, la.Addr())
	}
	stopA() // the leader dies: its connections fail, then its key goes
	after := time.Now().Add(300 * time.Millisecond)
	goneWhen(t, func() bool { return time.Now().After(after) }, gone)
	p, err := r.Ping(ctx, "n")
	if err != nil || p.Status != masterapi.NeedRemount || p.Term != tb {
		t.Fatalf("ping across the failover: %+v %v", p, err)
	}
	if err := r.MountSegment(ctx, masterapi.MountRequest{Node: "n", Segment: "s", Size: 1 << 20}); err != nil {
		t.Fatal(err)
	}
	if st, _ := b.Stats(ctx); st.Nodes != 1 || r.Term() != tb {
		t.Fatalf("after the failover: nodes %d term %d", st.Nodes, r.Term())
	}
}

// A master answering "not the leader" (a standby, a leader still
// rebuilding) is asked again until it answers, within the deadline.
func TestRemoteRetriesUnavailable(t *testing.T) {
	e := newElection(t)
	lis := listen(t)
	var ready atomic.Bool
	calls := fake(t, lis, func(context.Context, string) error {
		if ready.Load() {
			return errcode.ToStatus(errcode.Errorf(errcode.ObjectNotFound, "no such key"))
		}
		return errcode.ToStatus(fmt.Errorf("standby: %w", master.ErrNotLeader))
	})
	e.campaign(lis.Addr().String())
	r := dial(t, e.url)
	_, err := r.GetReplicaList(ctxFor(t, 500*time.Millisecond), "k")
	// At least one call again after the first refusal (under CI load the
	// backoff leaves room for only one more within 500 ms).
	if !errors.Is(err, errcode.ErrUnavailable) || calls.Load() < 2 {
		t.Fatalf("until the deadline: %v after %d calls", err, calls.Load())
	}
	go func() { time.Sleep(200 * time.Millisecond); ready.Store(true) }()
	_, err = r.GetReplicaList(ctxFor(t, 10*time.Second), "k")
	if !errors.Is(err, errcode.ErrObjectNotFound) {
		t.Fatalf("once the master answers: %v", err)
	}
}

// A call in flight at a leader that stops answering (paused, partitioned)
// is sent to the new leader as soon as etcd names it.
func TestRemoteLeavesHungLeader(t *testing.T) {
	e := newElection(t)
	la, lb := listen(t), listen(t)
	hung := fake(t, la, func(ctx context.Context, _ string) error { <-ctx.Done(); return ctx.Err() })
	ta, gone := e.campaign(la.Addr().String())
	tb, _ := e.campaign(lb.Addr().String())
	leader(t, lb, tb)
	r := dial(t, e.url)
	goneWhen(t, func() bool { return hung.Load() > 0 }, gone) // once the call reached the hung leader
	start := time.Now()
	p, err := r.Ping(ctxFor(t, 20*time.Second), "n")
	if err != nil || p.Term != tb || r.Term() != tb {
		t.Fatalf("ping: %+v %v (term %d, the hung leader's %d)", p, err, r.Term(), ta)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("took %v", d)
	}
}

// An answer stamped with a term older than one the Remote has seen comes
// from a deposed leader: it is discarded, never returned.
func TestRemoteRefusesStaleTerm(t *testing.T) {
	e := newElection(t)
	lis := listen(t)
	term, _ := e.campaign(lis.Addr().String())
	calls := fake(t, lis, func(ctx context.Context, _ string) error {
		_ = grpc.SetTrailer(ctx, mastergrpc.TermMD(term-1))
		return errcode.ToStatus(errcode.Errorf(errcode.ObjectNotFound, "stale answer"))
	})
	r := dial(t, e.url)
	_, err := r.NotifyOffloadSuccess(ctxFor(t, 400*time.Millisecond), masterapi.NotifyRequest{Node: "n", Persisted: []masterapi.SSDObject{{Key: "k", Size: 1}}})
	if errors.Is(err, errcode.ErrObjectNotFound) || calls.Load() < 2 {
		t.Fatalf("a deposed leader's answer came through: %v (%d calls)", err, calls.Load())
	}
	if !errors.Is(err, errcode.ErrRPCFail) && !errors.Is(err, errcode.ErrContextCanceled) {
		t.Fatalf("error %v", err)
	}
}

// A transport failure: idempotent calls are sent again; a PutStart only to
// a newer leader (the old one's allocation died with it), never twice to
// the same one.
func TestRemoteTransportFailure(t *testing.T) {
	defer ha.SetFailoverWait(300 * time.Millisecond)()
	e := newElection(t)
	la, lb := listen(t), listen(t)
	broken := func(context.Context, string) error { return status.Error(codes.Unavailable, "connection reset") }
	calls := fake(t, la, broken)
	_, gone := e.campaign(la.Addr().String())
	r := dial(t, e.url)
	if _, err := r.Ping(ctxFor(t, 400*time.Millisecond), "n"); !errors.Is(err, errcode.ErrRPCFail) || calls.Load() < 3 {
		t.Fatalf("ping: %v after %d calls", err, calls.Load())
	}
	calls.Store(0)
	_, err := r.PutStart(ctxFor(t, 5*time.Second), masterapi.PutStartRequest{Key: "k", Size: 10})
	if !errors.Is(err, errcode.ErrRPCFail) || calls.Load() != 1 {
		t.Fatalf("put start sent %d times to one leader: %v", calls.Load(), err)
	}
	// With a new leader within the wait: sent there.
	restore := ha.SetFailoverWait(10 * time.Second)
	defer restore()
	tb, _ := e.campaign(lb.Addr().String())
	b, _ := leader(t, lb, tb)
	if err := b.MountSegment(context.Background(), masterapi.MountRequest{Node: "n", Segment: "s", Size: 1 << 20}); err != nil {
		t.Fatal(err)
	}
	calls.Store(0)
	goneWhen(t, func() bool { return calls.Load() > 0 }, gone)
	rep, err := r.PutStart(ctxFor(t, 20*time.Second), masterapi.PutStartRequest{Key: "k", Size: 10})
	if err != nil || rep.Node != "n" || calls.Load() != 1 {
		t.Fatalf("put start after the failover: %+v %v (%d calls to the old leader)", rep, err, calls.Load())
	}
}
