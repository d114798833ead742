package master

import (
	"context"

	"github.com/tierstore/tierstore/masterapi"
)

// dropSSD removes node id's SSD replica from o; an object left
// without replicas is removed, or kept as "gone" until its lease expires.
// Caller holds the shard lock. Reports whether a replica was removed.
func (s *Service) dropSSD(sh *shard, key string, o *object, id string, now int64) bool {
	i := o.ssdIndex(id)
	if i < 0 {
		return false
	}
	s.abandonPromotion(key, o, id) // its source goes
	s.countSSD(o.ssd[i].node, masterapi.KeyHash(key), -1, -o.size)
	o.ssd = append(o.ssd[:i], o.ssd[i+1:]...)
	if o.leased(now) {
		// Readers of the lease may have been given this replica: from now
		// on they depend on the others, DRAM included (invariant 4).
		o.dramLeaseUntil = max(o.dramLeaseUntil, o.leaseUntil)
	}
	s.settleEmpty(sh, key, o, now)
	return true
}

// EvictSSDReplica implements API. Each key is decided on its own, under
// its shard lock (invariant 4): node's SSD replica goes, unless the
// key's lease is active and that replica is its only readable one; then it
// stays and the key is answered in Keep, for the node to keep readable.
// The lease protects readability, never the bucket: the node's SSD keeps
// admitting whatever the readers do.
func (s *Service) EvictSSDReplica(ctx context.Context, nodeID string, keys []string) (masterapi.EvictResult, error) {
	if err := s.gate(ctx); err != nil {
		return masterapi.EvictResult{}, err
	}
	for _, k := range keys {
		if err := validKey(k); err != nil {
			return masterapi.EvictResult{}, s.observe(err)
		}
	}
	var res masterapi.EvictResult
	var kept map[string]struct{} // Keep's keys, once each
	for _, k := range keys {
		sh := s.shardOf(k)
		sh.mu.Lock()
		now := s.now()
		o, r := s.lookup(sh, k)
		if r >= 0 {
			// A leased record whose one replica is this node's stays
			// as it is (kept, below); any other is thawed to go as an
			// *object would.
			if x := s.cst.rec(r); !s.recLeased(x, now) || s.incAt(x.node).id != nodeID || s.incAt(x.node).dead.Load() {
				o = s.thaw(sh, r)
			}
		}
		switch {
		case o == nil && r < 0:
		case o == nil || o.leased(now) && o.onlyReadableOn(nodeID): // (o nil: the leased record)
			if _, dup := kept[k]; !dup {
				if kept == nil {
					kept = map[string]struct{}{}
				}
				kept[k] = struct{}{}
				res.Keep = append(res.Keep, k)
			}
		case s.dropSSD(sh, k, o, nodeID, now):
			res.Dropped++
		}
		sh.mu.Unlock()
	}
	if len(res.Keep) > 0 {
		s.log.Info("SSD eviction: leased keys kept readable on the node", "node", nodeID, "dropped", res.Dropped, "keep", len(res.Keep))
	}
	s.observeSSDEviction(keysLeaving(keys, kept))
	return res, nil
}

// keysLeaving is keys without those the node keeps (re-inserts).
func keysLeaving(keys []string, kept map[string]struct{}) []string {
	if len(kept) == 0 {
		return keys
	}
	out := make([]string, 0, len(keys))
	for _, k := range keys {
		if _, ok := kept[k]; !ok {
			out = append(out, k)
		}
	}
	return out
}
