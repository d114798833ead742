package client

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/tierstore/tierstore/internal/errcode"
	"github.com/tierstore/tierstore/masterapi"
)

// coalescer merges the master calls of one kind that concurrent single
// puts of this client make (PutEnd): while one call is in flight, the
// calls that arrive wait, and when it returns they go together as one
// batch call (BatchPutEnd), whose items the master serves as it serves
// the single calls. A put that finds no call in flight makes its single
// call at once, so a lone writer's puts are unchanged. PutStart is not
// merged: the master serves a batch's items one after the other, and a
// PutStart may wait for room (put_start_max_wait), which would hold the
// puts batched behind it (docs/benchmarks.md, "Stop 45: single puts share
// their PutEnds").
//
// A caller whose context ends while it waits leaves with its context's
// error: nothing sent if its call was still waiting, else the batch's
// answer for it is dropped (the put's caller revokes it, as after any
// failed PutEnd).
type coalescer[Q any] struct {
	one   func(ctx context.Context, q Q) error
	batch func(ctx context.Context, qs []Q) ([]error, error) // an error per item

	mu      sync.Mutex // guards busy and waiting
	busy    bool       // a call of this kind is in flight
	waiting []*coalesced[Q]
}

// coalesced is one call waiting in a coalescer.
type coalesced[Q any] struct {
	ctx  context.Context
	q    Q
	err  error
	done chan struct{} // closed when err is set
}

// do makes the call q: alone when none is in flight, else in the next batch.
func (c *coalescer[Q]) do(ctx context.Context, q Q) error {
	c.mu.Lock()
	if !c.busy {
		c.busy = true
		c.mu.Unlock()
		err := c.one(ctx, q)
		c.next()
		return err
	}
	w := &coalesced[Q]{ctx: ctx, q: q, done: make(chan struct{})}
	c.waiting = append(c.waiting, w)
	c.mu.Unlock()
	select {
	case <-w.done:
		return w.err
	case <-ctx.Done():
	}
	c.withdraw(w) // never sent, or in a batch whose answer for it is dropped
	return ctx.Err()
}

// withdraw takes w out of the waiting calls, if a batch has not taken it.
func (c *coalescer[Q]) withdraw(w *coalesced[Q]) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if i := slices.Index(c.waiting, w); i >= 0 {
		c.waiting = slices.Delete(c.waiting, i, i+1)
	}
}

// next sends the waiting calls as one batch, or marks nothing in flight.
func (c *coalescer[Q]) next() {
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
func (c *coalescer[Q]) send(ws []*coalesced[Q]) {
	ctx, cancel := batchContext(ws)
	defer cancel()
	if len(ws) == 1 {
		ws[0].err = c.one(ctx, ws[0].q)
	} else {
		qs := make([]Q, len(ws))
		for i, w := range ws {
			qs[i] = w.q
		}
		errs, err := c.batch(ctx, qs)
		if err == nil && len(errs) != len(qs) {
			err = errcode.Errorf(errcode.InternalError, "client: a batch of %d calls answered %d items", len(qs), len(errs))
		}
		for i, w := range ws {
			if w.err = err; err == nil {
				w.err = errs[i]
			}
		}
	}
	for _, w := range ws {
		close(w.done)
	}
	c.next()
}

// batchContext is the context of a batch of ws: the first one's values,
// no cancellation, the latest of their deadlines (none if one has none).
// A caller that leaves early does not cut the others' calls short.
func batchContext[Q any](ws []*coalesced[Q]) (context.Context, context.CancelFunc) {
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

// putEnds merges the PutEnd calls of a client's concurrent single puts
// (Put, PutParts) over m into BatchPutEnds.
func putEnds(m masterapi.ClientAPI) *coalescer[masterapi.PutRef] {
	return &coalescer[masterapi.PutRef]{
		one:   func(ctx context.Context, q masterapi.PutRef) error { return m.PutEnd(ctx, q.Key, q.Token) },
		batch: m.BatchPutEnd,
	}
}
