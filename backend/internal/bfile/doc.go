// Package bfile is what the file backends (backend/pwrite, backend/uring)
// share apart from their I/O loops: a Dir is the directory of bucket files,
// its lock and the O_DIRECT flag with its buffered fallback. Dir.WriteBucket
// creates FileName(id) with O_CREAT|O_EXCL (|O_DIRECT), runs the backend's
// write function, closes the file and fsyncs the directory; Dir.StartRead
// opens the files of a Read (through a descriptor cache of up to
// Config.OpenFiles files, least recently used evicted) and checks its ops,
// and ReadSet.Finish ends it; Delete, List and Allocated are whole. Messages
// start with Config.Pkg ("pwrite: ...").
//
// # Invariants
//
//   - An existing bucket file is never opened for writing (O_EXCL; EEXIST is
//     backend.ErrExists and the file is left alone).
//   - A write that fails after the file was created leaves no file: it is
//     unlinked and the directory fsynced (best effort), including the file
//     ramfs creates before it refuses O_DIRECT.
//   - WriteBucket returns nil only after fdatasync (by the write function),
//     close and fsync of the directory.
//   - The direct flag only goes from true to false, logged once per Dir; a
//     write refused for O_DIRECT (EINVAL at open, or an error wrapping
//     Config.ErrDirect) is retried once, buffered.
//   - ENOSPC and EDQUOT are backend.ErrNoSpace (NoSpace), errno kept.
//   - A cached descriptor never outlives its file's name: Delete unlinks,
//     then drops the cache entry, and a file found unlinked (link count 0)
//     is not cached; WriteBucket drops any entry of its id first. A
//     descriptor in use when dropped is closed by its last user.
//
// # Concurrency
//
// Safe for concurrent use. Dir.mu (a RWMutex) guards closed and the
// directory descriptor: every operation holds it for reading throughout,
// Close for writing, so Close waits for operations in flight and later
// calls fail with backend.ErrClosed (a ReadSet holds it from StartRead to
// Finish, possibly across goroutines). The direct flag is atomic. The
// descriptor cache has its own mutex (fdCache.mu), guarding the map, the
// LRU list and every Handle's reference count.
package bfile
