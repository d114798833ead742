package testkit

import (
	"errors"
	"testing"
	"time"
)

// Bound is how long Eventually waits.
const Bound = 20 * time.Second

// maxInterval is the longest pause between two polls of Within.
const maxInterval = 50 * time.Millisecond

// Eventually polls cond until it holds, failing the test (t.Fatalf naming
// what) if it does not within Bound. It is for work of another goroutine or
// process that the test cannot join; it is no substitute for
// synchronisation the test can have.
func Eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	Within(t, Bound, what, func() error {
		if cond() {
			return nil
		}
		return errNotYet
	})
}

var errNotYet = errors.New("condition false")

// Within polls cond until it returns nil, failing the test if it does not
// within d, naming what and cond's last error. The pause between polls
// starts at a millisecond and doubles up to 50 ms, so an in-process
// condition is seen at once and a process is not polled in a busy loop.
// The same caveat as Eventually's applies.
func Within(t testing.TB, d time.Duration, what string, cond func() error) {
	t.Helper()
	pause := time.Millisecond
	for end := time.Now().Add(d); ; {
		last := cond()
		if last == nil {
			return
		}
		if time.Now().After(end) {
			t.Fatalf("not within %v: %s: %v", d, what, last)
			return
		}
		time.Sleep(pause) // polling interval, not synchronisation
		pause = min(2*pause, maxInterval)
	}
}
