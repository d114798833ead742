package master

import (
	"errors"
	"fmt"

	"github.com/tierstore/tierstore/internal/errcode"
)

// Errors of package master itself. Errors about objects, segments and nodes
// wrap the sentinels of package internal/errcode (errcode.ErrObjectNotFound, ...)
// so that they keep their Mooncake code across gRPC.
var (
	// ErrBadConfig: a Config field is invalid; the message names the flag.
	ErrBadConfig = errors.New("master: invalid configuration")
	// ErrClosed: the Service or Remote was closed.
	ErrClosed = fmt.Errorf("master: closed: %w", errcode.ErrShuttingDown)
	// ErrNotLeader: a highly available master that does not (or no
	// longer) lead answers with it (UNAVAILABLE_IN_CURRENT_STATUS): ask
	// again, the elected leader (docs/ha.md).
	ErrNotLeader = fmt.Errorf("master: not the leader: %w", errcode.ErrUnavailable)
	// ErrRebuilding: a master inside its rebuild window (a new leader, a
	// single master restarted on its state_dir) answers a miss with it
	// (UNAVAILABLE_IN_CURRENT_STATUS): ask again, the node holding the
	// object may not have re-registered it yet (rebuild.go).
	ErrRebuilding = fmt.Errorf("master: rebuilding its metadata from the nodes, ask again: %w", errcode.ErrUnavailable)
	// ErrInconsistent: Check found a violated internal invariant.
	ErrInconsistent = errors.New("master: inconsistent state")
)
