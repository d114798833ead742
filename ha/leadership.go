package ha

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.uber.org/zap"
)

// Leadership is one term of leadership won by Campaign. It ends for good
// when it is lost or resigned (Done is closed, Valid is false); the process
// then campaigns again and, if it wins, gets a new Leadership with a greater
// Term.
//
// Every method may be called from any goroutine.
type Leadership struct {
	cfg     Config
	term    uint64
	key     string
	client  *clientv3.Client // owned: closed when the leadership ends
	session *concurrency.Session
	fence   fence

	done     chan struct{}      // closed when the leadership is lost
	stopped  chan struct{}      // closed when cleanup finished (goroutines gone, client closed)
	stopBg   context.CancelFunc // ends the keepalive and monitor goroutines
	loseOnce sync.Once          // guards closing done and setting err

	mu  sync.Mutex // protects err
	err error      // why the leadership ended; nil while it holds

	// paused is a test seam that emulates SIGSTOP of this leader's own
	// goroutines: while it holds a channel, keepAlive and monitor block
	// before acting, until the channel is closed. Nil in production.
	paused atomic.Pointer[chan struct{}]
}

// Campaign joins the election under cfg.Prefix with cfg.Address as its
// value and blocks until this candidate leads or ctx ends. A standby waits
// here; lost sessions and etcd outages during the wait are retried with a
// new session. ctx bounds only the campaign: once Campaign has returned, the
// Leadership lasts until it is lost or resigned.
//
// Errors: ErrConfig for a bad cfg; ctx's error (wrapped) when ctx ends first.
func Campaign(ctx context.Context, cfg Config) (*Leadership, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	cli, err := newClient(cfg.Endpoints, cfg.DialTimeout, cfg.TLS)
	if err != nil {
		return nil, err
	}
	log := cfg.Logger.With("prefix", cfg.Prefix, "address", cfg.Address)
	b := backoff{min: 100 * time.Millisecond, max: time.Second}
	for {
		l, err := campaignOnce(ctx, cli, cfg)
		if err == nil {
			log.Info("ha: elected leader", "term", l.term, "ttl", cfg.SessionTTL)
			return l, nil
		}
		if ctx.Err() != nil {
			_ = cli.Close()
			return nil, fmt.Errorf("ha: campaign for %s: %w", cfg.Prefix, ctx.Err())
		}
		log.Warn("ha: campaign attempt failed, retrying", "err", err)
		if !b.wait(ctx) {
			_ = cli.Close()
			return nil, fmt.Errorf("ha: campaign for %s: %w", cfg.Prefix, ctx.Err())
		}
	}
}

func newClient(endpoints []string, dialTimeout time.Duration, files EtcdTLS) (*clientv3.Client, error) {
	tc, err := files.config(endpoints)
	if err != nil {
		return nil, err
	}
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   endpoints,
		DialTimeout: dialTimeout,
		TLS:         tc,
		Logger:      zap.NewNop(), // the client logs every retry; we log state changes
	})
	if err != nil {
		return nil, fmt.Errorf("%w: etcd client for %v: %w", ErrConfig, endpoints, err)
	}
	return cli, nil
}

// campaignOnce runs one session: grant, campaign, verify. On failure the
// session is closed (its key deleted with the lease) and the client kept.
func campaignOnce(ctx context.Context, cli *clientv3.Client, cfg Config) (*Leadership, error) {
	gctx, cancel := context.WithTimeout(ctx, cfg.DialTimeout)
	grant, err := cli.Grant(gctx, int64(cfg.SessionTTL/time.Second))
	cancel()
	if err != nil {
		return nil, fmt.Errorf("grant lease: %w", err)
	}
	sess, err := concurrency.NewSession(cli, concurrency.WithLease(grant.ID), concurrency.WithTTL(int(grant.TTL)))
	if err != nil {
		revokeBestEffort(cli, grant.ID, cfg.DialTimeout)
		return nil, fmt.Errorf("session: %w", err)
	}
	el := concurrency.NewElection(sess, cfg.Prefix)
	if err := campaignUntilSessionEnds(ctx, cli, sess, el, cfg.Address); err != nil {
		closeSession(sess, cfg.DialTimeout)
		return nil, err
	}
	l := &Leadership{
		cfg: cfg, term: uint64(el.Rev()), key: el.Key(), client: cli, session: sess,
		done: make(chan struct{}), stopped: make(chan struct{}),
	}
	l.fence.now, l.fence.margin = systemClock, cfg.SafetyMargin
	watchRev, err := l.verify(ctx, grant.ID, el.Rev())
	if err != nil {
		closeSession(sess, cfg.DialTimeout)
		return nil, err
	}
	bg, stop := context.WithCancel(context.Background())
	l.stopBg = stop
	wch := cli.Watch(bg, l.key, clientv3.WithRev(watchRev+1))
	go l.keepAlive(bg)
	go l.monitor(bg, wch)
	return l, nil
}

// campaignUntilSessionEnds runs el.Campaign, aborting it when the session
// ends (its lease can no longer make us leader) or ctx ends. etcd's Campaign
// resigns with the client's own context when aborted, which can block while
// etcd is unreachable; when ctx ends we close the client to unblock it.
func campaignUntilSessionEnds(ctx context.Context, cli *clientv3.Client, sess *concurrency.Session,
	el *concurrency.Election, value string) error {
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	res := make(chan error, 1)
	go func() { res <- el.Campaign(cctx, value) }()
	select {
	case err := <-res:
		return err
	case <-sess.Done():
		cancel()
		<-res
		return fmt.Errorf("campaign: %w", ErrLeaseExpired)
	case <-ctx.Done():
		cancel()
		select {
		case <-res:
		case <-time.After(time.Second): // Resign is stuck on an unreachable etcd
			_ = cli.Close()
			<-res
		}
		return ctx.Err()
	}
}

// verify confirms, after el.Campaign returned, that the lease is alive (a
// keepalive round trip, which also starts the fence) and that the leader key
// is still ours: Campaign only waits for older keys to go, it does not
// notice its own key expiring meanwhile. It returns the revision to watch
// the key from.
func (l *Leadership) verify(ctx context.Context, lease clientv3.LeaseID, createRev int64) (int64, error) {
	vctx, cancel := context.WithTimeout(ctx, l.cfg.DialTimeout)
	defer cancel()
	sent := l.fence.now()
	ka, err := l.client.KeepAliveOnce(vctx, lease)
	if err != nil {
		return 0, fmt.Errorf("confirm lease after election: %w", err)
	}
	l.fence.confirm(sent, time.Duration(ka.TTL)*time.Second)
	get, err := l.client.Get(vctx, l.key)
	if err != nil {
		return 0, fmt.Errorf("read leader key after election: %w", err)
	}
	if len(get.Kvs) != 1 || get.Kvs[0].CreateRevision != createRev || clientv3.LeaseID(get.Kvs[0].Lease) != lease {
		return 0, fmt.Errorf("leader key %s after election: %w", l.key, ErrKeyDeleted)
	}
	return get.Header.Revision, nil
}

// Term is this leadership's term: the create revision of its election key.
// etcd revisions only grow and a candidate leads only after every key
// created before its own is gone, so every later leader's term is strictly
// greater (docs/ha.md).
func (l *Leadership) Term() uint64 { return l.term }

// Address is the RPC address published as the election value.
func (l *Leadership) Address() string { return l.cfg.Address }

// Key is the etcd key holding the election value.
func (l *Leadership) Key() string { return l.key }

// Guard is the comparison that holds only while the election key is
// still the one this term created: a transaction If(Guard(), ...) made by
// a deposed leader (its key gone with its lease) changes nothing.
func (l *Leadership) Guard() clientv3.Cmp {
	return clientv3.Compare(clientv3.CreateRevision(l.key), "=", int64(l.term))
}

// KV is the leadership's etcd client (closed when the leadership ends);
// writes that only the leader may make go in transactions If(Guard()).
func (l *Leadership) KV() clientv3.KV { return l.client }

// Done is closed when the leadership is lost: the lease expired or could not
// be confirmed in time, the key was deleted, or Resign was called. Err says
// which. Valid is false before Done closes.
func (l *Leadership) Done() <-chan struct{} { return l.done }

// Err is nil while the leadership holds and the reason once it ended.
func (l *Leadership) Err() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.err
}

// Valid reports whether this process may still act as leader: true only
// while the last keepalive that etcd confirmed, counted from when it was
// SENT, plus the granted TTL minus SafetyMargin lies in the future on a
// clock that keeps running while the process is stopped. It reads the clock
// on every call (it does not wait for a background goroutine), so a process
// resumed after SIGSTOP sees false on its first call. Once false, always
// false. Cheap (two atomic loads and a clock read): call it right before
// every write a leader makes.
func (l *Leadership) Valid() bool { return l.fence.valid() }

// Fence is Valid as an error: nil, or ErrNotLeader wrapping the reason.
func (l *Leadership) Fence() error {
	if l.fence.valid() {
		return nil
	}
	if err := l.Err(); err != nil {
		return fmt.Errorf("%w (term %d): %w", ErrNotLeader, l.term, err)
	}
	return fmt.Errorf("%w (term %d): %w", ErrNotLeader, l.term, ErrLeaseUnconfirmed)
}

// Remaining is how long Valid stays true without another confirmed
// keepalive; 0 once it is false. A master may bound the leases it grants by
// it.
func (l *Leadership) Remaining() time.Duration { return l.fence.remaining() }

// Resign ends the leadership: the fence goes down at once, then the leader
// key is deleted and the lease revoked so a standby takes over without
// waiting for the TTL. It waits for the cleanup (bounded by ctx) and is safe
// to call after the leadership was lost, and more than once.
func (l *Leadership) Resign(ctx context.Context) error {
	l.lose(ErrResigned)
	select {
	case <-l.stopped:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("ha: resign term %d: %w", l.term, ctx.Err())
	}
}

// lose ends the leadership once, with cause; later calls do nothing.
func (l *Leadership) lose(cause error) {
	l.loseOnce.Do(func() {
		l.fence.drop()
		l.mu.Lock()
		l.err = cause
		l.mu.Unlock()
		close(l.done)
		l.stopBg()
		l.cfg.Logger.Warn("ha: leadership ended", "prefix", l.cfg.Prefix, "address", l.cfg.Address,
			"term", l.term, "cause", cause)
	})
}

// keepAlive confirms the lease every TTL/3 and raises the fence with each
// confirmation. It is separate from the session's own keepalive stream
// because that stream does not tell when the confirmed request was sent.
func (l *Leadership) keepAlive(ctx context.Context) {
	period := l.cfg.SessionTTL / 3
	for {
		l.waitIfPaused(ctx)
		sent := l.fence.now()
		kctx, cancel := context.WithTimeout(ctx, period)
		ka, err := l.client.KeepAliveOnce(kctx, l.session.Lease())
		cancel()
		l.waitIfPaused(ctx)
		switch {
		case err == nil:
			l.fence.confirm(sent, time.Duration(ka.TTL)*time.Second)
		case errors.Is(err, rpctypes.ErrLeaseNotFound):
			l.lose(ErrLeaseExpired)
			return
		case ctx.Err() != nil:
			return
		}
		wait := period - (l.fence.now() - sent)
		if wait <= 0 {
			continue
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// monitor ends the leadership when the fence expires, the session ends or
// the leader key goes, then cleans up: it owns the session and client.
func (l *Leadership) monitor(ctx context.Context, wch clientv3.WatchChan) {
	defer close(l.stopped)
	defer l.cleanup()
	fenceTimer := time.NewTimer(l.fence.remaining())
	defer fenceTimer.Stop()
	for {
		var cause error
		select {
		case <-ctx.Done(): // lose was called (Resign or elsewhere)
			return
		case <-fenceTimer.C:
			l.waitIfPaused(ctx)
			if d := l.fence.remaining(); d > 0 {
				fenceTimer.Reset(d)
				continue
			}
			cause = ErrLeaseUnconfirmed
		case <-l.session.Done():
			cause = ErrLeaseExpired
		case resp, ok := <-wch:
			cause = keyWatchCause(resp, ok)
		}
		if cause != nil {
			l.waitIfPaused(ctx)
			l.lose(cause)
		}
	}
}

// waitIfPaused blocks while the test seam paused is set.
func (l *Leadership) waitIfPaused(ctx context.Context) {
	if p := l.paused.Load(); p != nil {
		select {
		case <-*p:
		case <-ctx.Done():
		}
	}
}

// keyWatchCause turns one watch response on the leader key into a reason
// to step down, or nil.
func keyWatchCause(resp clientv3.WatchResponse, ok bool) error {
	if !ok || resp.Canceled || resp.Err() != nil {
		return fmt.Errorf("%w: %v", ErrWatchFailed, resp.Err())
	}
	for _, ev := range resp.Events {
		if ev.Type == clientv3.EventTypeDelete {
			return ErrKeyDeleted
		}
	}
	return nil
}

// cleanup deletes the leader key (if still ours) and revokes the lease,
// best effort and bounded: if etcd is unreachable the lease expires by
// itself since nothing keeps it alive any more. Then it closes the client.
func (l *Leadership) cleanup() {
	if l.client.Ctx().Err() != nil { // the client is closed: nothing can reach etcd
		l.session.Orphan()
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), l.cfg.DialTimeout)
	defer cancel()
	cmp := clientv3.Compare(clientv3.CreateRevision(l.key), "=", int64(l.term))
	if _, err := l.client.Txn(ctx).If(cmp).Then(clientv3.OpDelete(l.key)).Commit(); err != nil {
		l.cfg.Logger.Debug("ha: delete leader key", "key", l.key, "err", err)
	}
	l.session.Orphan()
	revokeBestEffort(l.client, l.session.Lease(), l.cfg.DialTimeout)
	_ = l.client.Close()
}

func closeSession(sess *concurrency.Session, timeout time.Duration) {
	sess.Orphan()
	revokeBestEffort(sess.Client(), sess.Lease(), timeout)
}

func revokeBestEffort(cli *clientv3.Client, id clientv3.LeaseID, timeout time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	_, _ = cli.Revoke(ctx, id)
}

// backoff is a capped exponential wait for retry loops.
type backoff struct {
	min, max, cur time.Duration
}

// wait sleeps the next backoff step; false if ctx ended first.
func (b *backoff) wait(ctx context.Context) bool {
	b.cur = min(max(b.cur*2, b.min), b.max)
	t := time.NewTimer(b.cur)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

func (b *backoff) reset() { b.cur = 0 }
