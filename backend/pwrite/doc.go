// Package pwrite is the portable backend.Backend for real disks: one regular
// file per bucket in one directory, written with pwritev (or pwrite with
// O_DIRECT) and made durable with fdatasync + an fsync of the directory.
//
// # Open
//
// Open(dir, Options) requires an absolute dir (ErrRelativeDir), creates it
// with mode 0755 when missing (and fsyncs its parent), refuses a path that is
// not a directory (ErrNotDirectory) and probes that a file can be created and
// removed in it (ErrNotWritable, with the errno, e.g. EROFS). Every error
// names the path. With Options.Direct the probe also writes one aligned block
// with O_DIRECT; when the file system answers EINVAL (ramfs, some FUSE and
// older tmpfs) the backend uses buffered I/O instead and logs why, once. The
// same fallback happens if O_DIRECT is refused later, at a WriteBucket or a
// Read. Name() is "pwrite+direct" while O_DIRECT is in use, else "pwrite".
//
// # WriteBucket
//
//  1. open FileName(id) with O_CREAT|O_EXCL|O_WRONLY (|O_DIRECT): an existing
//     file is ErrExists and is left alone;
//  2. fallocate the whole length, so that a full device fails before any byte
//     is written;
//  3. buffered: pwritev of the caller's iovecs, at most 1024 iovecs and about
//     8 MiB per call, looping on short writes, with sync_file_range starting
//     write-back every 8 MiB; O_DIRECT: the iovecs are copied into 1 MiB
//     page-aligned buffers from a sync.Pool and written by 4 goroutines, so 4
//     writes are in flight;
//  4. fdatasync, close, fsync of the directory: the one durable point.
//
// Any failure after step 1 unlinks the file and fsyncs the directory (best
// effort); ENOSPC and EDQUOT are reported as backend.ErrNoSpace (the errno
// stays in the chain). The context is checked between chunks.
//
// # Read
//
// Each Read opens the files of its ops (O_RDONLY, |O_DIRECT; through bfile's
// descriptor cache, so a cached file costs no open, fstat or close) and
// serves its ops, by up to 4 goroutines when there are several. With
// O_DIRECT an op whose Buf is aligned and covers the whole blocks is read
// straight into it; otherwise the op reads the aligned blocks that hold it
// into a page-aligned buffer: without Buf, when the alignment slack is small
// (at most an eighth of the length) the caller gets a sub-slice of that
// buffer, otherwise (and always with a Buf) the bytes are copied out of a
// pooled staging buffer. An O_DIRECT op of 512 KiB or more is cut into 256 KiB pieces
// read by up to 4 goroutines, so that one large op keeps several requests in
// flight (measured in docs/bench/backend.md). Because an open
// file survives its unlink, a Read that has opened the file is not disturbed
// by a concurrent Delete.
//
// # Concurrency
//
// Safe for concurrent use. The lock of the bfile.Dir (a RWMutex; package
// backend/internal/bfile holds the steps around the I/O, shared with package
// uring) guards closed and the directory descriptor: every operation holds
// the read lock while it runs, Close takes the write lock, so Close waits for
// operations in flight and later calls fail with backend.ErrClosed.
// Operations on different ids share no other state. direct is an atomic flag
// that only goes from true to false.
package pwrite
