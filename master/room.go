package master

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tierstore/tierstore/internal/errcode"
)

// evictRounds bounds the evict-and-retry rounds of one allocation.
const evictRounds = 4

// allocate reserves size bytes in some live segment of a node not in
// exclude (the nodes a put's other replicas are on), evicting when nothing
// has room. When eviction cannot make room now (every candidate is leased,
// pinned by an offload task, or being offloaded instead of dropped), it
// waits for room (waitForRoom) instead of failing at once; so it does in
// the start-up grace while no segment is mounted, since the nodes of a
// master that has just started mount again at their next call.
func (s *Service) allocate(ctx context.Context, size int64, preferred string, exclude []*node) (*segment, int64, error) {
	seg, off, err := s.allocateNow(size, preferred, exclude)
	if err == nil || s.cfg.PutStartMaxWait <= 0 || !s.mayWait(size, exclude) {
		return seg, off, err
	}
	return s.waitForRoom(ctx, size, preferred, exclude)
}

// mayWait reports whether waiting can help a put of size bytes that found
// no room: room can come in a mounted segment (roomCanCome), or no segment
// is mounted yet and the start-up grace has not ended (the nodes are still
// to mount). A put too large for every mounted segment, or needing more
// nodes than have mounted, still fails at once.
func (s *Service) mayWait(size int64, exclude []*node) bool {
	return s.roomCanCome(size, exclude) || (s.now() < s.graceEnd && s.segmentCount() == 0)
}

// allocateNow tries to allocate, with up to evictRounds eviction rounds.
func (s *Service) allocateNow(size int64, preferred string, exclude []*node) (*segment, int64, error) {
	for round := 0; ; round++ {
		gen := s.evictGen.Load()
		if seg, off, ok := s.tryAllocate(size, preferred, exclude); ok {
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
		return nil, 0, errcode.Errorf(errcode.NoAvailableHandle, "master: put_start: no segment mounted")
	}
	if len(exclude) > 0 {
		return nil, 0, errcode.Errorf(errcode.NoAvailableHandle, "master: put_start: no segment of a node other than the %d holding the put's other replicas has %d free bytes", len(exclude), size)
	}
	return nil, 0, errcode.Errorf(errcode.NoAvailableHandle, "master: put_start: no segment has %d free bytes", size)
}

// roomCanCome reports whether waiting can help a put of size bytes: some
// live segment of a node not in exclude is at least that large (so frees,
// evictions and offloads may make room in it).
func (s *Service) roomCanCome(size int64, exclude []*node) bool {
	need := alignUp(size)
	s.nodesMu.RLock()
	defer s.nodesMu.RUnlock()
	for _, n := range s.nodes {
		if slices.Contains(exclude, n) {
			continue
		}
		for _, g := range n.segments {
			if g.alloc.size >= need && g.live() {
				return true
			}
		}
	}
	return false
}

// waitForRoom retries the allocation each time room may have appeared (the
// room broadcast: a range freed, an offload answered, a put ended, a
// segment mounted, a Tick that may have ended leases) until it succeeds, ctx
// ends, put_start_max_wait passes, waiting can no longer help (mayWait:
// the start-up grace ended with no segment mounted) or the Service closes. It registers as a
// waiter before each retry, so a signal between a failed try and the wait
// is never lost.
func (s *Service) waitForRoom(ctx context.Context, size int64, preferred string, exclude []*node) (*segment, int64, error) {
	s.cnt.putWaits.Add(1)
	timer := time.NewTimer(s.cfg.PutStartMaxWait)
	defer timer.Stop()
	// graceOver wakes the loop when the start-up grace ends, for a put
	// that waits only for it; nil (never ready) when it has ended.
	var graceOver <-chan time.Time
	if left := s.graceEnd - s.now(); left > 0 {
		t := time.NewTimer(time.Duration(left))
		defer t.Stop()
		graceOver = t.C
	}
	ch, done := s.room.wait()
	defer done()
	for {
		seg, off, err := s.allocateNow(size, preferred, exclude)
		if err == nil || !s.mayWait(size, exclude) {
			return seg, off, err
		}
		s.wakeNodes() // their queued offload tasks may make room
		if h := s.hooks.putWaiting; h != nil {
			h()
		}
		select {
		case <-ch:
			ch = s.room.rearm()
		case <-ctx.Done():
			s.cnt.putWaitsFailed.Add(1)
			return nil, 0, errcode.Errorf(errcode.NoAvailableHandle, "master: put_start: no room for %d bytes before the caller's context ended (%v)", size, ctx.Err())
		case <-timer.C:
			s.cnt.putWaitsFailed.Add(1)
			return nil, 0, errcode.Errorf(errcode.NoAvailableHandle, "master: put_start: no room for %d bytes within put_start_max_wait (%v)", size, s.cfg.PutStartMaxWait)
		case <-graceOver:
			graceOver = nil // the next try answers at once unless room can come
		case <-s.stop:
			return nil, 0, ErrClosed
		}
	}
}

// broadcast wakes every PutStart waiting for room. signal is cheap when
// nobody waits (one atomic load), so every path that may make room calls
// it: frees, answered offload tasks, ended puts, mounts, Tick.
type broadcast struct {
	gen     atomic.Uint64 // signals so far
	waiting atomic.Int64  // registered waiters
	mu      sync.Mutex    // protects ch
	ch      chan struct{} // closed by the next signal; nil when no one took it
}

// wait registers a waiter and returns the channel the next signal closes,
// and the function that unregisters.
func (b *broadcast) wait() (<-chan struct{}, func()) {
	b.waiting.Add(1)
	return b.rearm(), func() { b.waiting.Add(-1) }
}

// rearm returns the channel the next signal closes (a registered waiter
// calls it after each wake-up, then retries before waiting on it).
func (b *broadcast) rearm() <-chan struct{} {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.ch == nil {
		b.ch = make(chan struct{})
	}
	return b.ch
}

// signal wakes the registered waiters.
func (b *broadcast) signal() {
	b.gen.Add(1)
	if b.waiting.Load() == 0 {
		return
	}
	b.mu.Lock()
	if b.ch != nil {
		close(b.ch)
		b.ch = nil
	}
	b.mu.Unlock()
}

// allocate reserves size bytes of g under its lock.
func (g *segment) allocate(size int64) (int64, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.alloc.Alloc(size)
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

// tryAllocate picks a segment of a node not in exclude (the preferred
// node's if it has room, else the one with the most free bytes whose
// largest extent fits) and allocates.
func (s *Service) tryAllocate(size int64, preferred string, exclude []*node) (*segment, int64, bool) {
	need := alignUp(size)
	s.nodesMu.RLock()
	defer s.nodesMu.RUnlock()
	if n := s.nodes[preferred]; n != nil && !slices.Contains(exclude, n) {
		for _, g := range n.segments {
			if g.held.Load() {
				continue // waits for its DRAM re-registration
			}
			if off, ok := g.allocate(size); ok {
				return g, off, true
			}
		}
	}
	for attempt := 0; attempt < 2; attempt++ {
		var best *segment
		var bestFree int64 = -1
		for _, n := range s.nodes {
			if slices.Contains(exclude, n) {
				continue
			}
			for _, g := range n.segments {
				if g.held.Load() {
					continue
				}
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
		if off, ok := best.allocate(size); ok {
			return best, off, true
		}
	}
	return nil, 0, false
}
