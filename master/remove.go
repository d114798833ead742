package master

import (
	"context"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/tierstore/tierstore/internal/errcode"
	"github.com/tierstore/tierstore/masterapi"
)

// Remove implements API. The removal is acknowledged once its entry of
// the removal log is durable (docs/design.md, invariant 10) and, for a
// forced removal of a leased object, once the nodes that held it applied
// it or the lease ended (removewait.go).
func (s *Service) Remove(ctx context.Context, key string, force bool) error {
	if err := s.gate(ctx); err != nil {
		return err
	}
	sh, err := s.lockKey(key)
	if err != nil {
		return s.observe(err)
	}
	now := s.now()
	o, r := s.lookup(sh, key)
	if r >= 0 {
		if x := s.cst.rec(r); !force && s.recLeased(x, now) {
			// Refused as removeObj would refuse the *object, which
			// stays a record.
			until := s.recLeaseEnd(x)
			if s.rebuiltLeased(x, now) {
				until = max(until, s.rebuild.until+s.cfg.DefaultKVLeaseTTL.Nanoseconds())
			}
			sh.mu.Unlock()
			return s.observe(errcode.Errorf(errcode.ObjectHasLease, "master: remove: lease until %v", time.Unix(0, until).UTC()))
		}
		o = s.thaw(sh, r)
	}
	if o == nil {
		sh.mu.Unlock()
		return s.observe(errcode.Errorf(errcode.ObjectNotFound, "master: remove"))
	}
	var hw holdersWait
	leased := force && hw.add(o, now)
	if err := s.removeObj(sh, key, o, force, now); err != nil {
		sh.mu.Unlock()
		return s.observe(err)
	}
	if leased {
		s.holdKey(&hw, key) // before the shard unlocks: PutStart of the key waits
	}
	seq := s.rlog.add(masterapi.Removal{Kind: masterapi.RemovalKey, Key: key}, &s.tokens, now, false)
	sh.mu.Unlock()
	if err := s.rlog.wait(ctx, seq); err != nil {
		s.releaseKeys(hw)
		return s.observe(err)
	}
	return s.observe(s.waitHolders(ctx, hw, seq))
}

// removeObj is the master's one removal path: Remove, RemoveAll and
// RemoveByRegex send every key through it. Unless force it refuses (and
// changes nothing) while a put of the key is in progress
// (REPLICA_IS_NOT_READY), a read lease is active or an offload task pins
// the object (OBJECT_HAS_LEASE); otherwise it deletes the object and
// every replica it lists. The caller appends the removal's entry to the
// removal log under the same shard lock. Caller holds the shard lock.
func (s *Service) removeObj(sh *shard, key string, o *object, force bool, now int64) error {
	if !force {
		if err := removeRefusal(o, now); err != nil {
			return err
		}
	}
	s.deleteObj(sh, key, o)
	return nil
}

// removeRefusal is why a non-forced removal must leave o in place, or nil.
// Caller holds the shard lock.
func removeRefusal(o *object, now int64) error {
	switch {
	case o.putInProgress() && !o.dram.promo:
		return errcode.Errorf(errcode.ReplicaNotReady, "master: remove: a put of the key is in progress (token %d); it completes normally", o.dram.token)
	case o.leased(now):
		return errcode.Errorf(errcode.ObjectHasLease, "master: remove: lease until %v", time.Unix(0, o.leaseUntil).UTC())
	case o.offload != nil:
		return errcode.Errorf(errcode.ObjectHasLease, "master: remove: pinned by an offload task on node %q", o.offload.id)
	}
	return nil
}

// RemoveAll implements API.
func (s *Service) RemoveAll(ctx context.Context, force bool) (int64, error) {
	if err := s.gate(ctx); err != nil {
		return 0, err
	}
	n, err := s.removeMatching(ctx, masterapi.Removal{Kind: masterapi.RemovalEvery}, func(string) bool { return true }, force)
	return n, s.observe(err)
}

// RemoveByRegex implements API. The pattern is Go's RE2 syntax
// (regexp/syntax), matched anywhere in the key as Mooncake's
// std::regex_search does; a pattern that does not compile (or uses what
// RE2 lacks: backreferences, lookaround) is INVALID_PARAMS naming it.
func (s *Service) RemoveByRegex(ctx context.Context, pattern string, force bool) (int64, error) {
	if err := s.gate(ctx); err != nil {
		return 0, err
	}
	re, err := regexp.Compile(pattern)
	if err != nil {
		return 0, s.observe(errcode.Errorf(errcode.InvalidParams, "master: remove_by_regex: pattern %q: %v", pattern, err))
	}
	n, err := s.removeMatching(ctx, masterapi.Removal{Kind: masterapi.RemovalPattern, Key: pattern}, re.MatchString, force)
	return n, s.observe(err)
}

// removeMatching sends every object whose key match accepts through
// removeObj, shard by shard, and returns how many it removed (the objects
// it refused are skipped, as Mooncake's RemoveAll does). The whole call
// is one entry of the removal log, kind and pattern from e: its sequence
// number is taken first, objects put during the scan (a larger token) are
// left alone, and the entry lists the keys it spared. An object removed
// with a DRAM copy newer than the entry (a promotion that started during
// the scan) gets an entry of its own. It answers once the entries are
// durable.
func (s *Service) removeMatching(ctx context.Context, e masterapi.Removal, match func(key string) bool, force bool) (int64, error) {
	// Counted before the sequence number is taken: an object frozen
	// since has a smaller token (freezable).
	s.removeScans.Add(1)
	defer s.removeScans.Add(-1)
	now := s.now()
	seq := s.rlog.add(e, &s.tokens, now, true)
	var n int64
	var spared []string
	var kbuf []byte // keyIn's
	var hw holdersWait
	last := seq
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		// A compact object (put token 0, no DRAM replica, task or put;
		// a frozen one was put before the scan began, freezable) goes
		// as removeObj would delete it, unless a lease holds it (its
		// read lease or the rebuild lease): then removeObj would refuse
		// it (spared, in place), or force it.
		sh.c.visit(func(i int32, r *crec) {
			switch k := s.cst.keyIn(i, &kbuf); {
			case !match(k):
			case !force && s.recLeased(r, now):
				spared = append(spared, strings.Clone(k))
			default:
				s.delCompact(sh, k, i)
				n++
			}
		})
		sh.scanAll(s.hooks.scanYielded, func(k string, o *object) {
			if !match(k) || o.token > seq {
				return
			}
			newer := o.dram.seg != nil && o.dram.token > seq
			// A leased object's holders, before removeObj drops them.
			leased := force && hw.add(o, now)
			if s.removeObj(sh, k, o, force, now) != nil {
				spared = append(spared, k)
				return
			}
			if leased {
				s.holdKey(&hw, k)
			}
			n++
			if newer { // under the shard lock, before a new put of k
				last = s.rlog.add(masterapi.Removal{Kind: masterapi.RemovalKey, Key: k}, &s.tokens, now, false)
			}
		})
		sh.mu.Unlock()
	}
	slices.Sort(spared)
	if err := s.rlog.seal(seq, spared); err != nil {
		s.releaseKeys(hw)
		return n, errcode.Wrap(errcode.InternalError, err)
	}
	if err := s.rlog.wait(ctx, last); err != nil {
		s.releaseKeys(hw)
		return n, err
	}
	return n, s.waitHolders(ctx, hw, last)
}

// EvictDRAM implements API. Each DRAM copy it drops is an entry of the
// removal log (EvictionKey; EvictionEvery for all), appended under the
// shard lock that drops it, and the call answers once they are durable:
// an acknowledged eviction is never undone by a master restart or a
// failover, whether or not the nodes had pulled it (docs/design.md,
// invariant 10). A failure to make them durable answers INTERNAL_ERROR
// (the copies are dropped here, but the eviction was not acknowledged).
func (s *Service) EvictDRAM(ctx context.Context, keys []string, all bool) (masterapi.EvictDRAMResult, error) {
	var res masterapi.EvictDRAMResult
	if err := s.gate(ctx); err != nil {
		return res, err
	}
	if all && len(keys) > 0 {
		return res, s.observe(errcode.Errorf(errcode.InvalidParams, "master: evict_dram: give keys or all, not both"))
	}
	for _, k := range keys {
		if err := validKey(k); err != nil {
			return res, s.observe(err)
		}
	}
	now := s.now()
	if all {
		return res, s.observe(s.evictAllDRAM(ctx, now, &res))
	}
	var last uint64
	for _, k := range keys {
		sh := s.shardOf(k)
		sh.mu.Lock()
		switch o := sh.objs[k]; {
		case o == nil && !s.compactHas(sh, k):
			res.NotFound++
		case o == nil || o.dram.seg == nil || (o.dram.complete && !o.readableDRAM()):
			res.NotInDRAM++
		default:
			if s.evictDRAMOf(o, now, &res) {
				last = s.rlog.add(masterapi.Removal{Kind: masterapi.EvictionKey, Key: k}, &s.tokens, now, false)
				s.freeze(sh, k, o, now) // SSD-only now: a record again if it can be
			}
		}
		sh.mu.Unlock()
	}
	if last == 0 {
		return res, nil
	}
	return res, s.observe(s.rlog.wait(ctx, last))
}

// evictAllDRAM is EvictDRAM of every object: one EvictionEvery entry,
// its sequence number taken before the scan (objects put during it have
// larger tokens), sparing the keys whose DRAM copies stay. A DRAM copy
// newer than the entry (a promotion that started during the scan) gets an
// EvictionKey entry of its own.
func (s *Service) evictAllDRAM(ctx context.Context, now int64, res *masterapi.EvictDRAMResult) error {
	seq := s.rlog.add(masterapi.Removal{Kind: masterapi.EvictionEvery}, &s.tokens, now, true)
	last := seq
	var spared []string
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		sh.scanAll(s.hooks.scanYielded, func(k string, o *object) {
			if o.dram.seg == nil {
				return
			}
			newer := o.dram.token > seq
			switch {
			case !s.evictDRAMOf(o, now, res):
				spared = append(spared, k)
			case newer:
				last = s.rlog.add(masterapi.Removal{Kind: masterapi.EvictionKey, Key: k}, &s.tokens, now, false)
				s.freeze(sh, k, o, now)
			default:
				s.freeze(sh, k, o, now)
			}
		})
		sh.mu.Unlock()
	}
	slices.Sort(spared)
	if err := s.rlog.seal(seq, spared); err != nil {
		return errcode.Wrap(errcode.InternalError, err)
	}
	return s.rlog.wait(ctx, last)
}

// evictDRAMOf drops o's DRAM replica if it has a readable SSD copy and
// nothing holds it (evictable), counts the outcome in res, by reason, and
// reports whether it dropped it. Caller holds the shard lock; o has a
// DRAM replica.
func (s *Service) evictDRAMOf(o *object, now int64, res *masterapi.EvictDRAMResult) bool {
	switch {
	case !o.dram.complete:
		res.PutInProgress++
	case !o.readableDRAM():
		// A dead segment's replica: unreadable already, the sweep drops it.
	case o.hardPin:
		res.HardPinned++
	case o.offload != nil:
		res.OffloadPending++
	case !o.readableSSD():
		res.NoSSDCopy++
	case o.leaseNeedsDRAM(now):
		res.Leased++
	case !s.evictable(o, now):
		// Held for a reason this switch does not name: left in place.
	default:
		s.dropDRAM(o)
		s.cnt.evictions.Add(1)
		s.met.evictions.Inc()
		res.Dropped++
		return true
	}
	return false
}

// evictable reports whether o's complete DRAM replica may be dropped now:
// not hard-pinned, no offload task pinning it, and no lease that needs it
// (invariant 4: a lease keeps the object readable, not its DRAM replica;
// see leaseNeedsDRAM). (Soft pins only order victims.) Caller holds the
// shard lock.
func (s *Service) evictable(o *object, now int64) bool {
	return o.dram.seg != nil && o.dram.complete && !o.hardPin && o.offload == nil && !o.leaseNeedsDRAM(now)
}
