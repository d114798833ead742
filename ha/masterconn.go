package ha

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/tierstore/tierstore/internal/errcode"
	"github.com/tierstore/tierstore/mastergrpc"
)

// A Remote dialed with "etcd://..." talks to whichever master etcd names the
// leader (Resolver) through masterConn, a grpc.ClientConnInterface: the
// generated stubs and every method of Remote are the same as in host:port
// mode; only Invoke differs. Invoke sends a call to the current leader and,
// when it cannot have been applied or may be applied again safely, sends it
// again across a failover, within the caller's context:
//
//   - the master answered UNAVAILABLE_IN_CURRENT_STATUS (a standby, a
//     deposed leader, or a new leader still rebuilding its metadata): the
//     call was not applied; it is sent again, at once to a newer leader,
//     otherwise after a backoff (50 ms doubling to 200 ms) or as soon as
//     the resolved leader changes;
//   - an answer stamped with a term older than the newest this Remote has
//     seen (mastergrpc.TermTrailer) comes from a deposed leader: it is discarded and
//     the call sent again, like an UNAVAILABLE answer;
//   - the resolver names a newer leader while a call is in flight (the old
//     one is stopped or partitioned and would never answer): the call is
//     cancelled and sent to the new leader;
//   - a transport failure (connection refused or reset, leader killed): the
//     call may or may not have been applied. Idempotent calls (every call
//     but PutStart, BatchPutStart, Remove, RemoveAll, RemoveByRegex and
//     EvictDRAM; PutEnd and PutRevoke are made idempotent by their put
//     token) are sent again as above. The others are sent again only to a leader of a newer term
//     (the old leader's metadata went with it, so nothing is applied twice),
//     waited for at most FailoverWait; otherwise the failure is returned.
//
// Every other answer (a tierstore error code) is returned as is. A caller
// without a deadline is retried until its context ends.

// FailoverWait bounds how long a call that must not be sent twice to the
// same leader (PutStart, Remove, ...) waits for a new leader after a
// transport failure, within the caller's deadline: a dead leader is
// replaced in about 3.5 s with the default session TTL (docs/md).
const FailoverWait = 8 * time.Second

// failoverWait is FailoverWait (a variable for tests).
var failoverWait = FailoverWait

// Retry pacing of masterConn.
const (
	retryBackoff    = 50 * time.Millisecond
	retryBackoffMax = 200 * time.Millisecond
)

// notIdempotent lists the calls that must not be applied twice by one
// leader (by their gRPC method name).
var notIdempotent = map[string]bool{
	"PutStart": true, "BatchPutStart": true, "Remove": true, "RemoveAll": true, "RemoveByRegex": true, "EvictDRAM": true,
}

func init() { mastergrpc.RegisterScheme(MasterScheme, dialLeader) }

// MasterScheme is the scheme of the master addresses this package resolves:
// "etcd://h1:2379,h2:2379[/prefix]" (ParseMasterURL).
const MasterScheme = "etcd"

// dialLeader opens the connection of an etcd:// address for
// mastergrpc.Dial: opts are the Client's dial options, used for each
// leader it connects to.
func dialLeader(addr string, opts []grpc.DialOption) (mastergrpc.Conn, error) {
	u, err := ParseMasterURL(addr)
	if err != nil {
		return nil, err
	}
	// Leader changes are the caller's business (a node logs what it does
	// about one); the resolver's own log keeps its warnings only.
	res, err := NewResolver(u, ResolverOptions{Logger: slog.New(warnOnly{slog.Default().Handler()})})
	if err != nil {
		return nil, err
	}
	return &masterConn{res: res, opts: opts, log: slog.Default().With("master", u.String()), conns: map[string]*grpc.ClientConn{}}, nil
}

// masterConn is the connection of an etcd:// mastergrpc.Client; it
// implements mastergrpc.Follower.
type masterConn struct {
	res  *Resolver
	opts []grpc.DialOption
	log  *slog.Logger

	mu     sync.Mutex                  // protects conns and closed
	conns  map[string]*grpc.ClientConn // by leader address; only the current one is kept
	closed bool

	highest atomic.Uint64 // newest term seen, from the resolver or an answer
}

var errRemoteClosed = status.Error(codes.Canceled, "ha: remote closed")

// Close closes the connections and the resolver.
func (c *masterConn) Close() error {
	c.mu.Lock()
	c.closed = true
	conns := c.conns
	c.conns = map[string]*grpc.ClientConn{}
	c.mu.Unlock()
	for _, cc := range conns {
		_ = cc.Close()
	}
	return c.res.Close()
}

var _ mastergrpc.Follower = (*masterConn)(nil)

// Term implements mastergrpc.Follower: the newest term seen, from etcd or
// from an answer.
func (c *masterConn) Term() uint64 {
	c.raise(c.res.Current().Term)
	return c.highest.Load()
}

// LeaderChanged implements mastergrpc.Follower.
func (c *masterConn) LeaderChanged() (uint64, <-chan struct{}) {
	l, ch := c.res.Changed()
	return l.Term, ch
}

// LeaderAddr implements mastergrpc.Follower.
func (c *masterConn) LeaderAddr() string { return c.res.Current().Addr }

// raise records t as seen.
func (c *masterConn) raise(t uint64) {
	for {
		h := c.highest.Load()
		if t <= h || c.highest.CompareAndSwap(h, t) {
			return
		}
	}
}

// conn returns the connection to addr, closing connections to former
// leaders (calls still on them fail and are retried).
func (c *masterConn) conn(addr string) (*grpc.ClientConn, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, errRemoteClosed
	}
	if cc := c.conns[addr]; cc != nil {
		return cc, nil
	}
	for a, old := range c.conns {
		delete(c.conns, a)
		go old.Close()
	}
	cc, err := grpc.NewClient(addr, c.opts...)
	if err != nil {
		return nil, status.Errorf(codes.Unavailable, "ha: dial leader %s: %v", addr, err)
	}
	c.conns[addr] = cc
	return cc, nil
}

// NewStream implements grpc.ClientConnInterface: the master service has no
// streaming calls.
func (c *masterConn) NewStream(context.Context, *grpc.StreamDesc, string, ...grpc.CallOption) (grpc.ClientStream, error) {
	return nil, status.Error(codes.Unimplemented, "ha: no streaming calls on the master")
}

// outcome is what Invoke does after one attempt.
type outcome int

const (
	done       outcome = iota // return the error (nil: success)
	again                     // not applied: send again
	maybeTwice                // transport failure: applied or not
	superseded                // a newer leader took over during the attempt
)

// Invoke implements grpc.ClientConnInterface (see the comment at the top).
func (c *masterConn) Invoke(ctx context.Context, method string, args, reply any, opts ...grpc.CallOption) error {
	idem := !notIdempotent[method[strings.LastIndexByte(method, '/')+1:]]
	wait := retryBackoff
	var last error
	for {
		l, changed, err := c.leader(ctx)
		if err != nil {
			return firstErr(last, err)
		}
		out, err := c.attempt(ctx, l, changed, method, args, reply, opts)
		if out == done || ctx.Err() != nil {
			return err
		}
		last = err
		switch {
		case out == superseded:
			continue
		case out == maybeTwice && !idem:
			if _, werr := c.waitNewer(ctx, l.Term); werr != nil {
				return err
			}
			continue
		}
		if cur := c.res.Current(); cur.Known() && cur.Term > l.Term {
			continue // a newer leader: at once
		}
		if !c.pause(ctx, wait) {
			return err
		}
		wait = min(2*wait, retryBackoffMax)
	}
}

// leader waits for a known leader and returns it with the channel closed on
// its next change.
func (c *masterConn) leader(ctx context.Context) (Leader, <-chan struct{}, error) {
	for {
		l, ch := c.res.Changed()
		if l.Known() {
			c.raise(l.Term)
			return l, ch, nil
		}
		select {
		case <-ctx.Done():
			return l, nil, status.FromContextError(ctx.Err()).Err()
		case <-ch:
		}
	}
}

// waitNewer waits, at most FailoverWait within ctx, for a leader of a term
// newer than term.
func (c *masterConn) waitNewer(ctx context.Context, term uint64) (Leader, error) {
	wctx, cancel := context.WithTimeout(ctx, failoverWait)
	defer cancel()
	return c.res.WaitNewer(wctx, term)
}

// pause waits d, or less if the resolved leader changes; false if ctx ended.
func (c *masterConn) pause(ctx context.Context, d time.Duration) bool {
	_, ch := c.res.Changed()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
	case <-ch:
	}
	return true
}

// attempt sends the call once to leader l; it is cancelled if a newer
// leader is resolved meanwhile (changed is l's change channel).
func (c *masterConn) attempt(ctx context.Context, l Leader, changed <-chan struct{}, method string, args, reply any, opts []grpc.CallOption) (outcome, error) {
	cc, err := c.conn(l.Addr)
	if err != nil {
		if errors.Is(err, errRemoteClosed) {
			return done, err
		}
		return again, err
	}
	actx, cancel := context.WithCancel(ctx)
	defer cancel()
	var gone atomic.Bool
	stop := make(chan struct{})
	defer close(stop)
	go c.watchSupersede(l, changed, stop, func() { gone.Store(true); cancel() })
	var tr metadata.MD
	err = cc.Invoke(actx, method, args, reply, append(opts, grpc.Trailer(&tr))...)
	if t := mastergrpc.TermOf(tr); t != 0 {
		if t < c.highest.Load() {
			return again, status.Errorf(codes.Unavailable, "ha: answer of leadership term %d discarded: term %d leads", t, c.highest.Load())
		}
		c.raise(t)
	}
	switch {
	case err == nil:
		return done, nil
	case gone.Load() && ctx.Err() == nil:
		return superseded, err
	}
	return classify(err), err
}

// watchSupersede calls cancel when a leader other than l (a newer term, or
// another address) is resolved, until stop closes.
func (c *masterConn) watchSupersede(l Leader, changed <-chan struct{}, stop <-chan struct{}, cancel func()) {
	for {
		select {
		case <-stop:
			return
		case <-changed:
		}
		cur, ch := c.res.Changed()
		if cur.Known() && (cur.Term > l.Term || cur.Addr != l.Addr) {
			cancel()
			return
		}
		changed = ch
	}
}

// classify reads a failed attempt's status.
func classify(err error) outcome {
	st, ok := status.FromError(err)
	if !ok {
		return done
	}
	for _, d := range st.Details() {
		if ei, ok := d.(*errdetails.ErrorInfo); ok && ei.GetDomain() == errcode.Domain {
			if ei.GetReason() == errcode.UnavailableStatus.String() {
				return again
			}
			return done
		}
	}
	switch st.Code() {
	case codes.Unavailable, codes.Internal, codes.Unknown, codes.Aborted, codes.Canceled, codes.DeadlineExceeded:
		return maybeTwice
	}
	return done
}

func firstErr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

// warnOnly passes records of level Warn and above.
type warnOnly struct{ slog.Handler }

func (h warnOnly) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= slog.LevelWarn && h.Handler.Enabled(ctx, l)
}

func (h warnOnly) WithAttrs(as []slog.Attr) slog.Handler { return warnOnly{h.Handler.WithAttrs(as)} }

func (h warnOnly) WithGroup(name string) slog.Handler { return warnOnly{h.Handler.WithGroup(name)} }
