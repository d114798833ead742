package errcode

import (
	"context"
	"errors"
	"fmt"
	"strconv"
)

// Code is a Mooncake-compatible error code. 0 is success; errors are
// negative. Numbers follow Mooncake's ErrorCode where the concept exists.
type Code int32

// The codes tierstore uses. Names in String() are Mooncake's.
const (
	OK                Code = 0
	InternalError     Code = -1
	SegmentNotFound   Code = -101
	SegmentExists     Code = -102
	ClientNotFound    Code = -103
	NoAvailableHandle Code = -200
	InvalidKey        Code = -400
	InvalidParams     Code = -600
	ReplicaNotReady   Code = -703
	ObjectNotFound    Code = -704
	ObjectExists      Code = -705
	ObjectHasLease    Code = -706
	ReplicaNotFound   Code = -710
	ReplicaIsGone     Code = -712
	TransferFail      Code = -800
	ChecksumMismatch  Code = -801
	RPCFail           Code = -900
	UnavailableStatus Code = -1010
	KeysUltraLimit    Code = -1203
	UnableOffload     Code = -1300
	TaskNotFound      Code = -1400
	NeedRemount       Code = -1500 // tierstore: the node is unknown to the master and must remount (Mooncake ClientStatus NEED_REMOUNT)
	ChecksumConflict  Code = -802  // tierstore: a node reported a size/CRC that differs from the object's metadata
	ShuttingDown      Code = -1012 // tierstore: the service is closing
	ContextCanceled   Code = -901  // tierstore: the caller's context was cancelled or timed out
	VersionMismatch   Code = -1600 // tierstore: the peer speaks another protocol version, or the data is of another format version (docs/design.md)
	PermissionDenied  Code = -1700 // tierstore: the caller's TLS certificate lacks the role the call needs (docs/security.md)
	PeerLimit         Code = -1701 // tierstore: the caller passed a bound on what one peer may make a process spend (docs/security.md, Bounds per peer)
)

type info struct {
	name string
	err  *Error
}

var table = map[Code]*info{}

func def(c Code, name, msg string) *Error {
	e := &Error{code: c, msg: "tierstore: " + msg}
	table[c] = &info{name: name, err: e}
	return e
}

// Sentinel errors, one per code. Check with errors.Is; errors returned by
// tierstore packages wrap these.
var (
	ErrInternal          = def(InternalError, "INTERNAL_ERROR", "internal error")
	ErrSegmentNotFound   = def(SegmentNotFound, "SEGMENT_NOT_FOUND", "segment not found")
	ErrSegmentExists     = def(SegmentExists, "SEGMENT_ALREADY_EXISTS", "segment already exists")
	ErrClientNotFound    = def(ClientNotFound, "CLIENT_NOT_FOUND", "client (node) not found")
	ErrNoAvailableHandle = def(NoAvailableHandle, "NO_AVAILABLE_HANDLE", "no space available in any segment")
	ErrInvalidKey        = def(InvalidKey, "INVALID_KEY", "invalid key")
	ErrInvalidParams     = def(InvalidParams, "INVALID_PARAMS", "invalid parameters")
	ErrReplicaNotReady   = def(ReplicaNotReady, "REPLICA_IS_NOT_READY", "replica is not ready")
	ErrObjectNotFound    = def(ObjectNotFound, "OBJECT_NOT_FOUND", "object not found")
	ErrObjectExists      = def(ObjectExists, "OBJECT_ALREADY_EXISTS", "object already exists")
	ErrObjectHasLease    = def(ObjectHasLease, "OBJECT_HAS_LEASE", "object has a lease")
	ErrReplicaNotFound   = def(ReplicaNotFound, "REPLICA_NOT_FOUND", "replica not found")
	ErrReplicaGone       = def(ReplicaIsGone, "REPLICA_IS_GONE", "replica existed but is gone")
	ErrTransferFail      = def(TransferFail, "TRANSFER_FAIL", "transfer failed")
	ErrChecksumMismatch  = def(ChecksumMismatch, "CHECKSUM_MISMATCH", "checksum mismatch")
	ErrChecksumConflict  = def(ChecksumConflict, "CHECKSUM_CONFLICT", "size or checksum differs from the object's metadata")
	ErrRPCFail           = def(RPCFail, "RPC_FAIL", "rpc failed")
	ErrContextCanceled   = def(ContextCanceled, "CONTEXT_CANCELED", "context cancelled or deadline exceeded")
	ErrUnavailable       = def(UnavailableStatus, "UNAVAILABLE_IN_CURRENT_STATUS", "unavailable in current status")
	ErrShuttingDown      = def(ShuttingDown, "SHUTTING_DOWN", "service is shutting down")
	ErrKeysUltraLimit    = def(KeysUltraLimit, "KEYS_ULTRA_LIMIT", "queue limit reached")
	ErrUnableOffload     = def(UnableOffload, "UNABLE_OFFLOAD", "offload is not enabled")
	ErrTaskNotFound      = def(TaskNotFound, "TASK_NOT_FOUND", "task not found")
	ErrNeedRemount       = def(NeedRemount, "NEED_REMOUNT", "node must remount its segments")
	ErrVersionMismatch   = def(VersionMismatch, "VERSION_MISMATCH", "protocol or format version mismatch")
	ErrPermissionDenied  = def(PermissionDenied, "PERMISSION_DENIED", "the caller's role may not make this call")
	ErrPeerLimit         = def(PeerLimit, "PEER_LIMIT_EXCEEDED", "the caller passed a bound on what one peer may make this process spend")
)

// Error is the type of the sentinel errors. Its identity is the sentinel: two
// *Error values are the same error only if they are the same pointer.
type Error struct {
	code Code
	msg  string
}

func (e *Error) Error() string { return e.msg }

// Code returns the error's code.
func (e *Error) Code() Code { return e.code }

// String returns Mooncake's name of the code ("OBJECT_NOT_FOUND"), or the
// number for a code tierstore does not know.
func (c Code) String() string {
	if c == OK {
		return "OK"
	}
	if in, ok := table[c]; ok {
		return in.name
	}
	return "CODE(" + strconv.Itoa(int(c)) + ")"
}

// Err returns the sentinel error of c: nil for OK, ErrInternal wrapped with the
// number for a code this build does not know.
func Err(c Code) error {
	if c == OK {
		return nil
	}
	if in, ok := table[c]; ok {
		return in.err
	}
	return fmt.Errorf("unknown error code %d: %w", int32(c), ErrInternal)
}

// Errorf returns an error that wraps the sentinel of c with a message:
// "msg: <sentinel text>". errors.Is(Errorf(c, ...), Err(c)) is true.
func Errorf(c Code, format string, args ...any) error {
	if c == OK {
		return nil
	}
	return fmt.Errorf("%s: %w", fmt.Sprintf(format, args...), Err(c))
}

// Of returns the code carried by err: OK for nil, the code of the first
// sentinel in err's chain, ContextCanceled for context errors, and
// InternalError for anything else.
func Of(err error) Code {
	if err == nil {
		return OK
	}
	var e *Error
	if errors.As(err, &e) {
		return e.code
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return ContextCanceled
	}
	return InternalError
}

// Known reports whether c is a code of this build.
func Known(c Code) bool {
	if c == OK {
		return true
	}
	_, ok := table[c]
	return ok
}

// All returns every known non-OK code (for tests and metrics).
func All() []Code {
	out := make([]Code, 0, len(table))
	for c := range table {
		out = append(out, c)
	}
	return out
}

// messageError is an error with a given text that wraps a sentinel.
type messageError struct {
	msg      string
	sentinel error
}

func (e *messageError) Error() string { return e.msg }
func (e *messageError) Unwrap() error { return e.sentinel }

// WithMessage returns an error whose text is msg (the whole text, as produced
// by the other side of an RPC) and that wraps the sentinel of c. OK gives
// nil; an empty msg gives the sentinel itself.
func WithMessage(c Code, msg string) error {
	if c == OK {
		return nil
	}
	if msg == "" {
		return Err(c)
	}
	return &messageError{msg: msg, sentinel: Err(c)}
}

// wrapError carries code c for an error that already says what went wrong:
// its message is err's alone (the code's name is not repeated in it), and
// errors.Is matches both the code's sentinel and everything in err's chain.
type wrapError struct {
	sentinel error
	err      error
}

func (e *wrapError) Error() string   { return e.err.Error() }
func (e *wrapError) Unwrap() []error { return []error{e.sentinel, e.err} }

// Wrap marks err with code c without repeating the code's message: use it
// where fmt.Errorf("%w: %w", Err(c), err) would print a chain such as
// "checksum mismatch: tier: checksum mismatch: ...". nil stays nil; c == OK
// returns err unchanged.
func Wrap(c Code, err error) error {
	if err == nil || c == OK {
		return err
	}
	return &wrapError{sentinel: Err(c), err: err}
}
