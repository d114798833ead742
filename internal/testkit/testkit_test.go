package testkit

import (
	"errors"
	"sync/atomic"
	"testing"
	"time"
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

// Golden passes on equal output, fails on a difference or a missing file,
// and with update writes the file that then passes.
func TestGolden(t *testing.T) {
	path := t.TempDir() + "/golden.txt"
	r := &recorder{TB: t}
	Golden(r, path, "a\nb\n", false)
	if !r.failed.Load() {
		t.Fatal("a missing golden file passed")
	}
	Golden(t, path, "a\nb\n", true)
	Golden(t, path, "a\nb\n", false)
	r = &recorder{TB: t}
	Golden(r, path, "a\nc\n", false)
	if !r.failed.Load() {
		t.Fatal("a different line passed")
	}
	r = &recorder{TB: t}
	Golden(r, path, "a\nb\nc\n", false)
	if !r.failed.Load() {
		t.Fatal("an extra line passed")
	}
}

// Within returns once cond answers nil and fails naming cond's last error
// when it never does.
func TestWithin(t *testing.T) {
	n := 0
	Within(t, time.Second, "three calls", func() error {
		if n++; n < 3 {
			return errors.New("not yet")
		}
		return nil
	})
	if n != 3 {
		t.Fatalf("cond called %d times, want 3", n)
	}
	r := &recorder{TB: t}
	Within(r, 20*time.Millisecond, "never", func() error { return errors.New("still no") })
	if !r.failed.Load() {
		t.Fatal("Within returned without the condition or a failure")
	}
}
