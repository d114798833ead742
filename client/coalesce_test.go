package client

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tierstore/tierstore/internal/errcode"
)

// fakeCalls is a master call of one kind for the coalescer's tests: the
// single call answers nil and blocks while hold is set; a batch answers
// nil for each item, or an item error for odd q when oddFail.
type fakeCalls struct {
	mu      sync.Mutex // guards the fields below
	singles []int
	batches [][]int
	hold    chan struct{} // the single calls wait for it when not nil
	oddFail bool
	fail    error // the batch call's own error
	dl      []time.Time
}

func (f *fakeCalls) coalescer() *coalescer[int] {
	return &coalescer[int]{
		one: func(ctx context.Context, q int) error {
			f.mu.Lock()
			f.singles = append(f.singles, q)
			hold := f.hold
			f.mu.Unlock()
			if hold != nil {
				<-hold
			}
			return nil
		},
		batch: func(ctx context.Context, qs []int) ([]error, error) {
			f.mu.Lock()
			defer f.mu.Unlock()
			f.batches = append(f.batches, append([]int(nil), qs...))
			d, _ := ctx.Deadline()
			f.dl = append(f.dl, d)
			if f.fail != nil {
				return nil, f.fail
			}
			errs := make([]error, len(qs))
			for i, q := range qs {
				if f.oddFail && q%2 == 1 {
					errs[i] = fmt.Errorf("item %d: %w", q, ErrObjectExists)
				}
			}
			return errs, nil
		},
	}
}

// inFlight starts a single call of 100 on wg and waits until f holds it
// in flight (f.hold must be set), so that the calls made next wait.
func inFlight(t *testing.T, f *fakeCalls, c *coalescer[int], wg *sync.WaitGroup) {
	t.Helper()
	wg.Go(func() { _ = c.do(context.Background(), 100) })
	require.Eventually(t, func() bool { f.mu.Lock(); defer f.mu.Unlock(); return len(f.singles) == 1 }, 10*time.Second, time.Millisecond)
}

// leaverAndStayer queues two calls behind the one in flight: 7, whose
// context cancel ends and whose error comes on left, and 8 on wg, which
// must succeed; it returns once both wait.
func leaverAndStayer(t *testing.T, c *coalescer[int], wg *sync.WaitGroup) (context.CancelFunc, <-chan error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	left := make(chan error, 1)
	go func() { left <- c.do(ctx, 7) }()
	wg.Go(func() {
		require.NoError(t, c.do(context.Background(), 8))
	})
	queued(t, c, 2)
	return cancel, left
}

// idle waits until c has no call in flight (the last batch's goroutine
// marks it after answering its callers).
func idle(t *testing.T, c *coalescer[int]) {
	t.Helper()
	require.Eventually(t, func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		return !c.busy
	}, 10*time.Second, time.Millisecond, "idle once every call is answered")
}

// queued waits until n calls wait in c.
func queued(t *testing.T, c *coalescer[int], n int) {
	t.Helper()
	require.Eventually(t, func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		return len(c.waiting) == n
	}, 10*time.Second, time.Millisecond, "%d calls queued", n)
}

// queueAndRelease starts callers 1..n while the in-flight call holds (f.hold),
// waits until all n are queued, releases the held call and waits for
// every caller (and what wg already holds); check gets each caller's item
// and answer.
func queueAndRelease(t *testing.T, f *fakeCalls, c *coalescer[int], wg *sync.WaitGroup, n int, check func(q int, err error)) {
	t.Helper()
	for q := 1; q <= n; q++ {
		wg.Go(func() { check(q, c.do(context.Background(), q)) })
	}
	queued(t, c, n)
	close(f.hold)
	wg.Wait()
}

func TestCoalescerLoneCallIsSingle(t *testing.T) {
	f := &fakeCalls{}
	c := f.coalescer()
	for q := 1; q <= 3; q++ {
		require.NoError(t, c.do(context.Background(), q))
	}
	idle(t, c)
	require.Equal(t, []int{1, 2, 3}, f.singles)
	require.Empty(t, f.batches, "calls one after the other never batch")
}

// TestCoalescerBatchesWhileInFlight: calls that arrive while one is in
// flight go as one batch when it returns, each caller answered its own
// item (item errors to their callers only).
func TestCoalescerBatchesWhileInFlight(t *testing.T) {
	f := &fakeCalls{hold: make(chan struct{}), oddFail: true}
	c := f.coalescer()
	var wg sync.WaitGroup
	wg.Go(func() {
		require.NoError(t, c.do(context.Background(), 100))
	})
	require.Eventually(t, func() bool { f.mu.Lock(); defer f.mu.Unlock(); return len(f.singles) == 1 }, 10*time.Second, time.Millisecond)
	const n = 7
	queueAndRelease(t, f, c, &wg, n, func(q int, err error) {
		if q%2 == 1 {
			require.ErrorIs(t, err, ErrObjectExists)
			return
		}
		require.NoError(t, err)
	})
	idle(t, c)
	f.mu.Lock()
	defer f.mu.Unlock()
	require.Len(t, f.batches, 1)
	got := append([]int(nil), f.batches[0]...)
	sort.Ints(got)
	require.Equal(t, []int{1, 2, 3, 4, 5, 6, 7}, got)
	require.Equal(t, []int{100}, f.singles)
}

func TestCoalescerBatchErrorToEveryMember(t *testing.T) {
	f := &fakeCalls{hold: make(chan struct{}), fail: ErrTransferFail}
	c := f.coalescer()
	var wg sync.WaitGroup
	inFlight(t, f, c, &wg)
	queueAndRelease(t, f, c, &wg, 3, func(_ int, err error) { require.ErrorIs(t, err, ErrTransferFail) })
}

// TestCoalescerShortAnswer: a batch answered with fewer items than it
// sent fails every caller with InternalError (no index out of range).
func TestCoalescerShortAnswer(t *testing.T) {
	f := &fakeCalls{hold: make(chan struct{})}
	c := f.coalescer()
	c.batch = func(context.Context, []int) ([]error, error) { return []error{nil}, nil }
	var wg sync.WaitGroup
	inFlight(t, f, c, &wg)
	queueAndRelease(t, f, c, &wg, 2, func(_ int, err error) {
		require.Equal(t, errcode.InternalError, errcode.Of(err), "%v", err)
	})
}

// TestCoalescerLeaverUnsent: a caller whose context ends while it waits
// unqueued leaves with its context's error and its item is never sent.
func TestCoalescerLeaverUnsent(t *testing.T) {
	f := &fakeCalls{hold: make(chan struct{})}
	c := f.coalescer()
	var wg sync.WaitGroup
	inFlight(t, f, c, &wg)
	cancel, left := leaverAndStayer(t, c, &wg)
	cancel()
	require.ErrorIs(t, <-left, context.Canceled)
	queued(t, c, 1)
	close(f.hold)
	wg.Wait()
	idle(t, c)
	f.mu.Lock()
	defer f.mu.Unlock()
	require.Equal(t, []int{100, 8}, f.singles, "the one left is sent alone; 7 never")
	require.Empty(t, f.batches)
}

// TestCoalescerLeaverInFlight: a caller that leaves while its item is in
// a batch gets its context's error at once; the batch still answers the
// others.
func TestCoalescerLeaverInFlight(t *testing.T) {
	f := &fakeCalls{hold: make(chan struct{})}
	c := f.coalescer()
	batchIn, release := make(chan struct{}), make(chan struct{})
	inner := c.batch
	c.batch = func(ctx context.Context, qs []int) ([]error, error) {
		close(batchIn)
		<-release
		return inner(ctx, qs)
	}
	var wg sync.WaitGroup
	inFlight(t, f, c, &wg)
	cancel, left := leaverAndStayer(t, c, &wg)
	close(f.hold)
	<-batchIn
	cancel()
	require.ErrorIs(t, <-left, context.Canceled, "the caller leaves before the batch answers")
	close(release)
	wg.Wait()
	idle(t, c)
	f.mu.Lock()
	defer f.mu.Unlock()
	require.Len(t, f.batches, 1)
	require.ElementsMatch(t, []int{7, 8}, f.batches[0])
}

// TestCoalescerBatchDeadlineIsLatest: a batch runs until the latest of its
// callers' deadlines, so a caller with a short one does not cut the
// others' calls short.
func TestCoalescerBatchDeadlineIsLatest(t *testing.T) {
	f := &fakeCalls{hold: make(chan struct{})}
	c := f.coalescer()
	var wg sync.WaitGroup
	inFlight(t, f, c, &wg)
	now := time.Now()
	late := now.Add(time.Hour)
	for i, d := range []time.Time{now.Add(time.Minute), late} {
		ctx, cancel := context.WithDeadline(context.Background(), d)
		defer cancel()
		wg.Go(func() { err := c.do(ctx, i+1); require.NoError(t, err) })
	}
	queued(t, c, 2)
	close(f.hold)
	wg.Wait()
	idle(t, c)
	f.mu.Lock()
	defer f.mu.Unlock()
	require.Len(t, f.dl, 1)
	require.True(t, f.dl[0].Equal(late), "batch deadline %v, want %v", f.dl[0], late)
}
