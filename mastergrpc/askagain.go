package mastergrpc

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/tierstore/tierstore/internal/errcode"
)

// AskAgainFor bounds how long a call on a host:port connection is sent
// again while the master answers "ask again" (UNAVAILABLE_IN_CURRENT_STATUS,
// -1010): a master inside its rebuild window (restarted on its state_dir,
// re-learning the nodes' objects) answers a lookup miss that way, since the
// object may be one a node has not re-registered yet. The window lasts
// rebuild_window (2 s by default) and while a node re-registers, so this is
// several windows; the caller's deadline bounds it too. The answer is
// returned once either ends.
const AskAgainFor = 10 * time.Second

// askAgain backs off between attempts from askAgainFirst to askAgainMax.
const (
	askAgainFirst = 25 * time.Millisecond
	askAgainMax   = 200 * time.Millisecond
)

// ReconnectWait bounds how long a call on a host:port connection waits for
// the connection when it finds it failed (the master was unreachable at
// the last attempt): the call first asks for a new attempt at once
// (instead of after gRPC's backoff, up to seconds) and sends itself as
// soon as the connection is up, or fails as before (RPC_FAIL, without
// being sent) once this has passed. So a master back from a restart is
// used by the next call, while a master still down costs a call this
// long at most.
const ReconnectWait = 200 * time.Millisecond

// reconnectEvery rate-limits the immediate reconnection attempts that
// calls ask for while the master is down (one per this long per
// connection).
const reconnectEvery = 50 * time.Millisecond

// hostConn is the state the interceptors of one host:port connection share.
type hostConn struct {
	lastReset atomic.Int64 // unix ns of the last ResetConnectBackoff
}

// interceptor is the unary interceptor of a host:port connection (Dial):
// reconnect, then askAgain.
func (h *hostConn) interceptor(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	h.reconnect(ctx, cc)
	return askAgain(ctx, method, req, reply, cc, invoker, opts...)
}

// reconnect: when the connection is in TRANSIENT_FAILURE (a fail-fast call
// would fail at once, without being sent), it asks for a connection
// attempt now (rate-limited) and waits, at most ReconnectWait and within
// ctx, for the connection to leave that state.
func (h *hostConn) reconnect(ctx context.Context, cc *grpc.ClientConn) {
	st := cc.GetState()
	if st != connectivity.TransientFailure {
		return
	}
	now := time.Now()
	if last := h.lastReset.Load(); now.UnixNano()-last >= reconnectEvery.Nanoseconds() && h.lastReset.CompareAndSwap(last, now.UnixNano()) {
		cc.ResetConnectBackoff()
	}
	wctx, cancel := context.WithTimeout(ctx, ReconnectWait)
	defer cancel()
	for st == connectivity.TransientFailure || st == connectivity.Connecting || st == connectivity.Idle {
		if st == connectivity.Idle {
			cc.Connect()
		}
		if !cc.WaitForStateChange(wctx, st) {
			return
		}
		st = cc.GetState()
	}
}

// AskAgainStatus is err (a master's answer UNAVAILABLE_IN_CURRENT_STATUS
// given inside its rebuild window: a miss that a node's re-registration
// may still fill) as a gRPC status that also carries gRPC's standard
// errdetails.RetryInfo: a host:port connection sends such a call again
// (askAgain); a -1010 without it (a standby's "not the leader") is
// returned at once.
func AskAgainStatus(err error) error {
	st := status.Convert(errcode.ToStatus(err))
	if d, derr := st.WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(askAgainFirst)}); derr == nil {
		return d.Err()
	}
	return st.Err()
}

// askedAgain reports whether err is an answer of AskAgainStatus.
func askedAgain(err error) bool {
	st, ok := status.FromError(err)
	if !ok {
		return false
	}
	for _, d := range st.Details() {
		if _, ok := d.(*errdetails.RetryInfo); ok {
			return errors.Is(errcode.FromStatus(err), errcode.ErrUnavailable)
		}
	}
	return false
}

// askAgain sends a call again while it is answered with AskAgainStatus (a
// miss inside the master's rebuild window: nothing applied): after a
// pause, within AskAgainFor and the caller's deadline. Other -1010 answers
// (a standby's "not the leader") are returned at once. Connections of a
// scheme (etcd://) do this themselves, following the leader.
func askAgain(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	var end time.Time
	wait := askAgainFirst
	for {
		err := invoker(ctx, method, req, reply, cc, opts...)
		if err == nil || !askedAgain(err) {
			return err
		}
		now := time.Now()
		if end.IsZero() {
			end = now.Add(AskAgainFor)
		}
		if now.Add(wait).After(end) {
			return err
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
		wait = min(2*wait, askAgainMax)
	}
}
