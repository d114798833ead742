package master

import "github.com/tierstore/tierstore/masterapi"

// sweep is the lease-aware stale-handle sweep (Mooncake #4508, invariant
// 4): replicas that became unreadable (segment unmounted, node expired) are
// removed only once the object's lease has expired; an object left without
// replicas is removed only then too: such objects wait in their shard's
// held set, which the tick revisits alone (settleHeld), not by another
// sweep. Abandoned puts (PROCESSING longer than
// put_start_discard_timeout) are reclaimed. Offload pins held by dead nodes
// are released, and the task queued again on the node of another DRAM
// replica if the object has one; an object whose SSD copies all died with
// their nodes is queued for offload again from another node's DRAM
// replica (restoreSSDCopy).
//
// The walk releases each shard's lock every scanHold objects
// (shard.scanAll): at 50M objects a shard holds ~50k, and lookups and puts
// to it would wait for the whole shard. sweepDirty is cleared before the
// walk, not after it: replicas that become unreadable during the walk set
// it again, and the objects the walk had already passed then wait for the
// next sweep instead of being forgotten.
func (s *Service) sweep(now int64) {
	s.sweepDirty.Store(false)
	restored := 0
	var kbuf []byte // keyIn's
	discard := s.cfg.PutStartDiscardTimeout.Nanoseconds()
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		s.scanVisits.Add(int64(len(sh.objs) + sh.c.live))
		// A compact object needs the sweep only when its node died: it
		// goes with its one replica (clearDead, settleEmpty), or, leased
		// (its read lease or the rebuild lease), becomes an *object the
		// walk below holds for its lease.
		sh.c.visit(func(i int32, r *crec) {
			switch {
			case !s.incAt(r.node).dead.Load():
			case s.recLeased(r, now):
				s.thaw(sh, i)
			default:
				s.delCompact(sh, s.cst.keyIn(i, &kbuf), i)
			}
		})
		sh.scanAll(s.hooks.scanYielded, func(key string, o *object) {
			if n := o.offload; n != nil && n.dead.Load() {
				o.offload = nil // the dead node's mailbox went with it
				s.requeueElsewhere(key, o, n, "its node died")
			}
			if s.restoreSSDCopy(key, o) {
				restored++
			}
			s.reclaimIfAbandoned(o, now, discard)
			if !s.clearDead(key, o, now) {
				s.hold(sh, key, o) // dead replicas kept for the lease or the put
			}
			s.settleEmpty(sh, key, o, now) // leased: held too
		})
		sh.mu.Unlock()
	}
	if restored > 0 {
		s.log.Info("offload queued again for objects whose SSD copies died with their node, from another node's DRAM replica", "objects", restored)
	}
}

// reclaimAbandoned is the part of sweep a cluster without dead replicas
// needs: puts in PROCESSING longer than put_start_discard_timeout are
// reclaimed. It visits only the objects with a DRAM replica (shard.dram; a
// put in progress has one), in the shards that hold some (eachDRAM), not
// every object or shard. An object a reclaim leaves
// without replicas goes at once, or, leased, after its lease
// (settleEmpty, settleHeld).
func (s *Service) reclaimAbandoned(now int64) {
	discard := s.cfg.PutStartDiscardTimeout.Nanoseconds()
	s.eachDRAM(func(sh *shard, key string, o *object) {
		s.scanVisits.Add(1)
		if s.reclaimIfAbandoned(o, now, discard) {
			s.settleEmpty(sh, key, o, now)
		}
	})
}

// reclaimIfAbandoned drops o's DRAM replicas when its put has been in
// PROCESSING longer than discard ns, and reports whether it did. Caller
// holds the shard lock.
func (s *Service) reclaimIfAbandoned(o *object, now, discard int64) bool {
	if !o.putInProgress() || now-o.putStart <= discard {
		return false
	}
	s.log.Debug("reclaiming abandoned put", "node", o.dram.seg.node.id, "replicas", o.dramCount())
	s.dropDRAM(o)
	return true
}

// restoreSSDCopy queues an offload task for o when every SSD copy it had
// is on a dead node and another node still holds a readable DRAM replica
// of it (a put of several replicas): the object had been admitted to SSD,
// and without a copy there DRAM eviction would drop it. It reports whether
// it queued. Caller holds the shard lock, before clearDead drops the dead
// copies.
func (s *Service) restoreSSDCopy(key string, o *object) bool {
	if o.offload != nil || len(o.ssd) == 0 || o.readableSSD() || !o.readableDRAM() {
		return false
	}
	return s.enqueue(key, o)
}

// clearDead drops o's unreadable replicas if o's lease has expired; it
// reports false when dead replicas remain (kept for the lease, or for the
// put in progress they belong to). Caller holds the shard lock.
func (s *Service) clearDead(key string, o *object, now int64) bool {
	deadDRAM := false
	for _, m := range o.drams() {
		if !m.seg.live() {
			deadDRAM = true
			break
		}
	}
	deadSSD := false
	for _, d := range o.ssd {
		if d.node.dead.Load() {
			deadSSD = true
			break
		}
	}
	if !deadDRAM && !deadSSD {
		return true
	}
	if o.leased(now) {
		return false
	}
	kept := true
	if deadDRAM && o.putInProgress() {
		// A put in progress keeps its dead replicas: its PutEnd must fail
		// (ErrReplicaGone) rather than publish fewer replicas than were
		// placed. It ends by PutRevoke or its discard timeout.
		kept = false
	} else {
		for i := o.dramCount() - 1; deadDRAM && i >= 0; i-- {
			if !o.dramAt(i).seg.live() {
				s.dropDRAMAt(o, i) // the others stay readable
			}
		}
	}
	if deadSSD {
		disk := o.ssd[:0]
		for _, d := range o.ssd {
			if d.node.dead.Load() {
				s.countSSD(d.node, masterapi.KeyHash(key), -1, -o.size)
				continue
			}
			disk = append(disk, d)
		}
		o.ssd = disk
	}
	return kept
}
