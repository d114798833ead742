package client

import "github.com/tierstore/tierstore/internal/errcode"

// Code is a tierstore error code (Mooncake's numbers where the concept
// exists): CodeOf(err).String() gives its name, e.g. "OBJECT_NOT_FOUND".
// It is the type of package internal/errcode, re-exported because code
// outside this module cannot import an internal package.
type Code = errcode.Code

// CodeOf returns the code carried by err: OK (0) for nil, the code of the
// first tierstore sentinel in err's chain, CONTEXT_CANCELED for context
// errors, INTERNAL_ERROR for anything else. It works the same for errors
// that crossed gRPC.
func CodeOf(err error) Code { return errcode.Of(err) }

// The error sentinels of tierstore's codes. Every error the client, the
// node and the master API return for one of these conditions wraps the
// sentinel, locally and across gRPC: test with errors.Is(err,
// client.ErrObjectNotFound). They are the very values of internal/errcode, so
// errors.Is also matches those.
var (
	ErrInternal          = errcode.ErrInternal          // INTERNAL_ERROR (-1)
	ErrSegmentNotFound   = errcode.ErrSegmentNotFound   // SEGMENT_NOT_FOUND (-101)
	ErrSegmentExists     = errcode.ErrSegmentExists     // SEGMENT_ALREADY_EXISTS (-102)
	ErrClientNotFound    = errcode.ErrClientNotFound    // CLIENT_NOT_FOUND (-103)
	ErrNoAvailableHandle = errcode.ErrNoAvailableHandle // NO_AVAILABLE_HANDLE (-200): no segment has room
	ErrInvalidKey        = errcode.ErrInvalidKey        // INVALID_KEY (-400)
	ErrInvalidParams     = errcode.ErrInvalidParams     // INVALID_PARAMS (-600)
	ErrReplicaNotReady   = errcode.ErrReplicaNotReady   // REPLICA_IS_NOT_READY (-703): put in progress
	ErrObjectNotFound    = errcode.ErrObjectNotFound    // OBJECT_NOT_FOUND (-704): never existed, removed or expired
	ErrObjectExists      = errcode.ErrObjectExists      // OBJECT_ALREADY_EXISTS (-705)
	ErrObjectHasLease    = errcode.ErrObjectHasLease    // OBJECT_HAS_LEASE (-706): non-forced Remove inside a lease
	ErrReplicaNotFound   = errcode.ErrReplicaNotFound   // REPLICA_NOT_FOUND (-710)
	ErrReplicaGone       = errcode.ErrReplicaGone       // REPLICA_IS_GONE (-712): existed, every replica lost inside the lease
	ErrTransferFail      = errcode.ErrTransferFail      // TRANSFER_FAIL (-800): every replica failed to transfer
	ErrChecksumMismatch  = errcode.ErrChecksumMismatch  // CHECKSUM_MISMATCH (-801): stored bytes fail their CRC32C
	ErrChecksumConflict  = errcode.ErrChecksumConflict  // CHECKSUM_CONFLICT (-802)
	ErrRPCFail           = errcode.ErrRPCFail           // RPC_FAIL (-900): transport failure
	ErrContextCanceled   = errcode.ErrContextCanceled   // CONTEXT_CANCELED (-901)
	ErrUnavailable       = errcode.ErrUnavailable       // UNAVAILABLE_IN_CURRENT_STATUS (-1010)
	ErrShuttingDown      = errcode.ErrShuttingDown      // SHUTTING_DOWN (-1012)
	ErrKeysUltraLimit    = errcode.ErrKeysUltraLimit    // KEYS_ULTRA_LIMIT (-1203): offload queue full
	ErrUnableOffload     = errcode.ErrUnableOffload     // UNABLE_OFFLOAD (-1300): offload not enabled
	ErrTaskNotFound      = errcode.ErrTaskNotFound      // TASK_NOT_FOUND (-1400)
	ErrNeedRemount       = errcode.ErrNeedRemount       // NEED_REMOUNT (-1500)
	ErrVersionMismatch   = errcode.ErrVersionMismatch   // VERSION_MISMATCH (-1600): a master or node of another protocol version (docs/design.md)
	ErrPermissionDenied  = errcode.ErrPermissionDenied  // PERMISSION_DENIED (-1700): the caller's TLS certificate lacks the role the call needs, or a node refused a read's or a put's grant (then also ErrGrantMissing, ErrGrantForged or ErrGrantExpired; docs/security.md)
	ErrPeerLimit         = errcode.ErrPeerLimit         // PEER_LIMIT_EXCEEDED (-1701): the caller passed a bound on what one peer may make a process spend (docs/security.md)
)
