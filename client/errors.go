package client

import "errors"

// Errors of package client that are not tierstore error codes. Errors that
// are codes (OBJECT_NOT_FOUND, REPLICA_IS_GONE, ...) are the sentinels of
// internal/codes and are checked with errors.Is against those.
var (
	// ErrBadSize: a size string (flag value) does not parse.
	ErrBadSize = errors.New("client: invalid size")
	// ErrBadConfig: a Config or NodeConfig field is invalid; the message
	// names the field or flag.
	ErrBadConfig = errors.New("client: invalid configuration")
	// ErrOutOfRange: a segment read or write outside the segment.
	ErrOutOfRange = errors.New("client: range outside the segment")
	// ErrClosed: the client, node or segment was closed.
	ErrClosed = errors.New("client: closed")
	// ErrNoReplica: no replica of the object could be read (every replica
	// failed); wraps the last failure.
	ErrNoReplica = errors.New("client: no readable replica")
	// ErrBadNodeID: the NODE_ID file in --ssd_dir holds no valid id.
	ErrBadNodeID = errors.New("client: invalid node id file")
)
