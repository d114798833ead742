// Package backend is the I/O seam of the SSD tier: it creates, writes, makes
// durable, reads and deletes bucket files. The Backend interface (backend.go)
// is the contract; the implementations live in sub-packages:
//
//   - pwrite: pwritev + fdatasync, optionally O_DIRECT (real disks);
//   - uring: io_uring with O_DIRECT and a queue depth;
//   - mem: in memory, with crash simulation (tests of the layers above);
//   - faulty: a wrapper that injects failures into another backend;
//   - backendtest: the conformance suite every implementation runs.
//
// # Files
//
// A backend owns one directory. Bucket file id is named FileName(id), sixteen
// lower-case hex digits and ".bucket" ("00000000000000ff.bucket"), so that
// the lexical order of names is the numeric order of ids. Keys never become
// file names. Any other entry in the directory (temporary files, upper-case
// names, sub-directories) is not a bucket file: List and Allocated ignore it
// and no backend removes it.
//
// Every bucket file is a multiple of Alignment (4096) bytes long; WriteBucket
// refuses other lengths with ErrUnaligned before creating anything, so O_DIRECT
// reads of whole blocks are always inside the file.
//
// A backend that stages writes in memory of its own (uring with O_DIRECT)
// also implements CheckedWriter: it checks the CRC32C of chosen pieces on
// the staged copy, so its caller can hand it memory that may change while
// it writes, without copying it first.
//
// # Durability
//
// Bucket files are write-once. WriteBucket has exactly one durable point, at
// its end: the file data (fdatasync) and its directory entry (fsync of the
// directory) are durable before it returns nil. Before that point a crash may
// leave nothing, a truncated file, or a file of the full length with
// arbitrary contents; the layer above treats any file it has not committed to
// its index as an orphan and deletes it at open. When WriteBucket fails it
// removes the partial file (best effort) and reports ErrNoSpace for ENOSPC or
// EDQUOT. Delete is durable when it returns (unlink + fsync of the
// directory). Nothing else needs a sync: reads have no durable effect.
//
// # Reads
//
// Read takes byte ranges of any bucket files (each ReadOp names its file);
// offsets and lengths need no alignment (an O_DIRECT backend reads the
// enclosing aligned blocks). A range goes to the caller's Buf when given —
// straight from the device when Buf is block aligned and covers the whole
// blocks (AlignedBuffer, DirectLen), through an aligned staging buffer and a
// copy otherwise — or to new memory the caller owns. Nothing is written past
// len(Buf), nothing at all after Read returns. A range past the end of the
// file fails alone with ErrShortRead, a negative one with ErrBadRange, one
// whose Buf is too short with ErrBufferTooSmall, one of a missing file with
// ErrNotFound; the call as a whole fails only when the backend is closed or
// ctx ends (then the ranges not read fail with ctx's error, and Read still
// returns only after the ranges in flight completed). AsyncReader
// (ReadAsync, or StartRead for any backend) starts the same work and calls
// back, so that one goroutine can keep many reads in flight.
//
// # Errors
//
// The sentinels are declared together in backend.go. Implementations wrap
// them with their package prefix, the operation and the bucket id
// ("pwrite: read bucket 00000000000000ff: backend: bucket file not found"),
// and keep the underlying errno in the chain where there is one. Check them
// with errors.Is.
//
// # Concurrency
//
// Every Backend is safe for concurrent use. Operations on different bucket
// ids never wait for each other for longer than an I/O. The caller guarantees
// that a bucket id is written once at a time and is not deleted or read while
// it is being written; reads and deletes of one id may race (a read that
// loses the race gets ErrNotFound or the full bytes, never partial ones, on
// POSIX file systems because an open file survives its unlink). Close may wait
// for operations in flight (pwrite does); operations after Close fail with
// ErrClosed.
package backend
