package node

import (
	"errors"
	"fmt"
	"time"

	"github.com/tierstore/tierstore/internal/errcode"
	"github.com/tierstore/tierstore/internal/grant"
)

// Reads bound to their lookup (docs/security.md): with a grant secret
// (Config.Grants, --grant_secret_file) every data-plane read must carry
// the grant the master made for it when it answered the lookup: this node,
// the object's key and its DRAM range (segment, offset, length) or, on
// SSD, the key and the length read, until the lookup's read lease ends.
// A DRAM read's key is the one the node recorded for the range
// (readcheck.go), not one the reader names, so a grant for an object does
// not read a later object put at the same range. A read without a grant,
// with one made for another read or by another secret, or past its expiry
// is refused PERMISSION_DENIED wrapping grant.ErrMissing, ErrForged or
// ErrExpired, and counted (Stats.GrantsRefused*). Without a secret the
// grants reads carry are ignored. The reads of a client in this process
// (ReadRangeInto, ReadSSDInto) are not checked: it shares the node's
// memory. The node's gRPC service serves no reads (NodeStats only).

// checkGrant checks grant g for the read sc; nil without a grant secret.
func (n *Node) checkGrant(sc grant.Scope, g []byte) error {
	k := n.cfg.Grants
	if k == nil {
		return nil
	}
	sc.Node = n.name
	err := k.Verify(sc, g, time.Now())
	if err == nil {
		return nil
	}
	switch {
	case errors.Is(err, grant.ErrMissing):
		n.metrics.grantsMissing.Add(1)
	case errors.Is(err, grant.ErrExpired):
		n.metrics.grantsExpired.Add(1)
	default:
		n.metrics.grantsForged.Add(1)
	}
	return errcode.Wrap(errcode.PermissionDenied, fmt.Errorf("node %s refuses the read: %w", n.name, err))
}
