package master

import (
	"iter"
	"slices"

	"github.com/tierstore/tierstore/internal/errcode"
	"github.com/tierstore/tierstore/masterapi"
)

// mems yields o's DRAM replicas with their index, the first first. The
// pointers stay valid until o's replicas change: do not add or remove
// replicas while iterating. Caller holds the shard lock.
func (o *object) mems() iter.Seq2[int, *memReplica] {
	return func(yield func(int, *memReplica) bool) {
		if o.mem.seg == nil || !yield(0, &o.mem) || o.more == nil {
			return
		}
		for i := range *o.more {
			if !yield(i+1, &(*o.more)[i]) {
				return
			}
		}
	}
}

// memCount is the number of o's DRAM replicas.
func (o *object) memCount() int {
	switch {
	case o.mem.seg == nil:
		return 0
	case o.more == nil:
		return 1
	}
	return 1 + len(*o.more)
}

// memOn returns the index of o's DRAM replica on node n, or -1.
func (o *object) memOn(n *node) int {
	for i, m := range o.mems() {
		if m.seg.node == n {
			return i
		}
	}
	return -1
}

// addMem adds m as o's next DRAM replica (the first when o has none).
func (o *object) addMem(m memReplica) {
	switch {
	case o.mem.seg == nil:
		o.mem = m
	case o.more == nil:
		o.more = &[]memReplica{m}
	default:
		*o.more = append(*o.more, m)
	}
}

// readableMemOn returns o's DRAM replica on node n when it is readable
// (complete, on a live segment), else nil.
func (o *object) readableMemOn(n *node) *memReplica {
	if i := o.memOn(n); i >= 0 {
		if m := o.memAt(i); m.complete && m.seg.live() {
			return m
		}
	}
	return nil
}

// memAt returns o's i-th DRAM replica (0 <= i < memCount).
func (o *object) memAt(i int) *memReplica {
	if i == 0 {
		return &o.mem
	}
	return &(*o.more)[i-1]
}

// removeMemAt forgets o's i-th DRAM replica from the slots (no counters,
// no free): the next one moves up, so the first stays set while any is.
func (o *object) removeMemAt(i int) {
	switch {
	case i > 0:
		*o.more = slices.Delete(*o.more, i-1, i)
	case o.more != nil:
		o.mem = (*o.more)[0]
		*o.more = slices.Delete(*o.more, 0, 1)
	default:
		o.mem = memReplica{}
	}
	if o.more != nil && len(*o.more) == 0 {
		o.more = nil
	}
}

// dropMem removes o's DRAM replicas, freeing their ranges where the
// segment is still mounted (a dead segment's allocator is discarded with
// it). Caller holds the shard lock.
func (s *Service) dropMem(o *object) { s.forgetMem(o, nil) }

// freeRange returns [off, off+n) to g's allocator when g is still mounted.
func (s *Service) freeRange(g *segment, off, n int64) {
	if g.live() {
		g.mu.Lock()
		g.alloc.Free(off, n)
		g.mu.Unlock()
		s.room.signal()
	}
}

// forgetMem removes every DRAM replica of o from the metadata and frees
// their ranges, except where kept says the caller handed the range on (to
// an orphan or a parked put); kept may be nil. Caller holds the shard lock.
func (s *Service) forgetMem(o *object, kept func(*memReplica) bool) {
	for _, m := range o.mems() {
		s.uncountMem(o, m, kept == nil || !kept(m))
	}
	o.mem, o.more = memReplica{}, nil
	o.reads = 0
}

// dropMemAt removes o's i-th DRAM replica, freeing its range. Caller holds
// the shard lock; o's offload task, if any, does not read from it (see
// dropMemReplica).
func (s *Service) dropMemAt(o *object, i int) { s.forgetMemAt(o, i, true) }

// forgetMemAt removes o's i-th DRAM replica from the metadata, freeing
// its range if free. Caller holds the shard lock.
func (s *Service) forgetMemAt(o *object, i int, free bool) {
	s.uncountMem(o, o.memAt(i), free)
	o.removeMemAt(i)
	if o.mem.seg == nil {
		o.reads = 0
	}
}

// uncountMem takes DRAM replica m of o out of the counters and frees its
// range if free. Caller holds the shard lock and forgets m.
func (s *Service) uncountMem(o *object, m *memReplica, free bool) {
	if !m.complete {
		s.processing.Add(-1)
	}
	if free {
		s.freeRange(m.seg, m.off, m.len)
	}
	s.forgetRecord(m)
	s.countMem(m.seg.node, -1, -o.size)
}

// countMem adds delta DRAM replicas of bytes bytes in all to the global
// counters and to node n's. Caller holds the object's shard lock.
func (s *Service) countMem(n *node, delta, bytes int64) {
	s.cnt.memReplicas.Add(delta)
	s.cnt.memBytes.Add(bytes)
	n.memReplicas.Add(delta)
	n.memBytes.Add(bytes)
}

// countDisk is countMem for SSD replicas; it also updates n's id's
// reconcile digest with the key's hash h (masterapi.KeyHash).
func (s *Service) countDisk(n *node, h uint64, delta, bytes int64) {
	s.cnt.diskReplicas.Add(delta)
	s.cnt.diskBytes.Add(bytes)
	n.diskReplicas.Add(delta)
	n.diskBytes.Add(bytes)
	n.dig.add(h, delta)
}

// dropAllDisk forgets every SSD replica of key's object o. Caller
// holds the shard lock.
func (s *Service) dropAllDisk(key string, o *object) {
	if len(o.disk) == 0 {
		return
	}
	h := masterapi.KeyHash(key)
	for _, d := range o.disk {
		s.countDisk(d.node, h, -1, -o.size)
	}
	o.disk = nil
}

// deleteObj removes o from its shard, dropping its replicas and its offload
// task (a fetched task's source range stays allocated until the node
// answers, see dropMemAndTask; the range of a put in progress stays
// allocated until the put ends, see park). Caller holds the shard lock.
func (s *Service) deleteObj(sh *shard, key string, o *object) {
	if s.park(key, o) {
		s.forgetMem(o, keepAll) // a put in progress: its ranges are parked
	} else {
		s.dropMemAndTask(key, o, errcode.ObjectNotFound)
	}
	s.dropAllDisk(key, o)
	delete(sh.objs, key)
	s.cnt.objects.Add(-1)
}

// settleEmpty ends o once it holds no replica at all (every removal path
// that drops a replica calls it): an unleased object is deleted now; a
// leased one keeps its metadata, so that lookups answer REPLICA_IS_GONE
// (-712) and never OBJECT_NOT_FOUND inside the lease (Mooncake #4508,
// invariant 4), until the sweep after its lease deletes it. Caller holds
// the shard lock.
func (s *Service) settleEmpty(sh *shard, key string, o *object, now int64) {
	if !o.empty() {
		return
	}
	if o.leased(now) {
		s.sweepDirty.Store(true)
		return
	}
	s.deleteObj(sh, key, o)
}
