package pwrite

import "errors"

// Errors returned by Open. The backend.Err* sentinels cover everything else.
var (
	// ErrRelativeDir: the directory given to Open is not an absolute path.
	ErrRelativeDir = errors.New("pwrite: directory must be an absolute path")
	// ErrNotDirectory: the path given to Open exists and is not a directory.
	ErrNotDirectory = errors.New("pwrite: not a directory")
	// ErrNotWritable: the directory cannot be created, or a file cannot be
	// created and removed in it.
	ErrNotWritable = errors.New("pwrite: directory not writable")
)

// errDirectUnsupported marks an EINVAL from an O_DIRECT open or write (tmpfs
// and some FUSE file systems); WriteBucket and Read then fall back to
// buffered I/O.
var errDirectUnsupported = errors.New("pwrite: O_DIRECT not supported")
