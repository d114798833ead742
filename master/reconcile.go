package master

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/tierstore/tierstore/internal/errcode"
	"github.com/tierstore/tierstore/masterapi"
)

// Reconcile sessions (masterapi/reconcile.go; docs/design.md invariant 6):
// the master keeps, per node id, a digest of the SSD replicas it
// lists for that id (every incarnation), at the finest resolution
// masterapi.MaxReconcileSlots, updated with the replica counters under the
// object's shard lock. A node's reconcile compares digests first, and only
// the slots that differ are compared key by key: a replica named by the
// node is stamped with the session (ssdReplica.seen), and ReconcileEnd
// drops the unstamped replicas of the node in those slots. Memory: one
// digest per node id (192 KiB), one batch per call; no key set is held.
//
// A key's slot is masterapi.KeyHash's low bits, and so is its shard
// (Service.shardIndex): a slot lies in one shard (or, with more shards
// than slots, in a known set of them), so ReconcileEnd scans only those.

const digestSlots = masterapi.MaxReconcileSlots

// ssdDigest is the running digest of one node id's SSD replicas, and
// its reconcile session.
type ssdDigest struct {
	// counts and sums are atomics: replicas of one slot can change under
	// different shard locks when there are more shards than slots.
	counts [digestSlots]atomic.Uint32
	sums   [digestSlots]atomic.Uint64

	// epoch is the id of the current (or last) session; a replica recorded
	// by a notify or re-registration is stamped with it, so a session in
	// progress counts it as seen. Written under mu.
	epoch atomic.Uint32

	mu sync.Mutex // protects the fields below; taken before shard locks
	// open: a session was begun and has not ended.
	open bool
	// inc is the node incarnation that began the session.
	inc *node
	// slots is the session's digest resolution; differ holds its
	// differing slots, one bit each.
	slots  int
	differ []uint64
}

// add applies delta (+1 or -1) replicas of the key with hash h.
func (d *ssdDigest) add(h uint64, delta int64) {
	r := masterapi.SlotOf(h, digestSlots)
	t := masterapi.DigestAddend(h)
	if delta > 0 {
		d.counts[r].Add(1)
		d.sums[r].Add(t)
	} else {
		d.counts[r].Add(^uint32(0))
		d.sums[r].Add(-t)
	}
}

// folded returns the digest at resolution slots (a power of two up to
// digestSlots): the sums of the finer slots that map to each.
func (d *ssdDigest) folded(slots int) masterapi.SlotDigest {
	out := masterapi.NewSlotDigest(slots)
	for i := range digestSlots {
		r := i & (slots - 1)
		out.Counts[r] += d.counts[i].Load()
		out.Sums[r] += d.sums[i].Load()
	}
	return out
}

func (d *ssdDigest) differs(r int) bool { return d.differ[r>>6]&(1<<(r&63)) != 0 }

// digestOf returns node id's digest, created on first use. Digests are
// never dropped: a node id that held SSD replicas keeps its 192 KiB.
func (s *Service) digestOf(id string) *ssdDigest {
	s.digestMu.Lock()
	defer s.digestMu.Unlock()
	d := s.digests[id]
	if d == nil {
		d = &ssdDigest{}
		s.digests[id] = d
	}
	return d
}

// ReconcileBegin implements API.
func (s *Service) ReconcileBegin(ctx context.Context, nodeID string, nd masterapi.SlotDigest) (masterapi.ReconcileSession, error) {
	if err := s.gate(ctx); err != nil {
		return masterapi.ReconcileSession{}, err
	}
	if err := nd.Validate(); err != nil {
		return masterapi.ReconcileSession{}, s.observe(errcode.Wrap(errcode.InvalidParams, err))
	}
	n, err := s.reconcileNode("reconcile_begin", nodeID)
	if err != nil {
		return masterapi.ReconcileSession{}, err
	}
	slots := nd.Slots()
	d := n.dig
	d.mu.Lock()
	defer d.mu.Unlock()
	mine := d.folded(slots)
	var differ []uint32
	bits := make([]uint64, (slots+63)/64)
	for r := range slots {
		if mine.Counts[r] != nd.Counts[r] || mine.Sums[r] != nd.Sums[r] {
			differ = append(differ, uint32(r))
			bits[r>>6] |= 1 << (r & 63)
		}
	}
	id := d.epoch.Add(1)
	if id == 0 { // 0 never names a session: fresh replicas carry it
		id = d.epoch.Add(1)
	}
	d.open, d.inc, d.slots, d.differ = len(differ) > 0, n, slots, bits
	return masterapi.ReconcileSession{ID: uint64(id), Differ: differ}, nil
}

// reconcileNode returns the live incarnation of nodeID, or NEED_REMOUNT
// (a restarted master knows no keys: the node must re-register first).
func (s *Service) reconcileNode(op, nodeID string) (*node, error) {
	if nodeID == "" {
		return nil, s.observe(errcode.Errorf(errcode.InvalidParams, "master: %s: empty node id", op))
	}
	n := s.lookupNode(nodeID)
	if n == nil {
		return nil, s.observe(errcode.Errorf(errcode.NeedRemount, "master: %s: unknown node %q", op, nodeID))
	}
	return n, nil
}

// session locks nodeID's digest and checks that id is its open session,
// begun by the node's current incarnation. On success the caller must
// unlock d.mu.
func (s *Service) session(op, nodeID string, id uint64) (*node, *ssdDigest, error) {
	n, err := s.reconcileNode(op, nodeID)
	if err != nil {
		return nil, nil, err
	}
	d := n.dig
	d.mu.Lock()
	if !d.open || uint64(d.epoch.Load()) != id || d.inc != n {
		d.mu.Unlock()
		return nil, nil, s.observe(errcode.Errorf(errcode.InvalidParams,
			"master: %s: session %d is not node %q's open reconcile (superseded, ended, or begun by an earlier incarnation)", op, id, nodeID))
	}
	return n, d, nil
}

// ReconcileKeys implements API. It does not retain keys after it returns
// (the gRPC server passes strings that share the request's bytes).
func (s *Service) ReconcileKeys(ctx context.Context, nodeID string, id uint64, keys []string) (masterapi.ReconcileKeysResult, error) {
	if err := s.gate(ctx); err != nil {
		return masterapi.ReconcileKeysResult{}, err
	}
	n, d, err := s.session("reconcile_keys", nodeID, id)
	if err != nil {
		return masterapi.ReconcileKeysResult{}, err
	}
	defer d.mu.Unlock()
	return masterapi.ReconcileKeysResult{Unwanted: s.markHeld(n, uint32(id), d.slots, d.differs, keys)}, nil
}

// markHeld stamps node n's replica of each key (of a slot in differs, at
// resolution slots) with session id and returns the keys the master does
// not want on n, each once: no object (never known, or removed), or an
// object that lists no replica of n's id and has no offload task of n (the
// replica was dropped, or the key was removed and put again). Invalid keys
// are ignored. Caller holds n.dig.mu.
func (s *Service) markHeld(n *node, id uint32, slots int, differs func(int) bool, keys []string) []string {
	var unwanted []string
	var dup map[string]struct{}
	for _, k := range keys {
		if validKey(k) != nil || !differs(masterapi.SlotOf(masterapi.KeyHash(k), slots)) {
			continue
		}
		sh := s.shardOf(k)
		sh.mu.Lock()
		o := sh.objs[k]
		i := -1
		if o != nil {
			i = o.ssdIndex(n.id)
		}
		switch {
		case i >= 0:
			o.ssd[i].seen = id
		case o == nil || o.offload != n:
			if _, ok := dup[k]; !ok {
				if dup == nil {
					dup = map[string]struct{}{}
				}
				dup[k] = struct{}{}
				unwanted = append(unwanted, k)
			}
		}
		sh.mu.Unlock()
	}
	return unwanted
}

// ReconcileEnd implements API.
func (s *Service) ReconcileEnd(ctx context.Context, nodeID string, id uint64) (int64, error) {
	if err := s.gate(ctx); err != nil {
		return 0, err
	}
	_, d, err := s.session("reconcile_end", nodeID, id)
	if err != nil {
		return 0, err
	}
	defer d.mu.Unlock()
	d.open = false
	dropped := s.dropUnseen(nodeID, uint32(id), d.slots, d.differs)
	if dropped > 0 {
		s.log.Info("reconcile dropped SSD replicas the node no longer holds", "node", nodeID, "dropped", dropped)
	}
	return dropped, nil
}

// dropUnseen drops node id's SSD replicas in the differing slots
// (at resolution slots) whose stamp is not session: the node did not name
// them, so its SSD does not hold them. Only the shards that hold those
// slots are scanned. Caller holds the node's digest lock (no session
// stamps a replica meanwhile).
func (s *Service) dropUnseen(nodeID string, session uint32, slots int, differs func(int) bool) int64 {
	now := s.now()
	var dropped int64
	for _, i := range s.shardsOfSlots(slots, differs) {
		sh := &s.shards[i]
		sh.mu.Lock()
		for k, o := range sh.objs {
			if len(o.ssd) == 0 {
				continue
			}
			j := o.ssdIndex(nodeID)
			if j < 0 || o.ssd[j].seen == session || !differs(masterapi.SlotOf(masterapi.KeyHash(k), slots)) {
				continue
			}
			if s.dropSSD(sh, k, o, nodeID, now) {
				dropped++
			}
		}
		sh.mu.Unlock()
	}
	return dropped
}

// shardsOfSlots returns, in increasing order, the indexes of the shards
// that hold keys of the differing slots. A key's shard is its hash's low
// bits, as is its slot: with at least as many slots as shards, slot r
// lies in shard r&mask; with fewer, in every shard whose index has r's low
// bits.
func (s *Service) shardsOfSlots(slots int, differs func(int) bool) []int {
	nshards := len(s.shards)
	var out []int
	for i := range nshards {
		hit := false
		if slots >= nshards {
			for r := i; r < slots && !hit; r += nshards {
				hit = differs(r)
			}
		} else {
			hit = differs(i & (slots - 1))
		}
		if hit {
			out = append(out, i)
		}
	}
	return slices.Clip(out)
}
