package master

import (
	"context"
	"slices"
	"sync"
)

// Prefetch (issue 24 item 4): an engine looks keys up (batch_exists) some
// time before it reads them. When a lookup (ExistKey, BatchExistKey) hits
// an object whose only readable copies are on SSD, or a client asks for it
// (Prefetch), the object is queued for promotion on the node of its SSD
// copy (promote.go) as a prefetch:
//
//   - admitted by the same frequency test as any promotion (the policy's
//     Promote: tinylfu with dram_promotion_min_freq; other policies never
//     promote, so never prefetch);
//   - bounded by the prefetch budget (prefetch_budget MB/s, bursts of one
//     second's worth, tokenBucket): beyond it the prefetch is refused, so
//     prefetch never floods the disk;
//   - its DRAM range comes from free room, or from evicting objects that
//     are colder than it (the policy's frequency estimate strictly below
//     the prefetched key's; allocateColder): a prefetch never evicts an
//     object hotter than the one it brings in;
//   - queuing rings the node (wake.go), which starts the promotion at once
//     instead of at its next heartbeat tick.
//
// The promotion is a put in progress of its object (invariant 8), so a
// removal during a prefetch ends it as it ends any promotion: nothing is
// published and the range is freed once the node answers.

// tokenBucket is a byte budget refilled at rate bytes per second up to one
// second's worth. A zero rate refuses everything.
type tokenBucket struct {
	mu     sync.Mutex // protects tokens and last
	rate   float64    // bytes per second; immutable after init
	tokens float64
	last   int64 // unix ns of the last refill
}

func (b *tokenBucket) init(rate float64, now int64) {
	b.rate, b.tokens, b.last = rate, rate, now
}

// take spends n bytes when the bucket holds them; false (nothing spent)
// otherwise. An object larger than one second's worth is refused.
func (b *tokenBucket) take(n, now int64) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if now > b.last {
		b.tokens = min(b.rate, b.tokens+b.rate*float64(now-b.last)/1e9)
		b.last = now
	}
	if float64(n) > b.tokens {
		return false
	}
	b.tokens -= float64(n)
	return true
}

// estimator is a policy that estimates a key's access frequency (tinylfu).
type estimator interface{ Estimate(key string) uint32 }

// Prefetch implements masterapi.Prefetcher: each key whose object is
// readable only from SSD is queued for promotion as a prefetch; it returns
// how many were queued. Missing keys, keys in DRAM (or being put or
// promoted), and keys the frequency test or the budget refuse are left as
// they are. It is not a demand lookup: it neither counts toward admission
// nor grants a lease. ErrInvalidKey for a malformed key (nothing queued).
func (s *Service) Prefetch(ctx context.Context, keys []string) (int, error) {
	if err := s.check(ctx); err != nil {
		return 0, err
	}
	for _, k := range keys {
		if err := validKey(k); err != nil {
			return 0, s.observe(err)
		}
	}
	if s.cfg.PrefetchBudget == 0 {
		return 0, nil
	}
	queued := 0
	for _, k := range keys {
		sh := s.shardOf(k)
		sh.mu.Lock()
		if o := sh.objs[k]; o != nil && !o.readableMem() && o.readableDisk() && s.considerPromotion(k, o, true) {
			queued++
		}
		sh.mu.Unlock()
	}
	return queued, nil
}

// allocateColder allocates size bytes in one of n's segments for a
// prefetch of key: in free room, else after evicting, least recently used
// first, objects with a DRAM replica on n that are colder than key (the
// policy's estimate strictly lower) and may be evicted now, as DRAM
// eviction does (a victim without an SSD copy is queued for offload, its
// room comes at a later heartbeat). Without a frequency estimate it only
// takes free room.
func (s *Service) allocateColder(n *node, size int64, key string) (*segment, int64, bool) {
	if g, off, ok := s.tryAllocateOn(n, size); ok {
		return g, off, true
	}
	est, ok := s.policy.(estimator)
	if !ok {
		return nil, 0, false
	}
	hot := est.Estimate(key)
	now := s.now()
	var cands []victim
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		for k, o := range sh.objs {
			if k != key && s.victimOK(o, now) && o.memOn(n) >= 0 && est.Estimate(k) < hot {
				cands = append(cands, victim{key: k, o: o, sh: sh, lastUse: o.lastUse, soft: o.softPinned(now)})
			}
		}
		sh.mu.Unlock()
	}
	slices.SortFunc(cands, func(a, b victim) int {
		switch {
		case a.before(b):
			return -1
		case b.before(a):
			return 1
		}
		return 0
	})
	var pending int64 // bytes freed or queued for offload by this call
	for _, c := range cands {
		if pending >= size {
			break // the room will come when the queued victims are on SSD
		}
		// As any eviction (evictVictim): a victim without an SSD copy is
		// queued for offload when the policy admits it (its range frees
		// once it is on SSD, and the promotion is tried again at the next
		// heartbeat), else dropped.
		freed, queued := s.evictVictim(c, now)
		switch {
		case queued:
			pending += alignUp(c.o.size)
		case freed > 0:
			pending += freed
			s.cnt.prefetchEvictions.Add(1)
			s.cnt.evictions.Add(1)
			if g, off, ok := s.tryAllocateOn(n, size); ok {
				return g, off, true
			}
		}
	}
	return s.tryAllocateOn(n, size)
}
