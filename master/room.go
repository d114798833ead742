package master

import (
	"context"

	"github.com/tierstore/tierstore/internal/codes"
)

// evictRounds bounds the evict-and-retry rounds of one allocation.
const evictRounds = 4

// allocate reserves size bytes in some live segment, evicting when nothing
// has room.
func (s *Service) allocate(_ context.Context, size int64, preferred string) (*segment, int64, error) {
	for round := 0; ; round++ {
		gen := s.evictGen.Load()
		if seg, off, ok := s.tryAllocate(size, preferred); ok {
			if float64(seg.used()) > s.cfg.EvictionHighWatermarkRatio*float64(seg.size) {
				select {
				case s.evictCh <- struct{}{}:
				default:
				}
			}
			return seg, off, nil
		}
		if round == evictRounds {
			break
		}
		if !s.evictAfter(gen, size) {
			break
		}
	}
	if s.segmentCount() == 0 {
		return nil, 0, codes.Errorf(codes.NoAvailableHandle, "master: put_start: no segment mounted")
	}
	return nil, 0, codes.Errorf(codes.NoAvailableHandle, "master: put_start: no segment has %d free bytes", size)
}

// used returns the bytes allocated in g.
func (g *segment) used() int64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.alloc.used
}

func (s *Service) segmentCount() int {
	s.nodesMu.RLock()
	defer s.nodesMu.RUnlock()
	n := 0
	for _, nd := range s.nodes {
		n += len(nd.segments)
	}
	return n
}

// tryAllocate picks a segment (the preferred node's if it has room, else
// the one with the most free bytes whose largest extent fits) and allocates.
func (s *Service) tryAllocate(size int64, preferred string) (*segment, int64, bool) {
	need := alignUp(size)
	s.nodesMu.RLock()
	defer s.nodesMu.RUnlock()
	if n := s.nodes[preferred]; n != nil {
		for _, g := range n.segments {
			g.mu.Lock()
			off, ok := g.alloc.Alloc(size)
			g.mu.Unlock()
			if ok {
				return g, off, true
			}
		}
	}
	for attempt := 0; attempt < 2; attempt++ {
		var best *segment
		var bestFree int64 = -1
		for _, n := range s.nodes {
			for _, g := range n.segments {
				g.mu.Lock()
				free, largest := g.alloc.FreeBytes(), g.alloc.Largest()
				g.mu.Unlock()
				if largest >= need && free > bestFree {
					best, bestFree = g, free
				}
			}
		}
		if best == nil {
			return nil, 0, false
		}
		best.mu.Lock()
		off, ok := best.alloc.Alloc(size)
		best.mu.Unlock()
		if ok {
			return best, off, true
		}
	}
	return nil, 0, false
}
