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
//
// Writes bound to their PutStart, the same way: with a grant secret every
// data-plane write must carry the write grant the master made for the
// range when it answered PutStart: this node, the range (segment, offset,
// length), the put token and the object's key the write names (its
// metadata, recorded for re-registration and for the read check), until
// the put's discard deadline. It is checked before the range is claimed
// (claims.go) and before a byte of the payload lands, so a refused write
// changes neither the claims nor the segment. Refusals are counted apart
// from the reads' (Stats.WriteGrants*). A read grant is no write grant,
// nor the other way round (grant.Scope.Kind). Not checked: the writes of a
// client in this process (WriteRange, WriteRangeParts), and the
// promotions' writes (writePromoted), which the node makes itself for a
// task the master gave it over its own connection.

// checkGrant checks grant g for the request sc (a read, or a write with
// sc.Kind grant.Write); nil without a grant secret.
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
	missing, expired, forged := &n.metrics.grantsMissing, &n.metrics.grantsExpired, &n.metrics.grantsForged
	if sc.Kind == grant.Write {
		missing, expired, forged = &n.metrics.wgrantsMissing, &n.metrics.wgrantsExpired, &n.metrics.wgrantsForged
	}
	switch {
	case errors.Is(err, grant.ErrMissing):
		missing.Add(1)
	case errors.Is(err, grant.ErrExpired):
		expired.Add(1)
	default:
		forged.Add(1)
	}
	return errcode.Wrap(errcode.PermissionDenied, fmt.Errorf("node %s refuses the %v: %w", n.name, sc.Kind, err))
}
