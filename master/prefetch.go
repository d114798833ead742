package master

import (
	"context"
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
//   - its DRAM range comes from free room, or from objects that are
//     colder than it (the policy's frequency estimate strictly below the
//     prefetched key's) and, as for every promotion, stay readable
//     (allocatePromotion): a prefetch never evicts an object hotter than
//     the one it brings in, nor drops a DRAM-only one;
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
	if err := s.gate(ctx); err != nil {
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
		switch o, r := s.lookup(sh, k); {
		case o != nil:
			if !o.readableDRAM() && o.readableSSD() && s.considerPromotion(k, o, true) {
				queued++
			}
		case r >= 0: // a compact record stays one until its promotion starts
			x := s.cst.rec(r)
			if n := s.incAt(x.node); !n.dead.Load() && s.considerPromotionFrom(k, n, int64(x.size), true) {
				queued++
			}
		}
		sh.mu.Unlock()
	}
	return queued, nil
}
