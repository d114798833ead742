package master

import (
	"iter"
	"slices"

	"github.com/tierstore/tierstore/internal/errcode"
	"github.com/tierstore/tierstore/masterapi"
)

// drams yields o's DRAM replicas with their index, the first first. The
// pointers stay valid until o's replicas change: do not add or remove
// replicas while iterating. Caller holds the shard lock.
func (o *object) drams() iter.Seq2[int, *dramReplica] {
	return func(yield func(int, *dramReplica) bool) {
		if o.dram.seg == nil || !yield(0, &o.dram) || o.more == nil {
			return
		}
		for i := range *o.more {
			if !yield(i+1, &(*o.more)[i]) {
				return
			}
		}
	}
}

// dramCount is the number of o's DRAM replicas.
func (o *object) dramCount() int {
	switch {
	case o.dram.seg == nil:
		return 0
	case o.more == nil:
		return 1
	}
	return 1 + len(*o.more)
}

// dramOn returns the index of o's DRAM replica on node n, or -1.
func (o *object) dramOn(n *node) int {
	for i, m := range o.drams() {
		if m.seg.node == n {
			return i
		}
	}
	return -1
}

// addDRAM adds m as o's next DRAM replica (the first when o has none).
func (o *object) addDRAM(m dramReplica) {
	switch {
	case o.dram.seg == nil:
		o.dram = m
	case o.more == nil:
		o.more = &[]dramReplica{m}
	default:
		*o.more = append(*o.more, m)
	}
}

// readableDRAMOn returns o's DRAM replica on node n when it is readable
// (complete, on a live segment), else nil.
func (o *object) readableDRAMOn(n *node) *dramReplica {
	if i := o.dramOn(n); i >= 0 {
		if m := o.dramAt(i); m.complete && m.seg.live() {
			return m
		}
	}
	return nil
}

// dramAt returns o's i-th DRAM replica (0 <= i < dramCount).
func (o *object) dramAt(i int) *dramReplica {
	if i == 0 {
		return &o.dram
	}
	return &(*o.more)[i-1]
}

// removeDRAMAt forgets o's i-th DRAM replica from the slots (no counters,
// no free): the next one moves up, so the first stays set while any is.
func (o *object) removeDRAMAt(i int) {
	switch {
	case i > 0:
		*o.more = slices.Delete(*o.more, i-1, i)
	case o.more != nil:
		o.dram = (*o.more)[0]
		*o.more = slices.Delete(*o.more, 0, 1)
	default:
		o.dram = dramReplica{}
	}
	if o.more != nil && len(*o.more) == 0 {
		o.more = nil
	}
}

// dropDRAM removes o's DRAM replicas, freeing their ranges where the
// segment is still mounted (a dead segment's allocator is discarded with
// it). Caller holds the shard lock.
func (s *Service) dropDRAM(o *object) { s.forgetDRAM(o, nil) }

// freeRange returns [off, off+n) to g's allocator when g is still mounted.
func (s *Service) freeRange(g *segment, off, n int64) {
	if g.live() {
		g.mu.Lock()
		g.alloc.Free(off, n)
		g.mu.Unlock()
		s.room.signal()
	}
}

// forgetDRAM removes every DRAM replica of o from the metadata and frees
// their ranges, except where kept says the caller handed the range on (to
// an orphan or a parked put); kept may be nil. Caller holds the shard lock.
func (s *Service) forgetDRAM(o *object, kept func(*dramReplica) bool) {
	for _, m := range o.drams() {
		s.uncountDRAM(o, m, kept == nil || !kept(m))
	}
	o.dram, o.more = dramReplica{}, nil
	o.reads = 0
}

// dropDRAMAt removes o's i-th DRAM replica, freeing its range. Caller holds
// the shard lock; o's offload task, if any, does not read from it (see
// dropDRAMReplica).
func (s *Service) dropDRAMAt(o *object, i int) { s.forgetDRAMAt(o, i, true) }

// forgetDRAMAt removes o's i-th DRAM replica from the metadata, freeing
// its range if free. Caller holds the shard lock.
func (s *Service) forgetDRAMAt(o *object, i int, free bool) {
	s.uncountDRAM(o, o.dramAt(i), free)
	o.removeDRAMAt(i)
	if o.dram.seg == nil {
		o.reads = 0
	}
}

// uncountDRAM takes DRAM replica m of o out of the counters and frees its
// range if free. Caller holds the shard lock and forgets m.
func (s *Service) uncountDRAM(o *object, m *dramReplica, free bool) {
	if !m.complete {
		s.processing.Add(-1)
	}
	if free {
		s.freeRange(m.seg, m.off, m.len)
	}
	s.forgetRecord(m)
	s.countDRAM(m.seg.node, -1, -o.size)
}

// countDRAM adds delta DRAM replicas of bytes bytes in all to the global
// counters and to node n's. Caller holds the object's shard lock.
func (s *Service) countDRAM(n *node, delta, bytes int64) {
	s.cnt.dramReplicas.Add(delta)
	s.cnt.dramBytes.Add(bytes)
	n.dramReplicas.Add(delta)
	n.dramBytes.Add(bytes)
}

// countSSD is countDRAM for SSD replicas; it also updates n's id's
// reconcile digest with the key's hash h (masterapi.KeyHash).
func (s *Service) countSSD(n *node, h uint64, delta, bytes int64) {
	s.cnt.ssdReplicas.Add(delta)
	s.cnt.ssdBytes.Add(bytes)
	n.ssdReplicas.Add(delta)
	n.ssdBytes.Add(bytes)
	n.dig.add(h, delta)
}

// dropAllSSD forgets every SSD replica of key's object o. Caller
// holds the shard lock.
func (s *Service) dropAllSSD(key string, o *object) {
	if len(o.ssd) == 0 {
		return
	}
	h := masterapi.KeyHash(key)
	for _, d := range o.ssd {
		s.countSSD(d.node, h, -1, -o.size)
	}
	o.ssd = nil
}

// deleteObj removes o from its shard, dropping its replicas and its offload
// task (a fetched task's source range stays allocated until the node
// answers, see dropDRAMAndTask; the range of a put in progress stays
// allocated until the put ends, see park). Caller holds the shard lock.
func (s *Service) deleteObj(sh *shard, key string, o *object) {
	if s.park(key, o) {
		s.forgetDRAM(o, keepAll) // a put in progress: its ranges are parked
	} else {
		s.dropDRAMAndTask(key, o, errcode.ObjectNotFound)
	}
	s.dropAllSSD(key, o)
	delete(sh.objs, key)
	s.cnt.objects.Add(-1)
}

// settleEmpty ends o once it holds no replica at all (every removal path
// that drops a replica calls it): an unleased object is deleted now; a
// leased one keeps its metadata, so that lookups answer REPLICA_IS_GONE
// (-712) and never OBJECT_NOT_FOUND inside the lease (Mooncake #4508,
// invariant 4), until the first tick after its lease deletes it
// (shard.held, settleHeld). Caller holds the shard lock.
func (s *Service) settleEmpty(sh *shard, key string, o *object, now int64) {
	if !o.empty() {
		return
	}
	if o.leased(now) {
		s.hold(sh, key, o)
		return
	}
	s.deleteObj(sh, key, o)
}

// hold keeps o, objs[key], in its shard's held set for settleHeld to
// revisit. Caller holds the shard lock.
func (s *Service) hold(sh *shard, key string, o *object) {
	if sh.held == nil {
		sh.held = map[string]*object{}
	}
	sh.held[key] = o
	s.sets.held.add(int(sh.i))
	s.heldPending.Store(true)
}

// settleHeld revisits the objects of the held sets, in the shards whose
// held set may be non-empty (shardSets.held): the replicas they
// keep on a dead node or segment are dropped once their lease (or put)
// allows it (clearDead), an object without a replica is deleted once its
// lease has ended, and the entries of objects that left or are settled go.
// heldPending is cleared before the walk, so an object held during it is
// visited by the next one.
func (s *Service) settleHeld(now int64) {
	s.heldPending.Store(false)
	left := false
	s.sets.held.each(func(i int) {
		sh := &s.shards[i]
		sh.mu.Lock()
		s.scanVisits.Add(int64(len(sh.held)))
		for key, o := range sh.held {
			if sh.objs[key] != o {
				delete(sh.held, key)
				continue
			}
			if !s.clearDead(key, o, now) || o.empty() && o.leased(now) {
				left = true
				continue
			}
			delete(sh.held, key)
			if o.empty() {
				s.deleteObj(sh, key, o)
			}
		}
		if len(sh.held) == 0 {
			s.sets.held.remove(i)
		}
		sh.mu.Unlock()
	})
	if left {
		s.heldPending.Store(true)
	}
}
