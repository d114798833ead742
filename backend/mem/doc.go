// Package mem is an in-memory backend.Backend for tests of the layers above
// (bucket, tier) and for crash simulation.
//
// Bucket files live in a map. Each file is either durable or volatile:
//
//   - WriteBucket copies the data into a new volatile file and makes it durable
//     at its very end (its one durable point, like fdatasync + directory
//     fsync of a real backend). A hook set with SetWriteHook runs between the
//     two, so a test can crash "during" a write.
//   - WriteVolatile creates a file that stays volatile (package faulty uses it
//     to leave a torn, non-durable file behind a short write).
//   - Delete is durable when it returns.
//
// Crash discards every volatile file in place, as a power cut would; a
// WriteBucket that is in progress when Crash is called leaves nothing and
// returns ErrCrashed. CrashClone returns a new, independent Backend holding
// only the durable files, so a test can "crash" at any point and reopen the
// engine on the clone while the original keeps running or is abandoned. The
// clone shares the (immutable) file bytes; nothing is copied.
//
// Allocated is the sum of the file sizes rounded up to backend.Alignment.
//
// Invariants:
//   - a file's bytes never change once it is inserted (files are write-once),
//     so readers copy them out without holding the lock;
//   - a file is durable only if the WriteBucket that created it returned nil
//     (or is about to), and only durable files survive Crash and CrashClone.
//
// Concurrency: every method is safe for concurrent use. One mutex guards the
// file map and the state flags; no I/O or callback runs under it.
package mem
