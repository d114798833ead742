package master

import (
	"container/heap"
	"math"
	"sort"

	"github.com/tierstore/tierstore/admission"
	"github.com/tierstore/tierstore/internal/keyspec"
)

// victim is an eviction candidate.
type victim struct {
	key     string
	o       *object
	sh      *shard
	lastUse int64
	soft    bool
}

// evict runs one DRAM eviction round: it collects the evictable objects
// (complete DRAM replica on a live segment, not hard-pinned, no lease that
// needs the DRAM replica, no offload task), orders them unpinned before
// soft-pinned and least recently used first, and drops about eviction_ratio of
// them, more if needed to free need bytes. Each victim is re-checked under
// its shard lock before it goes, so a lease granted after the scan still
// protects it. With an admission policy that offloads on eviction, a victim
// without an SSD replica is queued for offload instead of dropped, unless
// its offload already failed for good (then it is dropped like any cache
// entry: DRAM never stays wedged). When the victims of a pass were queued
// and need is not freed yet, the round picks the next evictable objects
// (up to evictExtraPasses more passes) before it gives up, so a put is not
// refused only because every least recently used object was admitted to
// SSD. Objects that keep an SSD replica keep their metadata. It
// returns the number of DRAM replicas dropped.
func (s *Service) evict(need int64) int {
	s.evictMu.Lock()
	defer s.evictMu.Unlock()
	return s.evictLocked(need)
}

// evictLocked is evict's round; the caller holds evictMu.
func (s *Service) evictLocked(need int64) int {
	defer s.evictGen.Add(1)
	ring := s.room.gen.Load()
	now := s.now()
	total, first := s.countAndPickVictims(now)
	if total == 0 {
		s.fruitless.Store(ring + 1)
		return 0
	}
	target := int(math.Ceil(s.cfg.EvictionRatio * float64(total)))
	var freed int64
	dropped, queued := 0, 0
	for pass := 0; pass <= evictExtraPasses; pass++ {
		cands := first
		if pass > 0 {
			_, cands = s.collectVictims(now, target)
		}
		if h := s.hooks.victimsPicked; h != nil && pass == 0 {
			h()
		}
		queuedNow := 0
		for _, c := range cands {
			if dropped+queued >= target && freed >= need {
				break
			}
			switch n, q := s.evictVictim(c, now); {
			case q:
				queued++
				queuedNow++
			case n > 0:
				freed += n
				dropped++
			}
		}
		// A victim queued for offload frees nothing yet (its task pins
		// it until the node answers) and is no candidate any more: when
		// the round's victims were queued rather than dropped and the
		// put still lacks room, the next evictable objects are picked
		// (the admission policy may drop them) before the put is refused.
		if freed >= need || queuedNow == 0 {
			break
		}
	}
	if dropped+queued == 0 {
		s.fruitless.Store(ring + 1)
	}
	s.cnt.evictions.Add(int64(dropped))
	s.met.evictions.Add(float64(dropped))
	if dropped+queued > 0 {
		s.log.Debug("dram eviction", "evictable", total, "dropped", dropped, "queued_for_offload", queued, "freed_bytes", freed)
	}
	return dropped
}

// evictExtraPasses bounds the further picks of one eviction round whose
// victims were queued for offload instead of dropped: at most
// (1 + evictExtraPasses) x target objects are considered, so an admission
// policy that admits every victim (offload_on_evict) does not queue all of
// DRAM for one put; the put then waits for room (put_start_max_wait).
const evictExtraPasses = 4

// eachDRAM calls fn for every object with a DRAM replica (shard.dramObjects),
// under its shard's lock, one shard at a time, visiting only the shards
// the index of shards holding DRAM objects names (shardSets.dram): at
// 65536 shards a round would otherwise lock every shard, most of them
// without a DRAM object (BenchmarkPutUnderEviction). An object given its
// first DRAM replica during the walk may or may not be visited, as in a
// walk over every shard.
func (s *Service) eachDRAM(fn func(sh *shard, key string, o *object)) {
	s.sets.dram.each(func(i int) {
		sh := &s.shards[i]
		sh.mu.Lock()
		sh.dramObjects(func(k string, o *object) { fn(sh, k, o) })
		sh.mu.Unlock()
	})
}

// countAndPickVictims is a round's first pass in one walk: it counts the
// evictable objects and keeps the best of them, twice as many as the
// previous round's target (at least minEvictKeep), of which the round
// takes the best target (eviction_ratio of the count). Only when the
// target exceeds what it kept (the evictable objects more than doubled
// since the last round) does it walk again. Caller holds evictMu.
func (s *Service) countAndPickVictims(now int64) (int, []victim) {
	keep := max(2*s.evictKeep, minEvictKeep)
	total, cands := s.collectVictims(now, keep)
	target := int(math.Ceil(s.cfg.EvictionRatio * float64(total)))
	s.evictKeep = target
	if target > keep {
		_, cands = s.collectVictims(now, target)
	}
	return total, cands[:min(target, len(cands))]
}

// minEvictKeep is the fewest victims countAndPickVictims keeps.
const minEvictKeep = 64

// collectVictims walks the DRAM objects once: it returns how many are
// evictable and the best keep of them, best first (kept in a max-heap,
// worst on top, during the walk; keep 0 only counts).
func (s *Service) collectVictims(now int64, keep int) (int, []victim) {
	h := victimHeap(make([]victim, 0, keep))
	total := 0
	s.eachDRAM(func(sh *shard, k string, o *object) {
		if !s.victimOK(o, now) {
			return
		}
		total++
		h.offer(victim{key: k, o: o, sh: sh, lastUse: o.lastUse, soft: o.softPinned(now)}, keep)
	})
	cands := []victim(h)
	sort.Slice(cands, func(i, j int) bool { return cands[i].before(cands[j]) })
	return total, cands
}

// evictVictim re-checks c under its shard lock and drops its DRAM replica,
// or queues it for offload when the admission policy offloads on eviction.
// It returns the bytes freed and whether c was queued instead.
func (s *Service) evictVictim(c victim, now int64) (freed int64, queued bool) {
	c.sh.mu.Lock()
	defer c.sh.mu.Unlock()
	o := c.o
	if c.sh.objs[c.key] != o || !s.victimOK(o, now) {
		return 0, false
	}
	if !o.readableSSD() {
		switch admitted, queued := s.admitToSSD(c.key, o, s.policy.OnEvict, o.offloadGaveUp == offloadOK); {
		case queued:
			return 0, true
		case admitted && o.offloadGaveUp != offloadOK:
			// Its offload failed for good: dropped like any cache entry.
			s.cnt.offloadDroppedVictims.Add(1)
			s.log.Warn("DRAM eviction dropped a victim whose offload failed; the object leaves the cache",
				"key", keyspec.Show(c.key), "reason", o.offloadGaveUp.String(), "node", dramNode(o))
		}
	}
	// Every DRAM replica of the object goes (a victim is an object, not
	// a copy); freed counts one, what the allocation that needs it gains
	// on its segment at most.
	freed = alignUp(o.size)
	s.dropDRAM(o)
	if o.empty() {
		s.deleteObj(c.sh, c.key, o)
	} else {
		s.freeze(c.sh, c.key, o, now) // SSD-only now: a record again if it can be
	}
	return freed, false
}

// victimOK reports whether o may be an eviction victim now. Caller holds the
// shard lock.
func (s *Service) victimOK(o *object, now int64) bool {
	if !s.evictable(o, now) || !o.readableDRAM() {
		return false
	}
	return s.cfg.AllowEvictSoftPinned || !o.softPinned(now)
}

// putUse is the last use a completed put of key gives its object o, which
// places it in the DRAM eviction order: now (the most recently used end),
// or, when the admission policy says the put is cold
// (admission.ColdPutter), -now: before every object with a last use, the
// newest cold put first. A lookup hit makes it warm again (grantLease).
// Caller holds the shard lock.
func (s *Service) putUse(key string, o *object, now int64) int64 {
	if c, ok := s.policy.(admission.ColdPutter); ok && c.ColdPut(s.admissionView(key, o)) {
		return -now
	}
	return now
}

// before orders victims: unpinned before soft-pinned, then least recently
// used first (an object never read was last used by its put).
func (v victim) before(w victim) bool {
	if v.soft != w.soft {
		return !v.soft
	}
	return v.lastUse < w.lastUse
}

// victimHeap is a max-heap by before: the worst kept victim is at [0].
type victimHeap []victim

// offer keeps v if h holds fewer than keep victims or v is better than
// the worst of them (which it replaces). Not heap.Push, which boxes v
// into an interface: an allocation per kept victim.
func (h *victimHeap) offer(v victim, keep int) {
	if len(*h) < keep {
		*h = append(*h, v)
		heap.Fix(h, len(*h)-1)
	} else if keep > 0 && v.before((*h)[0]) {
		(*h)[0] = v
		heap.Fix(h, 0)
	}
}

func (h victimHeap) Len() int           { return len(h) }
func (h victimHeap) Less(i, j int) bool { return h[j].before(h[i]) }
func (h victimHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *victimHeap) Push(x any)        { *h = append(*h, x.(victim)) }
func (h *victimHeap) Pop() any {
	old := *h
	v := old[len(old)-1]
	*h = old[:len(old)-1]
	return v
}

// evictAfter runs an eviction round for an allocation of need bytes that
// failed while the eviction generation was gen; if another round finished
// since, it returns at once (the caller retries its allocation). It
// returns false without a round when the last one was fruitless and the
// room broadcast has not rung since (evictIsFruitless): the puts a ring
// wakes then scan once between them, not once each.
func (s *Service) evictAfter(gen uint64, need int64) bool {
	if s.evictGen.Load() != gen {
		return true
	}
	if s.evictIsFruitless() {
		return false
	}
	// The generation is checked again and the round run under one hold
	// of evictMu: two puts that both found it unchanged would otherwise
	// run a round each, one after the other, and the second would evict
	// another EvictionRatio of DRAM for a put the first made room for
	// (TestWaitingPutsScanOncePerRing).
	s.evictMu.Lock()
	defer s.evictMu.Unlock()
	if s.evictGen.Load() != gen {
		return true
	}
	return s.evictLocked(need) > 0
}

// evictIsFruitless reports whether the last eviction round found nothing
// to drop or queue and the room broadcast has not rung since (no free, no
// answered offload, no ended put, no Tick): a new round would find the
// same.
func (s *Service) evictIsFruitless() bool {
	return s.fruitless.Load() == s.room.gen.Load()+1
}

// EvictNow runs one eviction round as if an allocation had failed (tests,
// operators) and returns the number of DRAM replicas dropped.
func (s *Service) EvictNow() int { return s.evict(0) }

// evictIfAboveWatermark evicts while some live segment's use is above
// eviction_high_watermark_ratio and rounds make progress.
func (s *Service) evictIfAboveWatermark() {
	for round := 0; round < evictRounds; round++ {
		if !s.aboveWatermark() || s.evictIsFruitless() {
			return
		}
		if s.evict(0) == 0 {
			return
		}
	}
}

func (s *Service) aboveWatermark() bool {
	s.nodesMu.RLock()
	defer s.nodesMu.RUnlock()
	for _, n := range s.nodes {
		for _, g := range n.segments {
			if float64(g.used()) > s.cfg.EvictionHighWatermarkRatio*float64(g.size) {
				return true
			}
		}
	}
	return false
}
