// Package testkit holds the helpers tests of several packages share, so
// that each exists once: Eventually, the one polling helper for work a test
// cannot join, and Golden, the comparison of a test's output with a
// checked-in golden file (-update rewrites it). Only test code imports it.
//
// Invariant: every wait is bounded; a condition that never holds fails the
// test with what was awaited, never hangs it.
//
// Concurrency: Eventually runs cond on the caller's goroutine.
package testkit
