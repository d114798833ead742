package client

import (
	"context"
	"sync"
	"time"

	"github.com/tierstore/tierstore/masterapi"
)

// coalescer merges the master calls of one kind (PutStart, PutEnd) that
// concurrent single puts of this client make: while one call is in
// flight, the calls that arrive wait, and when it returns they go
// together as one batch call (BatchPutStart, BatchPutEnd), whose items
// the master serves as it serves the single calls. A put that finds no
// call in flight makes its single call at once, so a lone writer's puts
// are unchanged; eight writers make about two master calls a put fewer
// in all than they did, each batch costing the master and the client
// about one call's transport (docs/benchmarks.md, "Stop 45: single puts
// share master calls").
//
// A caller whose context ends while it waits unqueued leaves with its
// context's error and nothing sent; one whose item is already in a batch
// leaves too, and the batch's answer for it goes to abandon (a PutStart
// that succeeded for nobody is revoked).
type coalescer[Q, R any] struct {
	one     func(ctx context.Context, q Q) (R, error)
	batch   func(ctx context.Context, qs []Q) ([]R, []error, error)
	abandon func(q Q, r R) // an item answered without error after its caller left; may be nil

	mu      sync.Mutex // guards busy and waiting
	busy    bool       // a call of this kind is in flight
	waiting []*coalesced[Q, R]
}

// coalesced is one call waiting in a coalescer.
type coalesced[Q, R any] struct {
	ctx  context.Context
	q    Q
	r    R
	err  error
	done chan struct{} // closed when r and err are set

	mu   sync.Mutex // guards left
	left bool       // the caller returned before done
}

// do makes the call q: alone when none is in flight, else in the next batch.
func (c *coalescer[Q, R]) do(ctx context.Context, q Q) (R, error) {
	c.mu.Lock()
	if !c.busy {
		c.busy = true
		c.mu.Unlock()
		r, err := c.one(ctx, q)
		c.next()
		return r, err
	}
	w := &coalesced[Q, R]{ctx: ctx, q: q, done: make(chan struct{})}
	c.waiting = append(c.waiting, w)
	c.mu.Unlock()
	select {
	case <-w.done:
		return w.r, w.err
	case <-ctx.Done():
	}
	var zero R
	if c.withdraw(w) {
		return zero, ctx.Err() // never sent
	}
	w.mu.Lock()
	select {
	case <-w.done: // answered meanwhile: the answer stands
		w.mu.Unlock()
		return w.r, w.err
	default:
	}
	w.left = true
	w.mu.Unlock()
	return zero, ctx.Err()
}

// withdraw takes w out of the waiting calls; false when a batch took it.
func (c *coalescer[Q, R]) withdraw(w *coalesced[Q, R]) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, x := range c.waiting {
		if x == w {
			c.waiting = append(c.waiting[:i], c.waiting[i+1:]...)
			return true
		}
	}
	return false
}

// next sends the waiting calls as one batch, or marks nothing in flight.
func (c *coalescer[Q, R]) next() {
	c.mu.Lock()
	ws := c.waiting
	c.waiting = nil
	c.busy = len(ws) > 0
	c.mu.Unlock()
	if len(ws) > 0 {
		go c.send(ws)
	}
}

// send makes the call of ws (one batch, or the single call when it is one),
// answers each, then sends what waited meanwhile.
func (c *coalescer[Q, R]) send(ws []*coalesced[Q, R]) {
	ctx, cancel := batchContext(ws)
	defer cancel()
	if len(ws) == 1 {
		ws[0].r, ws[0].err = c.one(ctx, ws[0].q)
	} else {
		qs := make([]Q, len(ws))
		for i, w := range ws {
			qs[i] = w.q
		}
		rs, errs, err := c.batch(ctx, qs)
		for i, w := range ws {
			switch {
			case err != nil:
				w.err = err
			case errs[i] != nil:
				w.err = errs[i]
			default:
				w.r = rs[i]
			}
		}
	}
	for _, w := range ws {
		w.mu.Lock()
		close(w.done)
		left := w.left
		w.mu.Unlock()
		if left && w.err == nil && c.abandon != nil {
			c.abandon(w.q, w.r)
		}
	}
	c.next()
}

// batchContext is the context of a batch of ws: the first one's values,
// no cancellation, the latest of their deadlines (none if one has none).
// A caller that leaves early does not cut the others' calls short.
func batchContext[Q, R any](ws []*coalesced[Q, R]) (context.Context, context.CancelFunc) {
	var latest time.Time
	for _, w := range ws {
		d, ok := w.ctx.Deadline()
		if !ok {
			return context.WithCancel(context.WithoutCancel(ws[0].ctx))
		}
		if d.After(latest) {
			latest = d
		}
	}
	return context.WithDeadline(context.WithoutCancel(ws[0].ctx), latest)
}

// putCalls are the coalescers of a client's single puts (Put, PutParts):
// PutStart and PutEnd.
type putCalls struct {
	starts coalescer[masterapi.PutStartRequest, masterapi.PutStartReply]
	ends   coalescer[masterapi.PutRef, struct{}]
}

// newPutCalls returns the put coalescers over m; revoke abandons a put
// whose PutStart succeeded after its caller left.
func newPutCalls(m masterapi.ClientAPI, revoke func(key string, token uint64)) *putCalls {
	p := &putCalls{}
	p.starts = coalescer[masterapi.PutStartRequest, masterapi.PutStartReply]{
		one: m.PutStart,
		batch: func(ctx context.Context, qs []masterapi.PutStartRequest) ([]masterapi.PutStartReply, []error, error) {
			res, err := m.BatchPutStart(ctx, qs)
			if err != nil {
				return nil, nil, err
			}
			rs, errs := make([]masterapi.PutStartReply, len(res)), make([]error, len(res))
			for i, x := range res {
				rs[i], errs[i] = x.PutStartReply, x.Err
			}
			return rs, errs, nil
		},
		abandon: func(q masterapi.PutStartRequest, r masterapi.PutStartReply) { revoke(q.Key, r.PutToken) },
	}
	p.ends = coalescer[masterapi.PutRef, struct{}]{
		one: func(ctx context.Context, q masterapi.PutRef) (struct{}, error) {
			return struct{}{}, m.PutEnd(ctx, q.Key, q.Token)
		},
		batch: func(ctx context.Context, qs []masterapi.PutRef) ([]struct{}, []error, error) {
			errs, err := m.BatchPutEnd(ctx, qs)
			return make([]struct{}, len(qs)), errs, err
		},
	}
	return p
}
