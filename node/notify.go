package node

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/tierstore/tierstore/internal/errcode"
	"github.com/tierstore/tierstore/masterapi"
)

// Notify pacing: the pause before the second send of a notify is
// notifyBackoff, doubled for each further one up to notifyBackoffMax; one
// send is bounded by notifyAttemptTimeout (a master that hangs is retried
// like one that refuses connections).
const (
	notifyBackoff        = 50 * time.Millisecond
	notifyBackoffMax     = time.Second
	notifyAttemptTimeout = 10 * time.Second
)

// errNotAnswered: the master did not answer a notify (transport failures
// until the round's deadline or Close), or answered that it does not know
// this node (it restarted, or expired the node). Neither is a refusal: a
// durable, indexed bucket is kept and re-registered (invariant 9).
var errNotAnswered = errors.New("node: the master did not answer the notify")

// noAnswer reports whether err says nothing about the request itself: a
// transport failure, a master shutting down or not serving, a send that
// timed out.
func noAnswer(err error) bool {
	return errors.Is(err, errcode.ErrRPCFail) || errors.Is(err, errcode.ErrShuttingDown) ||
		errors.Is(err, errcode.ErrUnavailable) || errors.Is(err, errcode.ErrContextCanceled) ||
		errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled)
}

// unknownNode reports whether err is the master saying it does not know
// this node: it must remount and re-register.
func unknownNode(err error) bool {
	return errors.Is(err, errcode.ErrNeedRemount) || errors.Is(err, errcode.ErrClientNotFound)
}

// notify sends req until the master answers it; the call is idempotent, so
// a notify the master applied but whose reply was lost is simply applied
// again. It returns the master's per-item answers, or:
//
//   - an error wrapping errNotAnswered when the master stayed unreachable
//     until ctx ended or the node was closed, or answered that it does not
//     know this node; a re-registration is then flagged (the heartbeat loop
//     runs it once the node is mounted again), so keys kept on SSD are
//     announced to whichever master answers next;
//   - any other error: the master's explicit refusal of the request.
func (n *Node) notify(ctx context.Context, req masterapi.NotifyRequest) ([]error, error) {
	wait := notifyBackoff
	start := time.Now()
	for attempt := 1; ; attempt++ {
		actx, cancel := context.WithTimeout(ctx, notifyAttemptTimeout)
		errs, err := n.m.NotifyOffloadSuccess(actx, req)
		cancel()
		switch {
		case err == nil:
			if attempt > 1 {
				n.log.Info("notify delivered after transport failures", "attempts", attempt, "after", time.Since(start).Round(time.Millisecond))
			}
			return errs, nil
		case unknownNode(err):
			// A restarted master (or one that expired this node): mount
			// again now, the re-registration announces what the SSD holds.
			if merr := n.remount(ctx); merr != nil {
				n.log.Warn("remount failed; will retry", "err", merr)
			}
			return nil, fmt.Errorf("%w: %w", errNotAnswered, err)
		case !noAnswer(err):
			return nil, err
		}
		n.metrics.notifyRetries.Add(1)
		if attempt == 1 {
			n.log.Warn("notify not answered; sending it again until the offload task timeout", "persisted", len(req.Persisted),
				"failed", len(req.Failed), "timeout", n.cfg.OffloadTaskTimeout, "err", err)
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
		case <-n.done():
		case <-t.C:
		}
		t.Stop()
		if ctx.Err() != nil || n.closing() {
			n.reregister.Store(true)
			return nil, fmt.Errorf("%w after %d sends in %v: %w", errNotAnswered, attempt, time.Since(start).Round(time.Millisecond), err)
		}
		wait = min(2*wait, notifyBackoffMax)
	}
}

// done is closed when Close starts.
func (n *Node) done() <-chan struct{} { return n.ctx.Done() }

// closing reports whether Close has started.
func (n *Node) closing() bool { return n.ctx.Err() != nil }
