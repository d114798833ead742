package master

import (
	"context"
	"sort"

	"github.com/tierstore/tierstore/internal/codes"
)

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
	s.settleEmpty(sh, key, o, now)
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
