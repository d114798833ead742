package master

import (
	"context"

	"github.com/tierstore/tierstore/internal/codes"
)

// defaultHeartbeatTasks is the task count of OffloadHeartbeat when max is 0;
// maxHeartbeatTasks caps it.
const (
	defaultHeartbeatTasks = 1024
	maxHeartbeatTasks     = 16384
)

// enqueue queues an offload task for o's DRAM replica on the node that
// holds it and pins the replica. It reports whether o is (now) queued; false
// when o is not offloadable or the node's mailbox is full
// (offloading_queue_limit). Caller holds the shard lock.
func (s *Service) enqueue(key string, o *object) bool {
	if o.offload != nil {
		return true // never twice
	}
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

// cancelTask forgets o's offload task and releases its pin. Caller holds the
// shard lock.
func (s *Service) cancelTask(key string, o *object) {
	if o.offload != nil {
		o.offload.box.drop(key)
		o.offload = nil
	}
}

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
		out[i] = s.observe(s.registerDisk(n, d))
	}
	for _, f := range req.Failed {
		if validKey(f.Key) != nil {
			continue
		}
		sh := s.shardOf(f.Key)
		sh.mu.Lock()
		if o := sh.objs[f.Key]; o != nil && o.offload == n {
			s.cancelTask(f.Key, o)
		} else {
			n.box.drop(f.Key)
		}
		sh.mu.Unlock()
		s.cnt.offloadFailed.Add(1)
		s.met.offloadFailed.Inc()
		s.log.Debug("offload failed", "node", n.id, "retryable", f.Retryable, "reason", f.Reason)
	}
	return out, nil
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
		out[i] = s.observe(s.registerDisk(n, d))
	}
	return out, nil
}

// registerDisk records that n holds d on its SSD: a new object when the key
// is unknown, else a new or refreshed LocalDisk replica (one per node id). A
// task of n for the key is answered and its pin released.
func (s *Service) registerDisk(n *node, d DiskObject) error {
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
	if o == nil {
		sh.objs[d.Key] = &object{size: d.Size, crc: d.CRC, disk: []diskReplica{{node: n}}}
		s.cnt.objects.Add(1)
		s.cnt.diskReplicas.Add(1)
		s.cnt.diskBytes.Add(d.Size)
		return nil
	}
	if o.offload == n {
		s.cancelTask(d.Key, o)
		s.cnt.offloadPersisted.Add(1)
		s.met.offloadPersisted.Inc()
	}
	if o.size != d.Size || o.crc != d.CRC {
		return codes.Errorf(codes.ChecksumConflict, "master: node %q reports size %d crc %08x, metadata has size %d crc %08x",
			n.id, d.Size, d.CRC, o.size, o.crc)
	}
	if i := o.diskIndex(n.id); i >= 0 {
		o.disk[i] = diskReplica{node: n} // refresh (the node may be a new incarnation)
	} else {
		o.disk = append(o.disk, diskReplica{node: n})
		s.cnt.diskReplicas.Add(1)
		s.cnt.diskBytes.Add(o.size)
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
	o.disk = append(o.disk[:i], o.disk[i+1:]...)
	s.cnt.diskReplicas.Add(-1)
	s.cnt.diskBytes.Add(-o.size)
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

// EvictDiskReplica implements API.
func (s *Service) EvictDiskReplica(ctx context.Context, nodeID string, keys []string) (int64, error) {
	if err := s.check(ctx); err != nil {
		return 0, err
	}
	now := s.now()
	var n int64
	for _, k := range keys {
		if err := validKey(k); err != nil {
			return n, s.observe(err)
		}
		sh := s.shardOf(k)
		sh.mu.Lock()
		if o := sh.objs[k]; o != nil && s.dropDisk(sh, k, o, nodeID, now) {
			n++
		}
		sh.mu.Unlock()
	}
	return n, nil
}

// ReconcileDiskObjects implements API.
func (s *Service) ReconcileDiskObjects(ctx context.Context, nodeID string, keys []string) (int64, error) {
	if err := s.check(ctx); err != nil {
		return 0, err
	}
	if nodeID == "" {
		return 0, s.observe(codes.Errorf(codes.InvalidParams, "master: reconcile: empty node id"))
	}
	held := make(map[string]struct{}, len(keys))
	for _, k := range keys {
		held[k] = struct{}{}
	}
	now := s.now()
	var n int64
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
				n++
			}
		}
		sh.mu.Unlock()
	}
	if n > 0 {
		s.log.Info("reconcile dropped disk replicas", "node", nodeID, "dropped", n, "held", len(keys))
	}
	return n, nil
}

// timeoutTasks drops in-flight tasks unanswered past offload_task_timeout
// and releases their pins.
func (s *Service) timeoutTasks(now int64) {
	s.nodesMu.RLock()
	nodes := make([]*node, 0, len(s.nodes))
	for _, n := range s.nodes {
		nodes = append(nodes, n)
	}
	s.nodesMu.RUnlock()
	for _, n := range nodes {
		for _, k := range n.box.expired(now) {
			sh := s.shardOf(k)
			sh.mu.Lock()
			if o := sh.objs[k]; o != nil && o.offload == n {
				s.cancelTask(k, o)
			} else {
				n.box.drop(k)
			}
			sh.mu.Unlock()
			s.log.Warn("offload task timed out", "node", n.id, "timeout", s.cfg.OffloadTaskTimeout)
		}
	}
}
