package ha

import (
	"sync"
	"testing"
	"time"
)

// fakeClock is a test clock moved by hand.
type fakeClock struct {
	mu sync.Mutex // protects t
	t  time.Duration
}

func (c *fakeClock) now() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) set(t time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = t
}

// TestFenceCountsFromSendTime: validity runs from when the confirmed
// keepalive was SENT, minus the margin; never from when its answer arrived.
func TestFenceCountsFromSendTime(t *testing.T) {
	clk := &fakeClock{}
	f := fence{now: clk.now, margin: 500 * time.Millisecond}
	if f.valid() {
		t.Fatal("valid before any confirmation")
	}
	f = fence{now: clk.now, margin: 500 * time.Millisecond}
	// Sent at 10s, answered at 11.9s (a slow round trip), TTL 3s: etcd
	// renewed the lease no earlier than 10s, so it may expire at 13s; the
	// fence must be down from 12.5s on.
	clk.set(11900 * time.Millisecond)
	f.confirm(10*time.Second, 3*time.Second)
	clk.set(12499 * time.Millisecond)
	if !f.valid() {
		t.Fatal("not valid 1ms before sent+TTL-margin")
	}
	if got := f.remaining(); got != time.Millisecond {
		t.Fatalf("remaining = %v, want 1ms", got)
	}
	clk.set(12500 * time.Millisecond)
	if f.valid() {
		t.Fatal("valid at sent+TTL-margin: counted from the answer, not the request")
	}
	if f.remaining() != 0 {
		t.Fatal("remaining > 0 after the fence went down")
	}
}

// TestFenceIsSticky: a process resumed after a pause longer than its TTL
// (SIGSTOP) sees false on its first check, and a confirmation that arrives
// afterwards (a request sent before the pause) cannot raise the fence.
func TestFenceIsSticky(t *testing.T) {
	clk := &fakeClock{}
	f := fence{now: clk.now, margin: 500 * time.Millisecond}
	f.confirm(0, 3*time.Second)
	clk.set(time.Second)
	if !f.valid() {
		t.Fatal("not valid inside the TTL")
	}
	clk.set(10 * time.Second) // paused 9s: no goroutine ran meanwhile
	if f.valid() {
		t.Fatal("valid on the first check after a pause longer than the TTL")
	}
	f.confirm(9*time.Second, 3*time.Second) // would reach 11.5s
	if f.valid() {
		t.Fatal("a late confirmation raised a fence that was down")
	}
	// An older confirmation never lowers the bound either.
	g := fence{now: clk.now, margin: 0}
	g.confirm(20*time.Second, 3*time.Second)
	g.confirm(15*time.Second, 3*time.Second)
	clk.set(22 * time.Second)
	if !g.valid() {
		t.Fatal("an older confirmation lowered the fence")
	}
	g.drop()
	if g.valid() {
		t.Fatal("valid after drop")
	}
}
