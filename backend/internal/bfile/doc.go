// Package bfile is the part of the file backends (backend/pwrite and
// backend/uring) that does not depend on how bytes reach the disk: the
// directory of bucket files, the O_DIRECT flag with its one-way buffered
// fallback, and the steps around each backend's own I/O loop.
//
// A Dir owns an open descriptor of the directory (for fsync) and a
// read/write lock. Dir.WriteBucket checks the call (closed, ctx, alignment),
// creates FileName(id) with O_CREAT|O_EXCL (|O_DIRECT), hands the descriptor
// to the backend's write function, then closes the file and fsyncs the
// directory. Dir.Read opens the file (|O_DIRECT), fstats it and hands the
// descriptor and size to the backend's read function. Error messages start
// with the backend's package name (Config.Pkg), as if the backend had
// written them.
//
// # Invariants
//
//   - An existing bucket file is never opened for writing: O_EXCL, EEXIST is
//     backend.ErrExists and the file is left alone.
//   - A write that fails after the file was created leaves no file: it is
//     unlinked and the directory fsynced (best effort). This includes the
//     file some file systems (ramfs) create before refusing O_DIRECT.
//   - A bucket is durable only when WriteBucket returns nil: the write
//     function fdatasyncs, then the file is closed and the directory fsynced.
//   - The direct flag only goes from true to false. The switch is logged once
//     per Dir. A write refused for O_DIRECT (an error wrapping
//     Config.ErrDirect, or EINVAL at open) is retried once, buffered.
//   - ENOSPC and EDQUOT are reported as backend.ErrNoSpace (NoSpace), the
//     errno staying in the chain.
//
// # Concurrency
//
// All methods are safe for concurrent use. Dir.mu (a RWMutex) guards closed
// and the validity of the directory descriptor: WriteBucket, Read and every
// Acquire hold it for reading for the whole operation, Close takes it for
// writing, so Close waits for operations in flight and later calls fail with
// backend.ErrClosed. The direct flag is atomic.
package bfile
