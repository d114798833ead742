package master

import (
	"github.com/tierstore/tierstore/internal/codes"
	"github.com/tierstore/tierstore/masterapi"
)

// dropMem removes o's DRAM replica, freeing its range when the segment is
// still mounted (a dead segment's allocator is discarded with it). Caller
// holds the shard lock.
func (s *Service) dropMem(o *object) { s.forgetMem(o, true) }

// freeRange returns [off, off+n) to g's allocator when g is still mounted.
func (s *Service) freeRange(g *segment, off, n int64) {
	if g.live() {
		g.mu.Lock()
		g.alloc.Free(off, n)
		g.mu.Unlock()
		s.room.signal()
	}
}

// forgetMem removes o's DRAM replica from the metadata and frees its range
// if free is set (otherwise the caller handed the range to an orphan).
// Caller holds the shard lock.
func (s *Service) forgetMem(o *object, free bool) {
	m := &o.mem
	if m.seg == nil {
		return
	}
	if !m.complete {
		s.processing.Add(-1)
	}
	if free {
		s.freeRange(m.seg, m.off, m.len)
	}
	s.forgetRecord(m)
	s.countMem(m.seg.node, -1, -o.size)
	o.mem = memReplica{}
	o.reads = 0
}

// countMem adds delta Memory replicas of bytes bytes in all to the global
// counters and to node n's. Caller holds the object's shard lock.
func (s *Service) countMem(n *node, delta, bytes int64) {
	s.cnt.memReplicas.Add(delta)
	s.cnt.memBytes.Add(bytes)
	n.memReplicas.Add(delta)
	n.memBytes.Add(bytes)
}

// countDisk is countMem for LocalDisk replicas; it also updates n's id's
// reconcile digest with the key's hash h (masterapi.KeyHash).
func (s *Service) countDisk(n *node, h uint64, delta, bytes int64) {
	s.cnt.diskReplicas.Add(delta)
	s.cnt.diskBytes.Add(bytes)
	n.diskReplicas.Add(delta)
	n.diskBytes.Add(bytes)
	n.dig.add(h, delta)
}

// dropAllDisk forgets every LocalDisk replica of key's object o. Caller
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
		s.forgetMem(o, false) // a put in progress: its range is parked
	} else {
		s.dropMemAndTask(key, o, codes.ObjectNotFound)
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
