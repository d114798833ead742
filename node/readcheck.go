package node

import (
	"fmt"
	"sync/atomic"
	"time"

	"github.com/tierstore/tierstore/internal/errcode"
)

// Reads bound to objects (docs/security.md, Reads bound to objects): the
// data plane serves a DRAM range only when it is exactly the range of a
// complete object this node stores, as its records of complete writes say
// (ha.go: a write's record is made at its Commit, or a promotion's, and
// dropped when the node applies a removal of its key), and no newer put
// has claimed any byte of it since (claims.go). The master hands a reader
// exactly such ranges; a client that asks for another range (a guessed
// offset, part of an object, a removed object whose removal the node
// applied, a put still being written) is refused with REPLICA_IS_GONE
// (ErrNotAnObject), and tries its next replica as after any miss.
//
// readCheck turns the check off for the side-by-side benchmark only
// (BenchmarkE2EGetDRAM's "unchecked" rows); it is on in every node.
var readCheck atomic.Bool

func init() { readCheck.Store(true) }

// checkReadRange returns the key of the object recorded at off (for its
// read grant, grants.go) when [off, off+length) is exactly the range of a
// complete object the node stores and, when token is not 0, the object of
// that put (a client's cached replica location names the put it was told
// of: a range freed and written again by another put of the same length
// is refused), else an error wrapping ErrNotAnObject and
// errcode.ErrReplicaGone.
func (n *Node) checkReadRange(off, length int64, token uint64) (string, error) {
	if !readCheck.Load() {
		return "", nil
	}
	n.ownMu.RLock()
	defer n.ownMu.RUnlock()
	h := &n.ha
	h.recMu.Lock()
	r, ok := h.records[off]
	h.recMu.Unlock()
	switch {
	case !ok:
		return "", errcode.Wrap(errcode.ReplicaIsGone, fmt.Errorf("%w: no object starts at %d", ErrNotAnObject, off))
	case r.len != length:
		return "", errcode.Wrap(errcode.ReplicaIsGone, fmt.Errorf("%w: the object at %d has %d bytes, the read asks %d", ErrNotAnObject, off, r.len, length))
	case token != 0 && r.token != token:
		return "", errcode.Wrap(errcode.ReplicaIsGone, fmt.Errorf("%w: the object at %d is put %d, the read names put %d", ErrNotAnObject, off, r.token, token))
	case token != 0:
		if err := n.outOfTouch(); err != nil {
			return "", err
		}
	}
	if err := n.owners.check(off, off+length, r.token); err != nil {
		return "", errcode.Wrap(errcode.ReplicaIsGone, fmt.Errorf("%w: a newer put claimed part of [%d, %d)", ErrNotAnObject, off, off+length))
	}
	return r.obj.Key, nil
}

// outOfTouch refuses a read of a cached replica location (one that names
// its put token) once the node has gone half the master's client_ttl
// without a Ping the master answered OK, counted from when that Ping was
// sent: the master may be about to expire the node (it does at client_ttl
// of silence), drop its replicas and take new puts of their keys
// elsewhere, which a client reading its cached location here would not
// see. A lookup's fresh answer (no token) is read as before. Before the
// first answered Ping, nothing is refused.
func (n *Node) outOfTouch() error {
	c, ttl := n.contact.Load(), n.clientTTL.Load()
	if c == 0 || ttl <= 0 {
		return nil
	}
	if since := time.Since(time.Unix(0, c)); since > time.Duration(ttl/2) {
		return errcode.Wrap(errcode.ReplicaIsGone, fmt.Errorf("%w: the node has not reached the master for %v (client_ttl %v): a cached replica location is not served", ErrNotAnObject, since.Round(time.Millisecond), time.Duration(ttl)))
	}
	return nil
}
