package testkit

import (
	"testing"
	"time"
)

// Bound is how long Eventually waits.
const Bound = 10 * time.Second

// Eventually polls cond every millisecond until it holds, failing the test
// (t.Fatalf naming what) if it does not within Bound. It is for work of
// another goroutine or process that the test cannot join; it is no
// substitute for synchronisation the test can have.
func Eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	for end := time.Now().Add(Bound); !cond(); {
		if time.Now().After(end) {
			t.Fatalf("not within %v: %s", Bound, what)
		}
		time.Sleep(time.Millisecond) // polling interval, not synchronisation
	}
}
