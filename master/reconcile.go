package master

import (
	"context"
	"math/bits"
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
// digest per node id that ever held an SSD replica (3 MiB: 12 bytes a slot
// and a bit; allocated at its first replica), one batch per call, and per
// open session a count per slot; no key set is held.
//
// A key's slot is masterapi.KeyHash's low bits, and so is its shard
// (Service.shardIndex): a slot lies in one shard (or, with more shards
// than slots, in a known set of them), so ReconcileEnd scans only those.
//
// ReconcileEnd scans fewer still: while a session is open the digest
// marks every slot whose replica set changes (ssdDigest.dirty), and
// ReconcileKeys counts per slot the replicas it stamps for the first time
// in the session (ssdDigest.named). A differing slot that is not dirty and
// whose named count equals the digest's count at End has every replica
// stamped: nothing to drop, so it is not scanned (invariant: a slot is
// skipped only if no replica of the node in it changed since Begin and
// every one was named; TestReconcileEndSkipsOnlyFullyNamedSlots). The
// slots only gained keys on the node's side (strays) are thus free, and a
// scan of a shard whose slots are all clean stops at the count of
// unstamped replicas they hold.

const digestSlots = masterapi.MaxReconcileSlots

// digestTable is the digest proper; a node id's is allocated with its
// first SSD replica (a node without any costs no 3 MiB).
type digestTable struct {
	// counts and sums are atomics: replicas of one slot can change under
	// different shard locks when there are more shards than slots.
	counts [digestSlots]atomic.Uint32
	sums   [digestSlots]atomic.Uint64
	// dirty has a bit per slot whose replica set changed since the
	// current session began (set only while ssdDigest.tracking).
	dirty [digestSlots / 64]atomic.Uint64
}

// ssdDigest is the running digest of one node id's SSD replicas, and
// its reconcile session.
type ssdDigest struct {
	tab atomic.Pointer[digestTable]
	// tracking: a session is open; add marks the slots it changes dirty.
	tracking atomic.Bool

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
	// differing slots, one bit each; named counts, per slot of that
	// resolution, the replicas the session stamped for the first time.
	slots  int
	differ []uint64
	named  []uint32
}

// table returns the digest table, allocating it on first use.
func (d *ssdDigest) table() *digestTable {
	if t := d.tab.Load(); t != nil {
		return t
	}
	d.tab.CompareAndSwap(nil, new(digestTable))
	return d.tab.Load()
}

// add applies delta (+1 or -1) replicas of the key with hash h. While a
// session is open the slot is marked dirty first (ReconcileEnd reads
// the counts before the marks, so a change it counts is one it sees
// marked).
func (d *ssdDigest) add(h uint64, delta int64) {
	t := d.table()
	r := masterapi.SlotOf(h, digestSlots)
	if d.tracking.Load() {
		t.dirty[r>>6].Or(1 << (r & 63))
	}
	a := masterapi.DigestAddend(h)
	if delta > 0 {
		t.counts[r].Add(1)
		t.sums[r].Add(a)
	} else {
		t.counts[r].Add(^uint32(0))
		t.sums[r].Add(-a)
	}
}

// folded returns the digest at resolution slots (a power of two up to
// digestSlots): the sums of the finer slots that map to each.
func (d *ssdDigest) folded(slots int) masterapi.SlotDigest {
	out := masterapi.NewSlotDigest(slots)
	t := d.tab.Load()
	if t == nil {
		return out
	}
	for i := range digestSlots {
		r := i & (slots - 1)
		out.Counts[r] += t.counts[i].Load()
		out.Sums[r] += t.sums[i].Load()
	}
	return out
}

// dirtySlots returns, at resolution slots, one bit per slot holding a
// finer slot marked dirty. Call it after folding the counts.
func (d *ssdDigest) dirtySlots(slots int) []uint64 {
	out := make([]uint64, (slots+63)/64)
	t := d.tab.Load()
	if t == nil {
		return out
	}
	for w := range t.dirty {
		for b := t.dirty[w].Load(); b != 0; b &= b - 1 {
			r := (w*64 + bits.TrailingZeros64(b)) & (slots - 1)
			out[r>>6] |= 1 << (r & 63)
		}
	}
	return out
}

// startTracking clears the dirty marks and starts marking. Caller holds mu.
func (d *ssdDigest) startTracking() {
	if t := d.tab.Load(); t != nil {
		for w := range t.dirty {
			t.dirty[w].Store(0)
		}
	}
	d.tracking.Store(true)
}

func (d *ssdDigest) differs(r int) bool { return d.differ[r>>6]&(1<<(r&63)) != 0 }

// digestOf returns node id's digest, created on first use. Digests are
// never dropped: a node id that held SSD replicas keeps its 3 MiB.
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
	d.startTracking() // before the fold: a change the fold misses is marked
	mine := d.folded(slots)
	var differ []uint32
	differBits := make([]uint64, (slots+63)/64)
	for r := range slots {
		if mine.Counts[r] != nd.Counts[r] || mine.Sums[r] != nd.Sums[r] {
			differ = append(differ, uint32(r))
			differBits[r>>6] |= 1 << (r & 63)
		}
	}
	id := d.epoch.Add(1)
	if id == 0 { // 0 never names a session: fresh replicas carry it
		id = d.epoch.Add(1)
	}
	d.open, d.inc, d.slots, d.differ, d.named = len(differ) > 0, n, slots, differBits, nil
	if d.open {
		d.named = make([]uint32, slots)
	} else {
		d.tracking.Store(false)
	}
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
	return masterapi.ReconcileKeysResult{Unwanted: s.markHeld(n, uint32(id), d.slots, d.differs, d.named, keys)}, nil
}

// markHeld stamps node n's replica of each key (of a slot in differs, at
// resolution slots) with session id and returns the keys the master does
// not want on n, each once: no object (never known, or removed), or an
// object that lists no replica of n's id and has no offload task of n (the
// replica was dropped, or the key was removed and put again). A replica
// stamped for the first time in the session is counted in named[its
// slot]. Invalid keys are ignored. Caller holds n.dig.mu.
func (s *Service) markHeld(n *node, id uint32, slots int, differs func(int) bool, named []uint32, keys []string) []string {
	var unwanted []string
	var dup map[string]struct{}
	for _, k := range keys {
		if validKey(k) != nil {
			continue
		}
		r := masterapi.SlotOf(masterapi.KeyHash(k), slots)
		if !differs(r) {
			continue
		}
		sh := s.shardOf(k)
		sh.mu.Lock()
		o := sh.objs[k]
		i, other := -1, false
		if o != nil {
			i = o.ssdIndex(n.id)
		} else if ci := sh.c.find(k, hash32(masterapi.KeyHash(k))); ci >= 0 {
			// A compact object: its one replica stamped in place, or the
			// key unwanted on n (another node's object, no task of n's).
			if rec := s.cst.rec(ci); s.incAt(rec.node).id == n.id {
				if rec.seen != id {
					rec.seen = id
					named[r]++
				}
				sh.mu.Unlock()
				continue
			}
			other = true
		}
		switch {
		case i >= 0:
			if o.ssd[i].seen != id {
				o.ssd[i].seen = id
				named[r]++
			}
		case other || o == nil || o.offload != n:
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
	scan := d.unnamedSlots()
	d.tracking.Store(false)
	dropped := s.dropUnseen(nodeID, uint32(id), d.slots, scan)
	d.named = nil
	if dropped > 0 {
		s.log.Info("reconcile dropped SSD replicas the node no longer holds", "node", nodeID, "dropped", dropped)
	}
	return dropped, nil
}

// unnamedSlots returns, per slot of the session's resolution, how many
// of the node's replicas in it no batch named: 0 for a slot that does not
// differ or has every replica stamped, -1 for a differing slot whose
// replica set changed during the session (not known: scan it all), and
// the count otherwise. Caller holds d.mu.
func (d *ssdDigest) unnamedSlots() []int64 {
	counts := d.folded(d.slots).Counts // the counts first, then the marks
	dirty := d.dirtySlots(d.slots)
	out := make([]int64, d.slots)
	for w, b := range d.differ {
		for ; b != 0; b &= b - 1 {
			r := w*64 + bits.TrailingZeros64(b)
			switch {
			case dirty[r>>6]&(1<<(r&63)) != 0 || counts[r] < d.named[r]:
				out[r] = -1
			default:
				out[r] = int64(counts[r] - d.named[r])
			}
		}
	}
	return out
}

// dropUnseen drops node id's SSD replicas in the slots scan names (at
// resolution slots; unnamedSlots) whose stamp is not session: the node
// did not name them, so its SSD does not hold them. Only the shards that
// hold slots of non-zero scan are scanned, and a shard whose slots all
// have a known count of unstamped replicas only until it has found them.
// Caller holds the node's digest lock (no session stamps a replica
// meanwhile).
func (s *Service) dropUnseen(nodeID string, session uint32, slots int, scan []int64) int64 {
	now := s.now()
	in := func(r int) bool { return scan[r] != 0 }
	var dropped int64
	for _, i := range s.shardsOfSlots(slots, in) {
		// want is the unstamped replicas the shard holds, or -1: not
		// known, or with fewer slots than shards (a slot's count spans
		// several shards).
		want := int64(-1)
		if slots >= len(s.shards) {
			want = 0
			for r := i; r < slots && want >= 0; r += len(s.shards) {
				if scan[r] < 0 {
					want = -1
				} else {
					want += scan[r]
				}
			}
		}
		sh := &s.shards[i]
		sh.mu.Lock()
		var found, visits int64
		var kbuf []byte // keyIn's
		// The compact objects first: one of n's id the session did not
		// stamp goes with its one replica as dropSSD drops it (a lease,
		// read or rebuild, holds it: thawed, the walk below drops its
		// replica and holds the object for the lease).
		sh.c.visit(func(ci int32, rec *crec) {
			visits++
			k := s.cst.keyIn(ci, &kbuf)
			if rec.seen == session || s.incAt(rec.node).id != nodeID || !in(masterapi.SlotOf(masterapi.KeyHash(k), slots)) {
				return
			}
			if s.recLeased(rec, now) {
				s.thaw(sh, ci)
				return
			}
			found++
			dropped++
			s.delCompact(sh, k, ci)
		})
		for k, o := range sh.objs {
			if want >= 0 && found == want {
				break
			}
			visits++
			if len(o.ssd) == 0 {
				continue
			}
			j := o.ssdIndex(nodeID)
			if j < 0 || o.ssd[j].seen == session || !in(masterapi.SlotOf(masterapi.KeyHash(k), slots)) {
				continue
			}
			found++
			if s.dropSSD(sh, k, o, nodeID, now) {
				dropped++
			}
		}
		sh.mu.Unlock()
		s.scanVisits.Add(visits)
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
