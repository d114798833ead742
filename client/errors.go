package client

import "errors"

// Errors of package client that are not tierstore error codes. Errors that
// are codes (OBJECT_NOT_FOUND, REPLICA_IS_GONE, ...) are the sentinels of
// internal/errcode and are checked with errors.Is against those.
var (
	// ErrBadConfig: a Config field is invalid; the message names the field.
	ErrBadConfig = errors.New("client: invalid configuration")
	// ErrClosed: the client was closed.
	ErrClosed = errors.New("client: closed")
	// ErrNoReplica: no replica of the object could be read (every replica
	// failed); wraps the last failure.
	ErrNoReplica = errors.New("client: no readable replica")
)
