// Package faulty wraps a backend.Backend and injects failures, for tests of
// the layers above (tier: commit before publish, orphan removal, ENOSPC
// handling, integrity).
//
// Rules (each may be installed at any time, from any goroutine; Clear removes
// them all). "The n-th call" counts the calls of that operation made after the
// rule was installed, starting at 1.
//
//   - FailNth(op, n, err): the n-th call of op fails with err and does not
//     reach the inner backend (a failed OpWrite writes nothing, a failed
//     OpDelete deletes nothing). For OpSync see SyncFail. The error is
//     wrapped with backend.ErrInjected unless err already is a backend
//     sentinel (errors.Is ErrNoSpace, ErrNotFound, ...), which is then
//     returned as the backend would; a nil err means ErrInjected alone.
//   - FailAll(op, err): like FailNth for every call of op until Clear.
//   - NoSpace(): every WriteBucket fails with backend.ErrNoSpace and writes
//     nothing, as on a full device (FailAll(OpWrite, ErrNoSpace)).
//   - ShortWrite(n): the n-th WriteBucket writes only the first half of its
//     bytes and fails with ErrInjected. The torn file is left behind, as if
//     the backend's own cleanup had failed too: when the inner backend has a
//     WriteVolatile method (package mem) the half file is volatile (Crash
//     drops it); otherwise the first half rounded down to backend.Alignment
//     is written with WriteBucket (nothing when that is zero).
//   - SyncFail(n): the n-th WriteBucket that the inner backend completes fails
//     at its durability point: the data was written, then the file is deleted
//     and the call fails with ErrInjected (FailNth(OpSync, n, nil)).
//   - Corrupt(id, off): every Read of bucket id returns data whose byte at
//     file offset off is inverted, in every op that covers it (a bit rot the
//     device does not report).
//
// Hooks: BeforeWrite(fn) runs before a WriteBucket reaches the inner backend,
// OnWrite(fn) after the inner backend made the bucket durable and before
// WriteBucket returns. Both receive the bucket id and run without the
// wrapper's lock, so they may call mem.Backend.Crash or CrashClone to crash
// at exactly that point.
//
// Calls(op) counts every call of op since Wrap, failed or not; OpSync counts
// the WriteBucket calls that reached their durability point.
//
// Concurrency: the wrapper is safe for concurrent use when the inner backend
// is. One mutex guards the rules, hooks and counters; it is never held while
// the inner backend or a hook runs.
package faulty
