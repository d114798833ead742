package node

import "errors"

// Errors of package node that are not tierstore error codes. Errors that
// are codes (OBJECT_NOT_FOUND, REPLICA_IS_GONE, ...) are the sentinels of
// internal/errcode and are checked with errors.Is against those.
var (
	// ErrBadConfig: a Config or Config field is invalid; the message
	// names the field or flag.
	ErrBadConfig = errors.New("node: invalid configuration")
	// ErrOutOfRange: a segment read or write outside the segment.
	ErrOutOfRange = errors.New("node: range outside the segment")
	// ErrClosed: the client, node or segment was closed.
	ErrClosed = errors.New("node: closed")
	// ErrBadNodeID: the NODE_ID file in --ssd_dir holds no valid id, or
	// the node's name is not one its TLS certificate is bound to.
	ErrBadNodeID = errors.New("node: invalid node id file")
	// ErrSSDDirInUse: another node (process) runs on the --ssd_dir.
	ErrSSDDirInUse = errors.New("node: SSD directory in use")
	// ErrRangeNotOwned: a segment write was refused because a newer put
	// wrote an overlapping range since (docs/design.md invariant 8). Peers
	// receive it as INVALID_PARAMS with this text.
	ErrRangeNotOwned = errors.New("node: write refused: the range belongs to a newer put")
	// ErrNoPutToken: a segment write carried no put token while the node
	// enforces put ownership (invariant 8). Peers receive it as
	// INVALID_PARAMS with this text.
	ErrNoPutToken = errors.New("node: write refused: no put token")
	// ErrNotAnObject: a data-plane read of a DRAM range that is not
	// exactly a complete object the node stores (readcheck.go). Peers
	// receive it as REPLICA_IS_GONE with this text.
	ErrNotAnObject = errors.New("node: read refused: the range is no complete object of this node")
)
