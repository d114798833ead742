package masterapi

import (
	"errors"
	"fmt"

	"github.com/tierstore/tierstore/internal/codes"
)

// ErrStalePut answers a PutEnd or PutRevoke (or one item of their batch
// forms) whose token is not the current put of its key: that put was
// revoked, reclaimed after put_start_discard_timeout, removed by a forced
// Remove, or the key was put again since (docs/design.md invariant 8). Such
// a call never completes nor revokes another put. Its code is
// REPLICA_NOT_FOUND (-710): the put's replica is not, or no longer, the
// key's. errors.Is(err, ErrStalePut) holds for the in-process master and
// over gRPC alike (Remote restores it from the code).
var ErrStalePut = fmt.Errorf("masterapi: the put token is not the current put of the key: %w", codes.ErrReplicaNotFound)

// wireErr is an error received over gRPC that also matches a sentinel of
// this package the code alone cannot carry.
type wireErr struct {
	msg  string
	errs []error
}

func (e *wireErr) Error() string   { return e.msg }
func (e *wireErr) Unwrap() []error { return e.errs }

// putErr restores ErrStalePut on an error of PutEnd or PutRevoke that
// crossed the wire: those calls answer REPLICA_NOT_FOUND for nothing else.
func putErr(err error) error {
	if err == nil || codes.Of(err) != codes.ReplicaNotFound || errors.Is(err, ErrStalePut) {
		return err
	}
	return &wireErr{msg: err.Error(), errs: []error{ErrStalePut, err}}
}
