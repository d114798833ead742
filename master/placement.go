package master

import (
	"context"
	"fmt"

	"github.com/tierstore/tierstore/internal/errcode"
	"github.com/tierstore/tierstore/masterapi"
)

// Replica placement (docs/master.md, replicas). A put asks for want DRAM
// replicas (PutStartRequest.Replicas, Mooncake's replica_num), each on a
// different node: the first on the preferred node when it has room (else
// the roomiest segment anywhere), each further one on the roomiest segment
// of a node that holds none of the put's replicas yet. Strict (the
// default): every replica is allocated as a put's one would be (eviction,
// then the wait for room), and the put fails, holding nothing, if one
// cannot be; it fails at once when fewer than want live nodes have a
// segment large enough. AllowFewer: the first replica is allocated as
// usual, the further ones only where room is now or eviction makes it at
// once (no wait); the put gets as many as that placed.

// place is one range allocated for a put's replica.
type place struct {
	seg *segment
	off int64
}

// validReplicas checks a PutStartRequest's replica count and returns the
// count to place (0 means 1).
func validReplicas(n int) (int, error) {
	if n < 0 || n > masterapi.MaxReplicas {
		return 0, errcode.Errorf(errcode.InvalidParams, "master: put_start: %d replicas asked; 1..%d (0 means 1)", n, masterapi.MaxReplicas)
	}
	return max(n, 1), nil
}

// placeReplicas allocates the ranges of a put of size bytes with want
// replicas on distinct nodes, the first on preferred when it has room.
// On failure every range it allocated is freed.
func (s *Service) placeReplicas(ctx context.Context, size int64, preferred string, want int, fewer bool) ([]place, error) {
	if want > 1 && !fewer {
		if have := s.nodesWithSegment(size); have < want {
			return nil, errcode.Errorf(errcode.NoAvailableHandle,
				"master: put_start: %d replicas asked, %d live nodes have a segment of %d bytes or more (ask for fewer, or allow fewer)",
				want, have, size)
		}
	}
	out := make([]place, 0, want)
	exclude := make([]*node, 0, want)
	for len(out) < want {
		var g *segment
		var off int64
		var err error
		if len(out) == 0 || !fewer {
			g, off, err = s.allocate(ctx, size, preferred, exclude)
		} else {
			g, off, err = s.allocateNow(size, "", exclude)
		}
		if err != nil && fewer && len(out) > 0 {
			break // as many as fit
		}
		if err != nil {
			for _, p := range out {
				s.freeRange(p.seg, p.off, size)
			}
			if want > 1 {
				err = fmt.Errorf("master: put_start: replica %d of %d: %w", len(out)+1, want, err)
			}
			return nil, err
		}
		out = append(out, place{g, off})
		exclude = append(exclude, g.node)
		preferred = ""
	}
	return out, nil
}

// nodesWithSegment counts the live nodes with a live segment of at least
// size bytes (a held one included: it takes puts once its node has
// re-registered).
func (s *Service) nodesWithSegment(size int64) int {
	need := alignUp(size)
	s.nodesMu.RLock()
	defer s.nodesMu.RUnlock()
	n := 0
	for _, nd := range s.nodes {
		for _, g := range nd.segments {
			if g.alloc.size >= need && g.live() {
				n++
				break
			}
		}
	}
	return n
}
