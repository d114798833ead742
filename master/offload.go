package master

import (
	"context"
	"sort"

	"github.com/tierstore/tierstore/internal/codes"
)

// defaultHeartbeatTasks is the task count of OffloadHeartbeat when max is 0;
// maxHeartbeatTasks caps it.
const (
	defaultHeartbeatTasks = 1024
	maxHeartbeatTasks     = 16384
)

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
	o.offloadFails = 0
	return true
}

// queueTask queues o's task without touching its attempt count. Caller holds
// the shard lock; o has no task.
func (s *Service) queueTask(key string, o *object) bool {
	if !o.readableMem() {
		return false
	}
	n := o.mem.seg.node
	if !n.box.add(key, s.cfg.OffloadingQueueLimit) {
		s.met.countErr(codes.ErrKeysUltraLimit)
		s.log.Debug("offload queue full", "node", n.id, "limit", s.cfg.OffloadingQueueLimit)
		return false
	}
	o.offload = n
	s.cnt.offloadQueued.Add(1)
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

// cancelTask forgets o's offload task and releases its pin. Caller holds the
// shard lock.
func (s *Service) cancelTask(key string, o *object) {
	if o.offload != nil {
		o.offload.box.drop(key)
		o.offload = nil
	}
}

// dropMemAndTask removes o's DRAM replica and its offload task (gap 1). If
// the node has already fetched the task it may be copying the source range
// right now, so the range is not freed: it becomes an orphan of the node's
// mailbox, freed when the node answers the task (a persisted answer is
// refused per key with code, and the node deletes its SSD copy), when the
// node dies, or when the task times out. Caller holds the shard lock.
func (s *Service) dropMemAndTask(key string, o *object, code codes.Code) {
	n := o.offload
	if n == nil {
		s.dropMem(o)
		return
	}
	o.offload = nil
	m := o.mem
	if m.seg != nil && m.seg.node == n && m.seg.live() &&
		n.box.orphan(key, orphan{seg: m.seg, off: m.off, len: m.len, code: code}) {
		s.forgetMem(o, false)
		s.log.Debug("offload source range kept until the node answers", "node", n.id, "segment", m.seg.name, "offset", m.off)
		return
	}
	n.box.drop(key)
	s.dropMem(o)
}

// freeOrphan releases an orphan's range.
func freeOrphan(o orphan) { freeRange(o.seg, o.off, o.len) }

// Enqueue queues an offload task for key as an admission policy would
// (operators, tests). It fails with ErrUnableOffload when offload is not
// enabled, ErrObjectNotFound when key has no
// readable DRAM replica and ErrKeysUltraLimit when the node's queue is full.
func (s *Service) Enqueue(key string) error {
	if !s.cfg.EnableOffload && s.cfg.Admission == nil {
		return codes.Errorf(codes.UnableOffload, "master: enqueue: enable_offload is off")
	}
	sh := s.shardOf(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	o := sh.objs[key]
	if o == nil || !o.readableMem() {
		return codes.Errorf(codes.ObjectNotFound, "master: enqueue: no DRAM replica")
	}
	if !s.enqueue(key, o) {
		return codes.Errorf(codes.KeysUltraLimit, "master: enqueue: offload queue of node %q is full", o.mem.seg.node.id)
	}
	return nil
}

// OffloadHeartbeat implements API.
func (s *Service) OffloadHeartbeat(ctx context.Context, nodeID string, max int) ([]OffloadTask, error) {
	if err := s.check(ctx); err != nil {
		return nil, err
	}
	n := s.lookupNode(nodeID)
	if n == nil {
		return nil, s.observe(codes.Errorf(codes.NeedRemount, "master: offload_heartbeat: unknown node %q", nodeID))
	}
	now := s.now()
	n.lastPing.Store(now)
	if max <= 0 {
		max = defaultHeartbeatTasks
	}
	if max > maxHeartbeatTasks {
		max = maxHeartbeatTasks
	}
	keys := n.box.take(max, now+s.cfg.OffloadTaskTimeout.Nanoseconds())
	tasks := make([]OffloadTask, 0, len(keys))
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
				freeOrphan(orph)
			}
		case !o.readableMem() || o.mem.seg.node != n:
			s.cancelTask(k, o)
		default:
			tasks = append(tasks, OffloadTask{Key: k, Segment: o.mem.seg.name, Offset: o.mem.off,
				Length: o.mem.len, Size: o.size, CRC: o.crc})
		}
		sh.mu.Unlock()
	}
	return tasks, nil
}

// NotifyOffloadSuccess implements API.
func (s *Service) NotifyOffloadSuccess(ctx context.Context, req NotifyRequest) ([]error, error) {
	if err := s.check(ctx); err != nil {
		return nil, err
	}
	n := s.lookupNode(req.Node)
	if n == nil {
		return nil, s.observe(codes.Errorf(codes.NeedRemount, "master: notify_offload_success: unknown node %q", req.Node))
	}
	n.lastPing.Store(s.now())
	out := make([]error, len(req.Persisted))
	for i, d := range req.Persisted {
		out[i] = s.observe(s.answerPersisted(n, d))
	}
	for _, f := range req.Failed {
		if validKey(f.Key) != nil {
			continue
		}
		s.cnt.offloadFailed.Add(1)
		s.met.offloadFailed.Inc()
		orph, orphaned := n.box.takeOrphan(f.Key)
		if orphaned {
			freeOrphan(orph) // the object went away during the task
		}
		sh := s.shardOf(f.Key)
		sh.mu.Lock()
		o := sh.objs[f.Key]
		switch {
		case orphaned:
		case o == nil || o.offload != n:
			n.box.drop(f.Key)
		case !n.box.inFlight(f.Key):
			// Queued anew since (the key was removed and put again): the
			// answer is about the older task, which is already settled.
		default:
			s.cancelTask(f.Key, o)
			if f.Retryable {
				s.retryTask(f.Key, o, n.id, f.Reason)
			} else {
				s.log.Info("offload failed permanently; not retried", "node", n.id, "reason", f.Reason)
			}
		}
		// A failure says the key is not on n's SSD, whatever the task's
		// state: the node's word about its own SSD is authoritative. A
		// LocalDisk replica of n recorded earlier (a persisted notify the
		// master applied but whose reply the node never got, so the node
		// rolled the bucket back) is a phantom and goes, with the usual
		// lease rule for the object's metadata.
		if o != nil && s.dropDisk(sh, f.Key, o, n.id, s.now()) {
			s.log.Warn("LOCAL_DISK replica dropped: its node answered the key failed (not on its SSD)",
				"node", n.id, "reason", f.Reason)
			// The persisted answer had settled the task; the copy it
			// announced is gone, so a retryable failure is an attempt
			// of that task like any other.
			if f.Retryable && o.offload == nil && sh.objs[f.Key] == o {
				s.retryTask(f.Key, o, n.id, f.Reason)
			}
		}
		sh.mu.Unlock()
	}
	return out, nil
}

// answerPersisted records one Persisted item of a notify. The key must have
// a task of n or an object: a key whose object was removed while n offloaded
// it (an orphan) or that the master does not know is refused per key with
// OBJECT_NOT_FOUND (the node deletes its SSD copy); only
// ReRegisterDiskObjects creates objects (gap 2: a notify must not resurrect
// a removed key).
func (s *Service) answerPersisted(n *node, d DiskObject) error {
	if err := validKey(d.Key); err != nil {
		return err
	}
	if orph, ok := n.box.takeOrphan(d.Key); ok {
		freeOrphan(orph)
		return codes.Errorf(orph.code, "master: notify: the object was removed while node %q offloaded it; delete the SSD copy", n.id)
	}
	return s.registerDisk(n, d, false)
}

// ReRegisterDiskObjects implements API.
func (s *Service) ReRegisterDiskObjects(ctx context.Context, nodeID string, objs []DiskObject) ([]error, error) {
	if err := s.check(ctx); err != nil {
		return nil, err
	}
	n := s.lookupNode(nodeID)
	if n == nil {
		return nil, s.observe(codes.Errorf(codes.NeedRemount, "master: re_register: unknown node %q", nodeID))
	}
	n.lastPing.Store(s.now())
	out := make([]error, len(objs))
	for i, d := range objs {
		out[i] = s.observe(s.registerDisk(n, d, true))
	}
	return out, nil
}

// registerDisk records that n holds d on its SSD: a new object when the key
// is unknown and create is set (re-registration), else a new or refreshed
// LocalDisk replica (one per node id). A task of n for the key is answered
// and its pin released. Without create an unknown key is OBJECT_NOT_FOUND.
func (s *Service) registerDisk(n *node, d DiskObject, create bool) error {
	if err := validKey(d.Key); err != nil {
		return err
	}
	if d.Size <= 0 {
		return codes.Errorf(codes.InvalidParams, "master: register disk object: size must be > 0, got %d", d.Size)
	}
	sh := s.shardOf(d.Key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	o := sh.objs[d.Key]
	if o == nil && !create {
		return codes.Errorf(codes.ObjectNotFound, "master: notify: node %q persisted a key the master does not know (removed?); delete the SSD copy", n.id)
	}
	if o == nil {
		sh.objs[d.Key] = &object{size: d.Size, crc: d.CRC, disk: []diskReplica{{node: n}}}
		s.cnt.objects.Add(1)
		s.countDisk(n, 1, d.Size)
		return nil
	}
	if o.offload == n {
		s.cancelTask(d.Key, o)
		o.offloadFails = 0
		s.cnt.offloadPersisted.Add(1)
		s.met.offloadPersisted.Inc()
	}
	if o.size != d.Size || o.crc != d.CRC {
		return codes.Errorf(codes.ChecksumConflict, "master: node %q reports size %d crc %08x, metadata has size %d crc %08x",
			n.id, d.Size, d.CRC, o.size, o.crc)
	}
	if i := o.diskIndex(n.id); i >= 0 {
		if old := o.disk[i].node; old != n { // refresh: a new incarnation
			s.countDisk(old, -1, -o.size)
			s.countDisk(n, 1, o.size)
		}
		o.disk[i] = diskReplica{node: n}
	} else {
		o.disk = append(o.disk, diskReplica{node: n})
		s.countDisk(n, 1, o.size)
	}
	o.gone = false
	return nil
}

// dropDisk removes node id's LocalDisk replica from o; an object left
// without replicas is removed, or kept as "gone" until its lease expires.
// Caller holds the shard lock. Reports whether a replica was removed.
func (s *Service) dropDisk(sh *shard, key string, o *object, id string, now int64) bool {
	i := o.diskIndex(id)
	if i < 0 {
		return false
	}
	s.countDisk(o.disk[i].node, -1, -o.size)
	o.disk = append(o.disk[:i], o.disk[i+1:]...)
	if o.empty() {
		if o.leased(now) {
			o.gone = true
			s.sweepDirty.Store(true)
		} else {
			s.deleteObj(sh, key, o)
		}
	}
	return true
}

// EvictDiskReplica implements API. The call is all-or-nothing (invariant
// 4): if any key has an active read lease and node's LocalDisk replica is
// its only readable replica, nothing is dropped and the answer is
// ErrObjectHasLease; the node keeps the bucket and tries another. The shard
// locks of all keys are held, in shard order, across the check and the
// drops, so a lease granted meanwhile cannot slip between them.
func (s *Service) EvictDiskReplica(ctx context.Context, nodeID string, keys []string) (int64, error) {
	if err := s.check(ctx); err != nil {
		return 0, err
	}
	for _, k := range keys {
		if err := validKey(k); err != nil {
			return 0, s.observe(err)
		}
	}
	shards := make([]int, 0, len(keys))
	seen := make(map[int]struct{}, len(keys))
	for _, k := range keys {
		i := s.shardIndex(k)
		if _, ok := seen[i]; !ok {
			seen[i] = struct{}{}
			shards = append(shards, i)
		}
	}
	sort.Ints(shards)
	for _, i := range shards {
		s.shards[i].mu.Lock()
	}
	defer func() {
		for _, i := range shards {
			s.shards[i].mu.Unlock()
		}
	}()
	now := s.now()
	for _, k := range keys {
		o := s.shardOf(k).objs[k]
		if o != nil && o.leased(now) && o.onlyReadableOn(nodeID) {
			return 0, s.observe(codes.Errorf(codes.ObjectHasLease,
				"master: evict_disk_replica: a key of the %d is leased and node %q holds its only readable replica; nothing dropped", len(keys), nodeID))
		}
	}
	var n int64
	for _, k := range keys {
		sh := s.shardOf(k)
		if o := sh.objs[k]; o != nil && s.dropDisk(sh, k, o, nodeID, now) {
			n++
		}
	}
	s.observeDiskEviction(keys)
	return n, nil
}

// ReconcileDiskObjects implements API.
func (s *Service) ReconcileDiskObjects(ctx context.Context, nodeID string, keys []string) (ReconcileResult, error) {
	if err := s.check(ctx); err != nil {
		return ReconcileResult{}, err
	}
	if nodeID == "" {
		return ReconcileResult{}, s.observe(codes.Errorf(codes.InvalidParams, "master: reconcile: empty node id"))
	}
	// An unknown node (master restarted, node expired) has not
	// re-registered: every key would look unwanted. It must remount and
	// re-register first.
	nd := s.lookupNode(nodeID)
	if nd == nil {
		return ReconcileResult{}, s.observe(codes.Errorf(codes.NeedRemount, "master: reconcile: unknown node %q", nodeID))
	}
	held := make(map[string]struct{}, len(keys))
	var res ReconcileResult
	for _, k := range keys {
		if _, dup := held[k]; dup {
			continue
		}
		held[k] = struct{}{}
		if validKey(k) != nil {
			continue
		}
		sh := s.shardOf(k)
		sh.mu.Lock()
		o := sh.objs[k]
		// Unwanted: no object (never known, or removed), or an object
		// that lists no replica of this node and has no task of it (the
		// replica was dropped, or the key was removed and put again).
		if o == nil || (o.diskIndex(nodeID) < 0 && o.offload != nd) {
			res.Unwanted = append(res.Unwanted, k)
		}
		sh.mu.Unlock()
	}
	now := s.now()
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		for k, o := range sh.objs {
			if len(o.disk) == 0 {
				continue
			}
			if _, ok := held[k]; ok {
				continue
			}
			if s.dropDisk(sh, k, o, nodeID, now) {
				res.Dropped++
			}
		}
		sh.mu.Unlock()
	}
	if res.Dropped > 0 || len(res.Unwanted) > 0 {
		s.log.Info("reconcile", "node", nodeID, "dropped", res.Dropped, "unwanted", len(res.Unwanted), "held", len(keys))
	}
	return res, nil
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
			freeOrphan(orph)
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
