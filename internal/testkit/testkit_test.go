package testkit

import (
	"sync/atomic"
	"testing"
)

// recorder is a testing.TB whose Fatalf is recorded, not fatal.
type recorder struct {
	testing.TB
	failed atomic.Bool
}

func (r *recorder) Helper()               {}
func (r *recorder) Fatalf(string, ...any) { r.failed.Store(true) }

func TestEventually(t *testing.T) {
	n := 0
	Eventually(t, "three calls", func() bool { n++; return n == 3 })
	if n != 3 {
		t.Fatalf("cond called %d times, want 3", n)
	}
}

// A condition that never holds fails the test (after Bound), naming it.
func TestEventuallyFails(t *testing.T) {
	if testing.Short() {
		t.Skip("waits the whole bound")
	}
	r := &recorder{TB: t}
	Eventually(r, "never", func() bool { return r.failed.Load() })
	if !r.failed.Load() {
		t.Fatal("Eventually returned without the condition or a failure")
	}
}
