package masterapi

import (
	"fmt"

	"github.com/tierstore/tierstore/internal/errcode"
)

// ErrStalePut answers a PutEnd or PutRevoke (or one item of their batch
// forms) whose token is not the current put of its key: that put was
// revoked, reclaimed after put_start_discard_timeout, removed by a forced
// Remove, or the key was put again since (docs/design.md invariant 8). Such
// a call never completes nor revokes another put. Its code is
// REPLICA_NOT_FOUND (-710): the put's replica is not, or no longer, the
// key's. errors.Is(err, ErrStalePut) holds for the in-process master and
// over gRPC alike (mastergrpc.Client restores it from the code).
var ErrStalePut = fmt.Errorf("masterapi: the put token is not the current put of the key: %w", errcode.ErrReplicaNotFound)
