// Package index is the local object index of a tierstore SSD tier: a pebble
// database that maps each object key to its location in a bucket file, each
// bucket to the keys it holds, and keeps the next bucket id.
//
// # Records
//
// Seven record kinds share the pebble key space, told apart by a one-byte
// prefix (the layout is documented in docs/format/index.md):
//
//	'k' key              -> object location (bucket, offset, lengths, codec, CRC32C)
//	'b' be64(bucket) key -> membership: key lives in bucket
//	'm' be64(bucket)     -> bucket record (size, objects written, creation time,
//	                        live objects and bytes, trailer offset/length/CRC32C,
//	                        written bytes)
//	'n'                  -> next bucket id
//	'f'                  -> format version of the tier directory (FormatVersion)
//	'e' be64(bucket)     -> the bucket is being evicted (MarkEvicting); it goes
//	                        with the bucket's removal or UnmarkEvicting
//	's'                  -> session: buckets below a mark are proven (Session);
//	                        the tier's Open and clean Close write it
//
// Object keys are opaque bytes of 1 to keyspec.MaxLen bytes. Because the object
// key only ever follows the prefix (or a fixed-width bucket id), no choice of
// key bytes can make two records collide. Every value starts with a version
// byte; a value that does not decode is reported as a *CorruptError, which
// matches ErrCorrupt and names the key or bucket. Open refuses an index of
// another format version (ErrFormatVersion) before reading anything else.
//
// # Invariants
//
//  1. One bucket, one batch. Commit writes every object record, every
//     membership record, the bucket record and the next bucket id in one
//     pebble batch committed with a WAL sync, together with what the commit
//     changes elsewhere: the membership records and live counts of the
//     buckets its keys leave (stale versions, re-inserted objects), the
//     records of buckets it empties, and the buckets it drops (an eviction
//     that re-inserts its kept objects). After it returns nil all of it
//     survives a crash; after a crash before that, none of it is visible.
//     DeleteBucket, RemoveKeys and RemoveIfAt are single synced
//     batches too.
//  2. Membership follows the object record. A key has exactly one object
//     record and one membership record, in the bucket its location names.
//     Re-committing a key into a newer bucket moves its membership record, and
//     DeleteBucket removes only object records that still point at the
//     deleted bucket, so a key re-committed elsewhere survives the eviction of
//     its old bucket.
//  3. NextBucketID is greater than every committed bucket id, across reopens.
//  4. Per-bucket accounting: a bucket record's live count and live bytes
//     equal its members' count and summed stored lengths, kept in step by
//     every batch that adds, moves or removes a member; a bucket whose last
//     member goes loses its record in that batch (reported as Emptied).
//     Count equals the number of object records: Open computes it as the sum
//     of the live counts, one record per bucket, not per object, and every
//     write keeps it in step.
//  5. A failed write (pebble cannot write or sync its WAL) is never silent:
//     the call returns ErrFailed and every later call does too, because pebble
//     cannot continue and its memory may hold the failed batch. The owner
//     closes and reopens the index; after the reopen the batch is wholly
//     present or wholly absent.
//
// # Concurrency
//
// An Index is safe for concurrent use. Reads run in parallel and never wait
// for a write (mu is a read-write lock that writes take for reading too).
// Writes (Commit, DeleteBucket, RemoveKeys, RemoveIfAt) are
// serialised by writeMu, held across their WAL sync, so that the
// read-modify-write of live counts, Count and NextBucketID stays exact; the
// tier engine additionally serialises its duplicate check and its commit
// under its own lock, which the index does not replace. Close waits for operations in progress; calls after
// Close return ErrClosed. Keys calls its callback without holding any lock,
// so the callback may use the index.
//
// # Lookups
//
// Every level of the LSM carries bloom filters. A plain Get skips the filters
// of the bottom level (pebble's default, because most keys found live there),
// so for keys that are mostly absent, such as the duplicate check of an
// offload, GetMany is several times cheaper than a Get per key: it sorts the
// keys and probes them through one iterator that consults every filter.
// Commit uses the same path to find the keys it overwrites.
//
// pebble charges its memtables against the block cache's capacity; Open
// enlarges the cache by that much so that Options.CacheSize bytes remain for
// blocks.
//
// # Caveats
//
// pebble reports a failed WAL write or sync through its logger's Fatalf. The
// index installs a logger whose Fatalf panics and recovers that panic in the
// committing goroutine, turning it into ErrFailed. A fatal error raised in one
// of pebble's background goroutines (a failed flush or MANIFEST sync) still
// ends the process, exactly as with pebble's default logger.
package index
