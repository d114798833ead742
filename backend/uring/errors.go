package uring

import "errors"

// Errors of package uring (the backend). Directory errors of Open are those
// of package pwrite (pwrite.ErrRelativeDir, ErrNotDirectory, ErrNotWritable),
// because Open validates the directory the same way; everything else uses the
// backend.Err* sentinels.
var (
	// ErrBadOptions: an Options field is out of range; the message names it.
	ErrBadOptions = errors.New("uring: invalid options")
	// errDirectUnsupported marks EINVAL from an O_DIRECT open or first
	// write; the backend then switches to buffered I/O for good.
	errDirectUnsupported = errors.New("uring: O_DIRECT not supported")
)
