package master

import "github.com/tierstore/tierstore/masterapi"

// sweep is the lease-aware stale-handle sweep (Mooncake #4508, invariant 4): replicas that
// became unreadable (segment unmounted, node expired) are removed only once
// the object's lease has expired; an object left without replicas is removed
// only then too. Abandoned puts (PROCESSING longer than
// put_start_discard_timeout) are reclaimed. Offload pins held by dead nodes
// are released.
func (s *Service) sweep(now int64) {
	left := false
	discard := s.cfg.PutStartDiscardTimeout.Nanoseconds()
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		for key, o := range sh.objs {
			if o.offload != nil && o.offload.dead.Load() {
				o.offload = nil // the dead node's mailbox went with it
			}
			if o.mem.seg != nil && !o.mem.complete && o.mem.seg.live() && now-o.putStart > discard {
				s.log.Debug("reclaiming abandoned put", "key_len", len(key), "node", o.mem.seg.node.id)
				s.dropMem(o)
			}
			if !s.clearDead(key, o, now) {
				left = true
			}
			if o.empty() && !o.leased(now) {
				s.deleteObj(sh, key, o)
			} else if o.empty() {
				left = true
			}
		}
		sh.mu.Unlock()
	}
	if !left {
		s.sweepDirty.Store(false)
	}
}

// clearDead drops o's unreadable replicas if o's lease has expired; it
// reports false when dead replicas remain (kept for the lease). Caller holds
// the shard lock.
func (s *Service) clearDead(key string, o *object, now int64) bool {
	deadMem := o.mem.seg != nil && !o.mem.seg.live()
	deadDisk := false
	for _, d := range o.disk {
		if d.node.dead.Load() {
			deadDisk = true
			break
		}
	}
	if !deadMem && !deadDisk {
		return true
	}
	if o.leased(now) {
		return false
	}
	if deadMem {
		s.dropMem(o)
	}
	if deadDisk {
		kept := o.disk[:0]
		for _, d := range o.disk {
			if d.node.dead.Load() {
				s.countDisk(d.node, masterapi.KeyHash(key), -1, -o.size)
				continue
			}
			kept = append(kept, d)
		}
		o.disk = kept
	}
	return true
}
