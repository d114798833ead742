package master

import (
	"context"

	"github.com/tierstore/tierstore/internal/errcode"
	"github.com/tierstore/tierstore/masterapi"
)

// defaultHeartbeatTasks is the task count of a Heartbeat when Max is 0;
// masterapi.MaxHeartbeatTasks caps it.
const defaultHeartbeatTasks = 1024

// maxOffloadAttempts bounds the deliveries of one offload task: a task
// answered with a retryable failure, or unanswered past
// offload_task_timeout, is queued again until it has failed this many times,
// then dropped (logged, tierstore_master_offload_abandoned_total). A
// permanent failure is never retried.
const maxOffloadAttempts = 3

// enqueue queues an offload task for o's DRAM replica on the node that
// holds it and pins the replica, as an admission decision: a new task starts
// with a fresh attempt count. It reports whether o is (now) queued; false
// when o is not offloadable or the node's mailbox is full
// (offloading_queue_limit). Caller holds the shard lock.
func (s *Service) enqueue(key string, o *object) bool {
	if o.offload != nil {
		return true // never twice
	}
	if !s.queueTask(key, o) {
		return false
	}
	o.offloadFails, o.offloadGaveUp = 0, offloadOK
	return true
}

// queueTask queues o's task without touching its attempt count. Caller holds
// the shard lock; o has no task.
func (s *Service) queueTask(key string, o *object) bool {
	src := o.dramSource()
	if src == nil {
		return false
	}
	n := src.seg.node
	if !n.box.add(key, src.len, s.cfg.OffloadingQueueLimit) {
		s.met.countErr(errcode.ErrKeysUltraLimit)
		s.log.Debug("offload queue full", "node", n.id, "limit", s.cfg.OffloadingQueueLimit)
		return false
	}
	o.offload = n
	s.cnt.offloadQueued.Add(1)
	n.wake.signal() // the queued bytes may pass the wake threshold
	return true
}

// retryTask is called after o's task ended without reaching SSD for a
// reason that may pass (retryable failure, timeout): it queues the task
// again unless it has failed maxOffloadAttempts times. Caller holds the
// shard lock; o has no task.
func (s *Service) retryTask(key string, o *object, node, why string) {
	if o.offloadFails < 255 {
		o.offloadFails++
	}
	attempts := int(o.offloadFails)
	if attempts >= maxOffloadAttempts {
		o.offloadGaveUp = offloadOutOfTries
		s.cnt.offloadAbandoned.Add(1)
		s.log.Warn("offload abandoned after repeated failures", "node", node, "key_len", len(key),
			"attempts", attempts, "last_reason", why)
		return
	}
	if !s.queueTask(key, o) {
		s.cnt.offloadAbandoned.Add(1)
		s.log.Warn("offload not re-queued (no DRAM replica or queue full)", "node", node, "attempts", attempts, "last_reason", why)
		return
	}
	s.cnt.offloadRetried.Add(1)
	s.log.Info("offload re-queued", "node", node, "attempt", attempts+1, "max_attempts", maxOffloadAttempts, "last_reason", why)
}

// requeueElsewhere queues o's offload task again after it ended with its
// source, node n's DRAM replica (n died, or that replica was dropped),
// when another node's DRAM replica can be the source and the object has
// no SSD copy yet: an attempt of the same admission (retryTask). Caller
// holds the shard lock; o has no task.
func (s *Service) requeueElsewhere(key string, o *object, n *node, why string) {
	if o.readableDRAM() && !o.readableSSD() {
		s.retryTask(key, o, n.id, why)
	}
}

// cancelTask forgets o's offload task and releases its pin. Caller holds the
// shard lock.
func (s *Service) cancelTask(key string, o *object) {
	if o.offload != nil {
		o.offload.box.drop(key)
		o.offload = nil
		s.room.signal() // the DRAM replica may be evicted now
	}
}

// dropDRAMAndTask removes o's DRAM replicas and its offload task (invariant
// 8). If the node has already fetched the task it may be copying the
// source range (its DRAM replica of o) right now, so that range is not
// freed: it becomes an orphan of the node's mailbox, freed when the node
// answers the task (a persisted answer is refused per key with code, and
// the node deletes its SSD copy), when the node dies, or when the task
// times out. The ranges of the other replicas are freed at once. Caller
// holds the shard lock.
func (s *Service) dropDRAMAndTask(key string, o *object, code errcode.Code) {
	if i := s.releaseTask(key, o, code); i >= 0 {
		src := o.dramAt(i)
		s.forgetDRAM(o, func(m *dramReplica) bool { return m == src })
		return
	}
	s.dropDRAM(o)
}

// releaseTask forgets o's offload task before its DRAM replicas go. When
// the node has fetched it, the source replica's range becomes an orphan
// (see dropDRAMAndTask) and its index is returned: the caller forgets that
// replica without freeing its range. -1 otherwise. Caller holds the shard
// lock.
func (s *Service) releaseTask(key string, o *object, code errcode.Code) int {
	n := o.offload
	if n == nil {
		return -1
	}
	o.offload = nil
	if i := o.dramOn(n); i >= 0 {
		m := o.dramAt(i)
		if m.seg.live() && n.box.orphan(key, orphan{seg: m.seg, off: m.off, len: m.len, code: code}) {
			s.log.Debug("offload source range kept until the node answers", "node", n.id, "segment", m.seg.name, "offset", m.off)
			return i
		}
	}
	n.box.drop(key)
	return -1
}

// freeOrphan releases an orphan's range.
func (s *Service) freeOrphan(o orphan) { s.freeRange(o.seg, o.off, o.len) }

// Enqueue queues an offload task for key as an admission policy would
// (operators, tests). It fails with ErrUnableOffload when offload is not
// enabled, ErrObjectNotFound when key has no
// readable DRAM replica and ErrKeysUltraLimit when the node's queue is full.
func (s *Service) Enqueue(key string) error {
	if !s.cfg.EnableOffload && s.cfg.Admission == nil {
		return errcode.Errorf(errcode.UnableOffload, "master: enqueue: enable_offload is off")
	}
	sh := s.shardOf(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	o := sh.objs[key] // a compact object has no DRAM replica
	if o == nil || !o.readableDRAM() {
		return errcode.Errorf(errcode.ObjectNotFound, "master: enqueue: no DRAM replica")
	}
	if !s.enqueue(key, o) {
		return errcode.Errorf(errcode.KeysUltraLimit, "master: enqueue: offload queue of node %q is full", dramNode(o))
	}
	return nil
}

// offloadTasks is the task part of Heartbeat: up to max (0: a default)
// queued tasks of nodeID, marked in flight; it counts as a ping.
func (s *Service) offloadTasks(ctx context.Context, nodeID string, max int) ([]masterapi.OffloadTask, error) {
	if err := s.gate(ctx); err != nil {
		return nil, err
	}
	n := s.lookupNode(nodeID)
	if n == nil {
		return nil, s.observe(errcode.Errorf(errcode.NeedRemount, "master: offload_heartbeat: unknown node %q", nodeID))
	}
	now := s.now()
	n.lastPing.Store(now)
	if max <= 0 {
		max = defaultHeartbeatTasks
	}
	if max > masterapi.MaxHeartbeatTasks {
		max = masterapi.MaxHeartbeatTasks
	}
	keys := n.box.take(max, now+s.cfg.OffloadTaskTimeout.Nanoseconds())
	tasks := make([]masterapi.OffloadTask, 0, len(keys))
	for _, k := range keys {
		sh := s.shardOf(k)
		sh.mu.Lock()
		o := sh.objs[k]
		switch {
		case o == nil || o.offload != n:
			n.box.drop(k) // the object went away or is pinned by another task
			// A forced Remove between take and here orphaned this very
			// task (take never hands out a key with an older orphan); it
			// is not delivered, so its range is free at once.
			if orph, ok := n.box.takeOrphan(k); ok {
				s.freeOrphan(orph)
			}
		case o.readableDRAMOn(n) == nil:
			s.cancelTask(k, o) // n's DRAM replica, the task's source, went
		default:
			m := o.readableDRAMOn(n)
			tasks = append(tasks, masterapi.OffloadTask{Key: k, Segment: m.seg.name, Offset: m.off,
				Length: m.len, Size: o.size, CRC: o.crc, Term: s.cfg.HA.Term})
		}
		sh.mu.Unlock()
	}
	return tasks, nil
}

// timeoutTasks handles in-flight tasks unanswered past offload_task_timeout:
// the pin is released and the task queued again (an attempt, bounded by
// maxOffloadAttempts); orphaned ranges past their deadline are freed.
func (s *Service) timeoutTasks(now int64) {
	s.nodesMu.RLock()
	nodes := make([]*node, 0, len(s.nodes))
	for _, n := range s.nodes {
		nodes = append(nodes, n)
	}
	s.nodesMu.RUnlock()
	for _, n := range nodes {
		for _, orph := range n.box.takeExpiredOrphans(now) {
			s.freeOrphan(orph)
			s.log.Warn("offload task of a removed object timed out; source range freed", "node", n.id, "timeout", s.cfg.OffloadTaskTimeout)
		}
		for _, k := range n.box.expired(now) {
			sh := s.shardOf(k)
			sh.mu.Lock()
			if o := sh.objs[k]; o != nil && o.offload == n {
				s.cancelTask(k, o)
				s.log.Warn("offload task timed out", "node", n.id, "timeout", s.cfg.OffloadTaskTimeout)
				s.retryTask(k, o, n.id, "timed out")
			} else {
				n.box.drop(k)
			}
			sh.mu.Unlock()
		}
	}
}
