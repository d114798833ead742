package master

import (
	"math"
	"sort"
)

// victim is an eviction candidate.
type victim struct {
	key   string
	o     *object
	sh    *shard
	lease int64
	soft  bool
}

// evict runs one DRAM eviction round: it collects the evictable objects
// (complete DRAM replica on a live segment, not hard-pinned, no read lease,
// no offload task), orders them unpinned before soft-pinned and oldest lease
// first, and drops about eviction_ratio of them, more if needed to free need
// bytes. Each victim is re-checked under its shard lock before it goes, so a
// lease granted after the scan still protects it. With an admission policy
// that offloads on eviction, a victim without an SSD replica is queued for
// offload instead of dropped. Objects that keep a LocalDisk replica keep
// their metadata. It returns the number of DRAM replicas dropped.
func (s *Service) evict(need int64) int {
	s.evictMu.Lock()
	defer s.evictMu.Unlock()
	now := s.now()
	var cands []victim
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		for k, o := range sh.objs {
			if s.evictable(o, now) && o.mem.seg.live() {
				cands = append(cands, victim{key: k, o: o, sh: sh, lease: o.leaseUntil, soft: o.softPinned(now)})
			}
		}
		sh.mu.Unlock()
	}
	if len(cands) == 0 {
		return 0
	}
	target := int(math.Ceil(s.cfg.EvictionRatio * float64(len(cands))))
	sort.Slice(cands, func(i, j int) bool {
		if cands[i].soft != cands[j].soft {
			return !cands[i].soft
		}
		return cands[i].lease < cands[j].lease
	})
	var freed int64
	dropped, queued := 0, 0
	for _, c := range cands {
		if dropped+queued >= target && freed >= need {
			break
		}
		c.sh.mu.Lock()
		o := c.o
		if c.sh.objs[c.key] != o || !s.evictable(o, now) || !o.mem.seg.live() {
			c.sh.mu.Unlock()
			continue
		}
		if !o.readableDisk() && s.policy.OnEvict(s.admissionView(c.key, o)) && s.enqueue(c.key, o) {
			queued++
			c.sh.mu.Unlock()
			continue
		}
		freed += alignUp(o.mem.len)
		s.dropMem(o, true)
		if o.empty() {
			s.deleteObj(c.sh, c.key, o)
		}
		dropped++
		c.sh.mu.Unlock()
	}
	s.cnt.evictions.Add(int64(dropped))
	s.met.evictions.Add(float64(dropped))
	if dropped+queued > 0 {
		s.log.Debug("dram eviction", "candidates", len(cands), "dropped", dropped, "queued_for_offload", queued, "freed_bytes", freed)
	}
	return dropped
}

// EvictNow runs one eviction round as if an allocation had failed (tests,
// operators) and returns the number of DRAM replicas dropped.
func (s *Service) EvictNow() int { return s.evict(0) }

// evictIfAboveWatermark evicts while some live segment's use is above
// eviction_high_watermark_ratio and rounds make progress.
func (s *Service) evictIfAboveWatermark() {
	for round := 0; round < evictRounds; round++ {
		if !s.aboveWatermark() {
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
