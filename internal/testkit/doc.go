// Package testkit holds the helpers tests of several packages share, so
// that each exists once: Eventually and Within, the one polling helper
// (a condition, or an error, awaited within a bound) for work a test
// cannot join; Golden, the comparison of a test's output with a
// checked-in golden file (-update rewrites it); and FreePort and FreeAddr,
// a loopback port nothing listens on. Only test code imports it.
//
// Invariant: every wait is bounded; a condition that never holds fails the
// test with what was awaited, never hangs it.
//
// Concurrency: Eventually and Within run cond on the caller's goroutine.
package testkit
