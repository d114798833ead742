// Package uring is the io_uring implementation of backend.Backend, built on
// tierstore's own ring (internal/uring). It is the default backend where the
// kernel allows io_uring.
//
// # Writes
//
// WriteBucket creates the bucket file with O_CREAT|O_EXCL|O_DIRECT,
// fallocates its full length (ext4 serialises O_DIRECT writes that extend a
// file, which cost 2-3x; ENOSPC also shows up before any data moves), copies
// the caller's slices into page-aligned staging slots of ChunkSize (1 MiB by
// default) and keeps WriteDepth (8) chunk writes in flight, each submitted as
// soon as its slot is filled so that copying overlaps the device. The slots
// are one anonymous mapping per ring, registered as a fixed buffer when the
// kernel accepts it (WRITE_FIXED / READ_FIXED then skip the per-I/O page
// pinning). After the last write completes, one FSYNC with DATASYNC goes
// through the ring, then the directory is fsynced: exactly one durable
// point, at the end. Short writes are resubmitted for the rest. On any error
// the partial file is removed.
//
// WriteBucketChecked (backend.CheckedWriter) is the same write for slices
// whose memory may change meanwhile (the node's DRAM segment): the CRC32C of
// each checked piece is computed from its copy in the slots, 64 KiB at a
// time as it is copied, and a piece whose CRC differs from the caller's
// stops the write (backend.ErrSourceChanged, file removed) before its last
// slot is submitted; only bytes whose CRC matched are ever written. Without
// O_DIRECT (the fallback below) it refuses with backend.ErrUnchecked.
//
// Reads go first: while any read waits on the read ring (reactor.pending
// above zero), a bucket write keeps at most WriteDepthUnderReads (2) chunk
// writes in flight instead of WriteDepth, so a read queues behind two 1 MiB
// writes on the device, not eight; the write returns to full depth as soon
// as no read is pending. Why, with the measured figures: docs/benchmarks.md,
// "Reads ahead of writes".
//
// # Reads
//
// Every Read and ReadAsync goes through one shared read ring owned by a
// reactor goroutine (locked to its thread): the caller opens the files
// (through bfile's descriptor cache: no open, fstat or close per read once a
// file is cached), cuts each op into pieces of at most ChunkSize and hands
// them over; the reactor submits pieces of every request in turn, round
// robin, up to ReadDepth (128) in flight, and reaps completions. So the reads
// of one call, across files, are one submission, and 32 callers reading one
// object each keep 32 reads in flight, as fio does at iodepth 32. Callers
// wake the reactor out of io_uring_enter through an eventfd whose READ is
// always armed on the ring. With O_DIRECT a piece lands in the caller's
// aligned Buf (bfile.DirectInto), or in an aligned heap buffer that Data is
// cut from (no Buf) or that is copied into Buf; buffered reads land in Data
// directly. A context that ends stops the pieces not yet submitted (they
// fail with its error); the pieces in flight are waited for, so no buffer is
// written after Read returns. Ranges past the end of the file fail alone
// (ErrShortRead), negative ones with ErrBadRange. Should the read ring fail
// (completions lost: ErrCQOverflow on a kernel without NODROP), the reads in
// progress fail with its error and so do later ones, until the backend is
// opened again.
//
// # Fallbacks
//
//   - io_uring unusable (io_uring_setup fails with ENOSYS, EPERM, ENOMEM;
//     the kernel.io_uring_disabled sysctl; missing opcodes): Open returns a
//     pwrite backend instead and logs why, once per process.
//   - O_DIRECT refused (EINVAL at open or at the first write, e.g. tmpfs
//     before Linux 6.6 or FUSE): the backend switches to buffered I/O for
//     good, logs why once, and Name reports "uring" instead of
//     "uring+direct". Buffered writes go out as WRITEV straight from the
//     caller's slices (no copy), buffered reads land directly in Data.
//
// Directory rules (absolute path, created when missing, writable) are those
// of package pwrite, whose Open validates the directory. The steps around
// the ring (create, close, fsync of the directory, open for reading) and
// Delete, List and Allocated are package backend/internal/bfile's, shared
// with pwrite.
//
// # Concurrency
//
// Every method is safe for concurrent use. Each WriteBucket call takes a
// worker (one ring plus its write slots) from a pool for its whole duration
// and holds runtime.LockOSThread meanwhile; a worker is returned only with
// nothing in flight, so rings share no lock and are never used by two
// goroutines at once. A call that finds no idle worker creates one; only
// past MaxRings (64) concurrent writes does a write wait for a ring. Reads
// never use a write ring: the read ring belongs to the reactor goroutine
// alone, and callers reach it through a mutex-guarded queue (reactor.mu). The lock of the backend's
// bfile.Dir (a RWMutex) is held for reading by every operation and for
// writing by Close, which therefore waits for operations in flight before
// closing the rings.
package uring
