package client

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tierstore/tierstore/masterapi"
)

// Touches: a get served from the replica-location cache (loccache.go) is
// no lookup, so the master would not see it: the object's recency (its
// DRAM eviction order) and the admission policy's frequencies would count
// a hot object about once per lease. The keys of cached gets are gathered
// for touchDelay and sent in one Touch (masterapi.Toucher), in the
// background; Close sends what is pending. Best effort: a failed Touch is
// counted, not retried; keys beyond touchMax in one delay are counted
// and dropped.

const (
	// touchDelay is how long the keys of cached gets gather before they
	// are sent.
	touchDelay = 100 * time.Millisecond
	// touchMax bounds the keys of one Touch (distinct keys; repeats of a
	// key in one delay are one).
	touchMax = 4096
	// touchTimeout bounds one Touch call.
	touchTimeout = 2 * time.Second
)

// toucher gathers the keys of cached gets.
type toucher struct {
	master masterapi.Toucher // nil: the master connection cannot hear touches

	mu        sync.Mutex          // protects keys and scheduled
	keys      map[string]struct{} // gathered since the last send
	scheduled bool                // a send is due touchDelay after the first key

	sent, failed, dropped atomic.Int64
}

// touched records a get of key served from the cache.
func (c *Client) touched(key string) {
	t := &c.touch
	if t.master == nil {
		return
	}
	t.mu.Lock()
	if t.keys == nil {
		t.keys = map[string]struct{}{}
	}
	if _, ok := t.keys[key]; !ok && len(t.keys) >= touchMax {
		t.mu.Unlock()
		t.dropped.Add(1)
		return
	}
	t.keys[key] = struct{}{}
	schedule := !t.scheduled
	t.scheduled = true
	t.mu.Unlock()
	if schedule {
		time.AfterFunc(touchDelay, c.sendTouchesInBackground)
	}
}

// take returns the gathered keys and starts gathering anew.
func (t *toucher) take() []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	keys := make([]string, 0, len(t.keys))
	for k := range t.keys {
		keys = append(keys, k)
	}
	clear(t.keys)
	t.scheduled = false
	return keys
}

// sendTouchesInBackground sends the gathered keys as a background call
// (Close waits for it); once the client is closing, Close sends them.
func (c *Client) sendTouchesInBackground() {
	c.bgMu.Lock()
	defer c.bgMu.Unlock()
	if c.closed.Load() {
		return
	}
	c.bg.Go(c.sendTouches)
}

// sendTouches sends the gathered keys in one Touch.
func (c *Client) sendTouches() {
	keys := c.touch.take()
	if len(keys) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), touchTimeout)
	defer cancel()
	if err := c.touch.master.Touch(ctx, keys); err != nil {
		c.touch.failed.Add(1)
		c.log.Debug("touch of cached gets failed", "keys", len(keys), "err", err)
		return
	}
	c.touch.sent.Add(int64(len(keys)))
}
