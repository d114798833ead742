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
//	group -> per bucket, pipelined:
//	  write-and-reserve: encode -> reserve (evict if needed) -> write + fdatasync
//	  commit: under commitMu, duplicate check + one synced index batch
//	          (stale versions replaced in the same batch)
//	  notify-and-settle: notify(exactly the committed keys) ->
//	          evictable, or on notify failure index rollback and the file
//	          deleted once its in-flight reads finish.
//
// # Reads
//
// Load, LoadInto and LoadAsync look keys up in the index without any engine
// lock, pin their buckets under the engine lock (memory only), and hand all
// the reads of the call, across buckets, to the backend at once (one
// io_uring submission with the uring backend). LoadInto reads into the
// caller's buffers (straight from the device with NewBuffer buffers);
// LoadAsync returns at once and calls back, so one goroutine keeps many reads
// in flight. Load is LoadInto into new memory. OpenReader pins one object's
// bucket and reads its value in ranges (Reader.ReadAt, asynchronous, several
// in flight) for a caller that streams it; a Reader does not check the
// CRC32C: its caller does, and reports a mismatch with Reader.Corrupt,
// which drops the entry as Load would.
//
// # Invariants (docs/design.md)
//
//  1. Commit before publish: notify is called only after the bucket bytes are
//     durable and the index entries committed, so a Load right after a
//     successful notify never misses (Mooncake #2799). If notify fails, the
//     keys are rolled back and the file removed; a file that cannot be
//     removed is an orphan that the next Open deletes.
//  2. Idempotent re-offload: a key already on SSD is AlreadyPresent, never a
//     failure, and never fails the other keys of its bucket (Mooncake
//     #2827). The duplicate check runs under commitMu, the lock that
//     serialises every index commit (no TOCTOU window; of two concurrent
//     offloads of one key exactly one commits). A key whose commit is
//     waiting for its notify (pending) is not answered "already present" by
//     a concurrent call: that call waits for the outcome, because a failed
//     notify rolls the key back. There is no check before the write: a
//     bucket whose keys all turn out present was written for nothing and is
//     deleted (Stats.DiscardedBuckets).
//  3. Same-call tail flush: Offload writes all of its buckets, including the
//     partial last one, before it returns, and answers every task exactly
//     once (Mooncake #4740).
//  4. Leases: the owner answers OnEvict with the keys it must keep (leased,
//     Mooncake #4508); they are re-inserted into a new bucket before the
//     victim goes, so a lease never stops the tier from admitting new
//     objects. Re-insertion is bounded (Options.OnEvict) and counted
//     (Stats.ReinsertedObjects, ReinsertedBytes).
//  5. Integrity: every Load verifies the CRC32C of each object; a mismatch is
//     ErrChecksum for that key only, the entry is dropped and the owner told.
//     A Task may carry its value's CRC32C (CRCKnown): the bucket records it
//     without a pass of its own. An Unstable task's value (memory another
//     writer may reuse) is written only as bytes whose CRC32C matched the
//     task's, checked on the backend's staged copy (backend.CheckedWriter)
//     or on a copy the engine makes first; a changed value fails with
//     ErrSourceChanged and nothing of it is written.
//     A Reader hands the check to its caller (Reader.CRC is what the bytes
//     must hash to); Reader.Corrupt drops the entry the same way, once.
//  6. Recovery: Open removes bucket files the index does not know and drops
//     index entries whose file is missing or whose footer/trailer fails
//     validation or disagrees with the bucket's index record. Its work is per
//     bucket, not per object: the bucket record holds the live count and the
//     trailer's CRC32C, and one read of each bucket's trailer and footer
//     checks the file. Only the buckets the index's session record does not
//     cover are read (tier format 3): none after a clean Close, after a
//     crash those the crashed session wrote; the others are checked against
//     the directory listing (present, recorded size).
//  7. Capacity: bucket file bytes never exceed Options.Capacity; crossing the
//     high watermark evicts whole buckets (lru by last read, fifo, lru2,
//     worth) down to the low watermark, or with Options.EvictToFit only
//     until the write fits under the high one; OnEvict hears of the keys
//     before the bytes go; a bucket being read is never deleted under its
//     reader. A victim is
//     marked evicting (synced) before OnEvict is asked, and the mark goes
//     with the bucket or with a refusal: Open completes a marked eviction,
//     so a crash after the owner answered never brings its keys back. A re-insertion
//     bucket is written only if it fits beside what is on disk.
//  8. Space: an object removed, superseded or moved leaves Stats.LiveBytes
//     (and joins DeadBytes) when the synced batch that does it has
//     committed; a bucket with no live object left is deleted; a bucket at
//     least half dead is evicted before any bucket of live data, most dead
//     first, then the policy's order (evicted, not compacted).
//
// Keys are opaque bytes of 1 to keyspec.MaxLen bytes and never become file names.
//
// # Files
//
//	engine.go   the Engine and bucket state, shared helpers
//	open.go     Open: options, reconciliation of index and files (recovery)
//	offload.go  Offload: per bucket write-and-reserve, commit, notify-and-settle
//	load.go     Load, LoadInto, LoadAsync: lookup, pinning, one read, verification
//	reader.go   OpenReader: ranged reads of one pinned object, for streaming
//	space.go    reservation, eviction (with kept keys), bucket death and file deletion
//	reinsert.go re-insertion of the objects eviction keeps
//	admin.go    Exists, Stat, Remove, Keys, Stats, Close
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
// An Engine is safe for concurrent use. Two locks, never held across a
// callback (notify, OnEvict) or I/O on bucket files:
//
//   - commitMu serialises the index writes that follow a check of the index:
//     an offloaded bucket's duplicate check and commit, a re-insertion's
//     check and move, Remove. It is held across those synced pebble commits.
//     No read path takes it.
//   - Engine.mu guards the in-memory bucket table, the eviction policy, the
//     space accounting and the pending-notify table. It is held only for
//     memory operations, never across a pebble write or a WAL sync, so a
//     Load never waits for one. Lock order: commitMu before mu.
//
// Rollback, eviction and the drop of a corrupt object write the index with
// neither lock (those batches check their own preconditions: DeleteBucket
// removes only keys still in the bucket, RemoveIfAt only keys still where
// they were read). Reads take a reader reference on a bucket under mu and drop
// it after the read without it; a dead bucket's file is deleted by whoever
// drops the last reference. A bucket is registered in the table before its
// index commit, so a Load that finds an entry finds its bucket.
package tier
