package ha

import "errors"

// Errors of package ha, checked with errors.Is. They are grouped here so a
// caller sees every way a call can fail.
var (
	// ErrConfig: a Config or ResolverOptions field is invalid; the message
	// names the field.
	ErrConfig = errors.New("ha: invalid configuration")
	// ErrBadMasterURL: ParseMasterURL refused its input; the message says
	// what is wrong (empty host list, bad port, unknown scheme, ...).
	ErrBadMasterURL = errors.New("ha: invalid master URL")
	// ErrNotLeader: Leadership.Fence found the leadership not (or no longer)
	// valid. A master answers writes with it (wrapped with the cause) once
	// its fence is down.
	ErrNotLeader = errors.New("ha: not the leader")
	// ErrResigned: the leadership ended because Resign was called.
	ErrResigned = errors.New("ha: resigned")
	// ErrLeaseExpired: etcd reported the session's lease gone, or the
	// session ended (its etcd client closed or its keepalive gave up).
	ErrLeaseExpired = errors.New("ha: session lease expired")
	// ErrLeaseUnconfirmed: no keepalive was confirmed within TTL minus the
	// safety margin, so the lease may have expired and another candidate may
	// lead (etcd unreachable, this process paused).
	ErrLeaseUnconfirmed = errors.New("ha: session lease not confirmed in time")
	// ErrKeyDeleted: the leader key was deleted or replaced by someone else
	// (an operator, or a Resign from another process).
	ErrKeyDeleted = errors.New("ha: leader key deleted")
	// ErrWatchFailed: the watch on the leader key ended, so the leader can no
	// longer see its key being deleted; it steps down rather than guess.
	ErrWatchFailed = errors.New("ha: leader key watch failed")
	// ErrResolverClosed: the Resolver was closed.
	ErrResolverClosed = errors.New("ha: resolver closed")
)
