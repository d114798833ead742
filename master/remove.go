package master

import (
	"context"
	"time"

	"github.com/tierstore/tierstore/internal/codes"
)

// Remove implements API.
func (s *Service) Remove(ctx context.Context, key string, force bool) error {
	if err := s.check(ctx); err != nil {
		return err
	}
	now := s.now()
	sh, err := s.lockKey(key)
	if err != nil {
		return s.observe(err)
	}
	defer sh.mu.Unlock()
	o := sh.objs[key]
	if o == nil {
		return s.observe(codes.Errorf(codes.ObjectNotFound, "master: remove"))
	}
	if !force {
		if o.putInProgress() && !o.mem.promo {
			return s.observe(codes.Errorf(codes.ReplicaNotReady, "master: remove: a put of the key is in progress (token %d); it completes normally", o.mem.token))
		}
		if o.leased(now) {
			return s.observe(codes.Errorf(codes.ObjectHasLease, "master: remove: lease until %v", time.Unix(0, o.leaseUntil).UTC()))
		}
		if o.offload != nil {
			return s.observe(codes.Errorf(codes.ObjectHasLease, "master: remove: pinned by an offload task on node %q", o.offload.id))
		}
	}
	s.deleteObj(sh, key, o)
	return nil
}

// RemoveAll implements API.
func (s *Service) RemoveAll(ctx context.Context, force bool) (int64, error) {
	if err := s.check(ctx); err != nil {
		return 0, err
	}
	now := s.now()
	var n int64
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		for k, o := range sh.objs {
			if !force && ((o.putInProgress() && !o.mem.promo) || o.leased(now) || o.offload != nil) {
				continue
			}
			s.deleteObj(sh, k, o)
			n++
		}
		sh.mu.Unlock()
	}
	return n, nil
}

// EvictMemory implements API.
func (s *Service) EvictMemory(ctx context.Context, keys []string, all bool) (EvictMemoryResult, error) {
	var res EvictMemoryResult
	if err := s.check(ctx); err != nil {
		return res, err
	}
	if all && len(keys) > 0 {
		return res, s.observe(codes.Errorf(codes.InvalidParams, "master: evict_memory: give keys or all, not both"))
	}
	for _, k := range keys {
		if err := validKey(k); err != nil {
			return res, s.observe(err)
		}
	}
	now := s.now()
	if all {
		for i := range s.shards {
			sh := &s.shards[i]
			sh.mu.Lock()
			for _, o := range sh.objs {
				if o.mem.seg != nil {
					s.evictMemOf(o, now, &res)
				}
			}
			sh.mu.Unlock()
		}
		return res, nil
	}
	for _, k := range keys {
		sh := s.shardOf(k)
		sh.mu.Lock()
		switch o := sh.objs[k]; {
		case o == nil:
			res.NotFound++
		case o.mem.seg == nil || (o.mem.complete && !o.readableMem()):
			res.NotInMemory++
		default:
			s.evictMemOf(o, now, &res)
		}
		sh.mu.Unlock()
	}
	return res, nil
}

// evictMemOf drops o's DRAM replica if it has a readable SSD copy and
// nothing holds it (evictable), and counts the outcome in res, by reason.
// Caller holds the shard lock; o has a DRAM replica.
func (s *Service) evictMemOf(o *object, now int64, res *EvictMemoryResult) {
	switch {
	case !o.mem.complete:
		res.PutInProgress++
	case !o.readableMem():
		// A dead segment's replica: unreadable already, the sweep drops it.
	case o.hardPin:
		res.HardPinned++
	case o.offload != nil:
		res.OffloadPending++
	case !o.readableDisk():
		res.NoDiskCopy++
	case o.leaseNeedsDRAM(now):
		res.Leased++
	case !s.evictable(o, now):
		// Held for a reason this switch does not name: left in place.
	default:
		s.dropMem(o)
		s.cnt.evictions.Add(1)
		s.met.evictions.Inc()
		res.Dropped++
	}
}

// evictable reports whether o's complete DRAM replica may be dropped now:
// not hard-pinned, no offload task pinning it, and no lease that needs it
// (invariant 4: a lease keeps the object readable, not its DRAM replica;
// see leaseNeedsDRAM). (Soft pins only order victims.) Caller holds the
// shard lock.
func (s *Service) evictable(o *object, now int64) bool {
	return o.mem.seg != nil && o.mem.complete && !o.hardPin && o.offload == nil && !o.leaseNeedsDRAM(now)
}
