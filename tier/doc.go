// Package tier is the node-local SSD tier engine of tierstore: the library a
// store node uses to move objects from DRAM to its local SSD and back.
//
// An Engine owns one directory: bucket files (through a backend.Backend,
// default pwrite in <dir>/buckets) and a pebble index (<dir>/index). Objects
// are grouped into large append-only bucket files (package bucket), written
// and made durable in one go, then committed to the index in one synced
// batch per bucket.
//
// # Offload order
//
//	group -> encode -> write + fdatasync -> under the engine lock: duplicate
//	check + index commit -> notify(exactly the committed keys) ->
//	on notify failure: index rollback, bucket file deleted once its
//	in-flight reads finish.
//
// # Invariants (docs/design.md)
//
//  1. Commit before publish: notify is called only after the bucket bytes are
//     durable and the index entries committed, so a Load right after a
//     successful notify never misses (Mooncake #2799). If notify fails, the
//     keys are rolled back and the file removed; a file that cannot be
//     removed is an orphan that the next Open deletes.
//  2. Idempotent re-offload: a key already on SSD is AlreadyPresent, never a
//     failure, and never fails the other keys of its bucket (Mooncake #2827).
//     The duplicate check runs under the same lock as the commit. A key whose
//     commit is waiting for its notify is not answered "already present" by
//     a concurrent call: that call waits for the outcome, because a failed
//     notify rolls the key back.
//  3. Same-call tail flush: Offload writes all of its buckets, including the
//     partial last one, before it returns, and answers every task exactly
//     once (Mooncake #4740).
//  5. Integrity: every Load verifies the CRC32C of each object; a mismatch is
//     ErrChecksum for that key only, the entry is dropped and the owner told.
//  6. Recovery: Open removes bucket files the index does not know and drops
//     index entries whose file is missing or whose footer/trailer fails
//     validation or disagrees with the index.
//  7. Capacity: bucket file bytes never exceed Options.Capacity; crossing the
//     high watermark evicts whole buckets (lru by last read, or fifo) down to
//     the low watermark; OnEvict hears of the keys before the bytes go; a
//     bucket being read is never deleted under its reader.
//
// # Files
//
//	engine.go   the Engine and bucket state, shared helpers
//	open.go     Open: options, reconciliation of index and files (recovery)
//	offload.go  Offload: per bucket write-and-reserve, commit, notify-and-settle
//	load.go     Load: lookup, pinned reads, checksum verification
//	space.go    reservation, eviction, bucket death and file deletion
//	admin.go    Exists, Stat, Remove, Keys, Stats, Close
//
// Keys are opaque bytes of 1 to MaxKeyLen bytes and never become file names.
//
// # Storage failures
//
// When the index cannot write or sync its WAL (a failing disk), the offload
// in progress fails retryably and its bucket file is removed, and every later
// call returns an error wrapping index.ErrFailed: the failed batch may sit in
// pebble's memory and must not be served. Close the engine and Open it again;
// Open finds exactly what was committed before the failure.
//
// # Concurrency
//
// An Engine is safe for concurrent use. Engine.mu guards the in-memory bucket
// table, the eviction policy, space accounting and the pending-notify table,
// and is held across the duplicate check and the index commit. No I/O on
// bucket files and no callback (notify, OnEvict) runs under it. Reads take a
// reader reference on a bucket under the lock and drop it after the read; a
// dead bucket's file is deleted by whoever drops the last reference.
package tier
