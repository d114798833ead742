package mastergrpc

import (
	"context"
	"errors"
	"time"

	"google.golang.org/grpc"

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

// askAgain is the unary interceptor of host:port connections (Dial): an
// answer of UNAVAILABLE_IN_CURRENT_STATUS means the master applied nothing
// (a rebuild miss, or a standby), so the call is sent again after a pause,
// within AskAgainFor and the caller's deadline. Connections of a scheme
// (etcd://) do this themselves, following the leader.
func askAgain(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	var end time.Time
	wait := askAgainFirst
	for {
		err := invoker(ctx, method, req, reply, cc, opts...)
		if err == nil || !errors.Is(errcode.FromStatus(err), errcode.ErrUnavailable) {
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
