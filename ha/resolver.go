package ha

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// Leader is the master that nodes and clients should talk to.
type Leader struct {
	// Addr is the leader's RPC address (host:port); empty when no leader is
	// known.
	Addr string
	// Term is the leader's term (0 in direct mode). Terms of later leaders
	// are strictly greater.
	Term uint64
}

// Known reports whether a leader is known.
func (l Leader) Known() bool { return l.Addr != "" }

// DefaultResyncInterval is how often a Resolver re-reads the leader even
// when its watch is quiet: a safety net for a watch that cannot notice a
// change (etcd restored from an older backup, for instance).
const DefaultResyncInterval = 10 * time.Second

// ResolverOptions tune a Resolver; the zero value gives the defaults.
type ResolverOptions struct {
	// DialTimeout bounds one etcd read. Default DefaultDialTimeout.
	DialTimeout time.Duration
	// ResyncInterval: see DefaultResyncInterval.
	ResyncInterval time.Duration
	// Logger receives leader changes and etcd errors. Default slog.Default().
	Logger *slog.Logger
}

// Resolver tells who leads. In etcd mode it reads the election prefix (the
// leader is the key created first, the same rule etcd's election uses) and
// watches it; on any watch failure (etcd restarted, member lost its leader,
// compaction) it re-reads and re-watches with capped backoff, forever,
// until Close. While etcd is unreachable it keeps the last leader it saw:
// that master, if alive, fences itself within its TTL and answers "not
// leader", and the resolver catches up as soon as etcd answers again.
// In direct mode (a plain host:port) it always returns that address, Term 0.
//
// Every method may be called from any goroutine.
type Resolver struct {
	url    MasterURL
	opts   ResolverOptions
	client *clientv3.Client // nil in direct mode
	log    *slog.Logger

	mu      sync.Mutex    // protects cur and changed
	cur     Leader        // the leader last read from etcd
	changed chan struct{} // closed (and replaced) when cur changes

	stop context.CancelFunc // ends run
	done chan struct{}      // closed when run has returned
}

// NewResolver starts resolving u. It does not wait for etcd: use WaitLeader.
// Errors: ErrConfig.
func NewResolver(u MasterURL, opts ResolverOptions) (*Resolver, error) {
	var err error
	if opts.DialTimeout, err = durationWithDefault("DialTimeout", opts.DialTimeout, DefaultDialTimeout); err != nil {
		return nil, err
	}
	if opts.ResyncInterval, err = durationWithDefault("ResyncInterval", opts.ResyncInterval, DefaultResyncInterval); err != nil {
		return nil, err
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	r := &Resolver{url: u, opts: opts, changed: make(chan struct{}), done: make(chan struct{})}
	r.stop = func() {}
	r.log = opts.Logger.With("master", u.String())
	if !u.IsEtcd() {
		if err := checkHostPort(u.Addr); err != nil {
			return nil, fmt.Errorf("%w: master address: %w", ErrConfig, err)
		}
		r.cur = Leader{Addr: u.Addr}
		close(r.done)
		return r, nil
	}
	if err := checkEndpoints(u.Endpoints); err != nil {
		return nil, err
	}
	if u.Prefix, err = prefixWithDefault(u.Prefix); err != nil {
		return nil, err
	}
	r.url = u
	if r.client, err = newClient(u.Endpoints, opts.DialTimeout, u.TLS); err != nil {
		return nil, err
	}
	ctx, stop := context.WithCancel(context.Background())
	r.stop = stop
	go r.run(ctx)
	return r, nil
}

// URL is the MasterURL being resolved.
func (r *Resolver) URL() MasterURL { return r.url }

// Current is the leader last seen; Leader{} (not Known) when there is none.
func (r *Resolver) Current() Leader {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.cur
}

// Changed returns the current leader and a channel closed as soon as it
// changes (a new leader, a new term of the same address, or no leader).
// Taking both in one call means no change can slip between them.
func (r *Resolver) Changed() (Leader, <-chan struct{}) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.cur, r.changed
}

// WaitLeader returns the current leader once one is known. Errors: ctx's
// error, ErrResolverClosed.
func (r *Resolver) WaitLeader(ctx context.Context) (Leader, error) {
	return r.waitFor(ctx, func(l Leader) bool { return l.Known() })
}

// WaitNewer returns the first leader whose term is greater than term, for a
// caller that saw the leader of term fail. Errors: ctx's error,
// ErrResolverClosed.
func (r *Resolver) WaitNewer(ctx context.Context, term uint64) (Leader, error) {
	return r.waitFor(ctx, func(l Leader) bool { return l.Known() && l.Term > term })
}

func (r *Resolver) waitFor(ctx context.Context, ok func(Leader) bool) (Leader, error) {
	for {
		cur, ch := r.Changed()
		if ok(cur) {
			return cur, nil
		}
		if r.client == nil { // direct mode never changes
			<-ctx.Done()
			return Leader{}, ctx.Err()
		}
		select {
		case <-ctx.Done():
			return Leader{}, ctx.Err()
		case <-r.done:
			return Leader{}, ErrResolverClosed
		case <-ch:
		}
	}
}

// Close stops watching and closes the etcd client. Waiters get
// ErrResolverClosed.
func (r *Resolver) Close() error {
	r.stop()
	<-r.done
	if r.client == nil {
		return nil
	}
	return r.client.Close()
}

func (r *Resolver) set(l Leader) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if l == r.cur {
		return
	}
	r.log.Info("ha: leader changed", "from", r.cur.Addr, "from_term", r.cur.Term, "to", l.Addr, "to_term", l.Term)
	r.cur = l
	close(r.changed)
	r.changed = make(chan struct{})
}

func (r *Resolver) run(ctx context.Context) {
	defer close(r.done)
	b := backoff{min: 50 * time.Millisecond, max: time.Second}
	for {
		synced, err := r.syncAndWatch(ctx)
		if ctx.Err() != nil {
			return
		}
		if synced {
			b.reset()
		}
		r.log.Debug("ha: resolver re-syncing", "err", err)
		if !b.wait(ctx) {
			return
		}
	}
}

// syncAndWatch reads the leader, then follows the prefix until the watch
// fails; synced tells whether the read succeeded (to reset the backoff).
func (r *Resolver) syncAndWatch(ctx context.Context) (synced bool, err error) {
	rev, err := r.sync(ctx)
	if err != nil {
		return false, err
	}
	// WithRequireLeader: a member cut off from its cluster's leader cancels
	// the watch instead of staying silent, so we re-read elsewhere.
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	wch := r.client.Watch(wctx, r.url.Prefix+"/", clientv3.WithPrefix(), clientv3.WithRev(rev+1))
	resync := time.NewTicker(r.opts.ResyncInterval)
	defer resync.Stop()
	for {
		select {
		case <-ctx.Done():
			return true, ctx.Err()
		case resp, ok := <-wch:
			if !ok {
				return true, errors.New("watch closed")
			}
			if err := resp.Err(); err != nil {
				return true, err
			}
			if len(resp.Events) == 0 {
				continue
			}
		case <-resync.C:
		}
		if _, err := r.sync(ctx); err != nil {
			return true, err
		}
	}
}

// sync reads the first-created key under the prefix (the leader) and
// publishes it; it returns the read's revision.
func (r *Resolver) sync(ctx context.Context) (int64, error) {
	gctx, cancel := context.WithTimeout(ctx, r.opts.DialTimeout)
	defer cancel()
	resp, err := r.client.Get(gctx, r.url.Prefix+"/", clientv3.WithFirstCreate()...)
	if err != nil {
		return 0, err
	}
	var l Leader
	if len(resp.Kvs) > 0 {
		l = Leader{Addr: string(resp.Kvs[0].Value), Term: uint64(resp.Kvs[0].CreateRevision)}
	}
	r.set(l)
	return resp.Header.Revision, nil
}
