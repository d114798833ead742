package node

import "errors"

// Errors of package node that are not tierstore error codes. Errors that
// are codes (OBJECT_NOT_FOUND, REPLICA_IS_GONE, ...) are the sentinels of
// internal/codes and are checked with errors.Is against those.
var (
	// ErrBadConfig: a Config or Config field is invalid; the message
	// names the field or flag.
	ErrBadConfig = errors.New("node: invalid configuration")
	// ErrOutOfRange: a segment read or write outside the segment.
	ErrOutOfRange = errors.New("node: range outside the segment")
	// ErrClosed: the client, node or segment was closed.
	ErrClosed = errors.New("node: closed")
	// ErrBadNodeID: the NODE_ID file in --ssd_dir holds no valid id.
	ErrBadNodeID = errors.New("node: invalid node id file")
)
