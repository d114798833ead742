package master

import (
	"context"
	"slices"
	"sync"

	"github.com/tierstore/tierstore/admission"
	"github.com/tierstore/tierstore/internal/errcode"
	"github.com/tierstore/tierstore/internal/keyspec"
	"github.com/tierstore/tierstore/masterapi"
	"github.com/tierstore/tierstore/mastergrpc"
)

// Promotion: an object read from SSD often enough (the admission policy's
// Promote, dram_promotion_min_freq) gets a DRAM replica again, on the node
// whose SSD holds it.
//
//  1. A demand lookup that is an SSD hit (observeLookup) asks the policy;
//     a yes queues the key in the node's promotion queue (promoBox,
//     bounded, one entry per key).
//  2. The node's next Heartbeat takes up to MaxPromotions keys: for each,
//     the master allocates a range in that node's segment (never waiting;
//     its room comes from free space or from objects that stay readable
//     without their DRAM replica, never from dropping a DRAM-only object:
//     allocatePromotion) and records it as the object's DRAM replica in
//     progress, owned by a new put token and marked promo; the reply
//     carries the task.
//  3. The node loads the key from its SSD tier, checks the CRC32C, writes
//     the bytes as that put (invariant 8) and answers PromoteEnd. Loaded:
//     the replica is complete, published now (commit before publish,
//     invariant 1). Not loaded: the range is freed.
//
// Races. The promotion is a put in progress of its object, so what ends a
// put ends it: a Remove (forced or not: a promotion never blocks a Remove)
// or an object put again parks its range until the node answers (the
// answer finds its token stale: ErrStalePut, the range is freed, nothing
// is published; a removed object never comes back), and the discard
// timeout reclaims an unanswered one. When the promotion's source, the
// node's SSD replica, is dropped (SSD eviction, a failed notify, a
// reconcile, a bad-replica report), the promotion is abandoned at once the
// same way (dropSSD), so an object is never left with only a promotion in
// progress.

// maxPromoQueue bounds a node's queue of promotion candidates; beyond it
// candidates are dropped (counted, the next SSD hit asks again).
const maxPromoQueue = 4096

// maxPromoTries bounds the heartbeats a candidate waits for DRAM room: the
// room a promotion makes may only queue a DRAM-only victim's offload
// (allocatePromotion), which frees its range once the node has offloaded
// it. The victims go out in the same heartbeat reply as the promotions
// that found no room (Heartbeat), and such a waiting candidate wakes its
// node only once the node has answered every offload task it fetched
// (offloadPressing), so each try comes after its victims' offload, not
// milliseconds after the previous one.
const maxPromoTries = 4

// promoBox is a node's queue of promotion candidates. Lock order: shard.mu
// before promoBox.mu.
type promoBox struct {
	mu    sync.Mutex // protects keys, tries, fresh and prefetch
	keys  []string
	tries map[string]uint8 // queued key -> heartbeats it found no room
	fresh int              // queued keys never tried (tries 0)
	// prefetch marks the queued keys a prefetch asked for (prefetch.go):
	// their room comes only from colder objects (allocatePromotion).
	prefetch map[string]bool
	drops    int64 // candidates refused because the queue was full
}

// add queues key once (tries: the heartbeats it already found no room;
// pre: a prefetch); false when the queue is full.
func (b *promoBox) add(key string, tries uint8, pre bool) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, ok := b.tries[key]; ok {
		return true
	}
	if len(b.keys) >= maxPromoQueue {
		b.drops++
		return false
	}
	if b.tries == nil {
		b.tries, b.prefetch = map[string]uint8{}, map[string]bool{}
	}
	b.tries[key] = tries
	if tries == 0 {
		b.fresh++
	}
	if pre {
		b.prefetch[key] = true
	}
	b.keys = append(b.keys, key)
	return true
}

// counts returns how many keys are queued, and how many of them were
// never tried.
func (b *promoBox) counts() (queued, fresh int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.keys), b.fresh
}

// has reports whether key is queued.
func (b *promoBox) has(key string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	_, ok := b.tries[key]
	return ok
}

// take removes and returns up to n queued keys, oldest first, with their
// tries and whether a prefetch asked for them.
func (b *promoBox) take(n int) ([]string, []uint8, []bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	n = min(n, len(b.keys))
	out := append([]string(nil), b.keys[:n]...)
	tries := make([]uint8, n)
	pre := make([]bool, n)
	b.keys = append(b.keys[:0], b.keys[n:]...)
	for i, k := range out {
		tries[i], pre[i] = b.tries[k], b.prefetch[k]
		if tries[i] == 0 {
			b.fresh--
		}
		delete(b.tries, k)
		delete(b.prefetch, k)
	}
	return out, tries, pre
}

// promoter is a policy that answers whether an SSD hit deserves a DRAM copy.
type promoter interface{ Promote(key string) bool }

// considerPromotion queues key for promotion on the node of its live
// SSD replica when o is read from SSD only and the policy says it is
// worth it; a prefetch (pre) also needs the prefetch budget. It reports
// whether key is queued now. Caller holds the shard lock.
func (s *Service) considerPromotion(key string, o *object, pre bool) bool {
	if o.dram.seg != nil || o.offload != nil {
		return false
	}
	var n *node
	for _, d := range o.ssd {
		if !d.node.dead.Load() {
			n = d.node
			break
		}
	}
	return s.considerPromotionFrom(key, n, o.size, pre)
}

// considerPromotionFrom is considerPromotion of an object of size bytes
// without a DRAM replica or task whose live SSD replica is on n (nil:
// none), an *object or a compact record (which stays one: the
// promotion thaws it when it starts).
func (s *Service) considerPromotionFrom(key string, n *node, size int64, pre bool) bool {
	p, ok := s.policy.(promoter)
	if !ok || n == nil || n.promo.has(key) || !p.Promote(key) {
		return false // (a queued key is not asked again: Promote counts its yes)
	}
	if pre && !s.prefetch.take(size, s.now()) {
		s.cnt.prefetchOverBudget.Add(1)
		return false
	}
	if !n.promo.add(key, 0, pre) {
		return false
	}
	s.cnt.promotionsQueued.Add(1)
	if pre {
		s.cnt.prefetchQueued.Add(1)
	}
	n.wake.signal()
	return true
}

// takePromotions turns up to max of n's queued candidates into promotion
// tasks: a range of n's segment each, recorded as the object's DRAM
// replica in progress.
func (s *Service) takePromotions(n *node, max int) []masterapi.PromoteTask {
	var out []masterapi.PromoteTask
	keys, tries, pre := n.promo.take(max)
	for i, key := range keys {
		t, res := s.startPromotion(n, key, pre[i])
		switch {
		case res == promoStarted:
			out = append(out, t)
		case res == promoNoRoom && tries[i]+1 < maxPromoTries:
			n.promo.add(key, tries[i]+1, pre[i]) // the eviction it started may free room by the next heartbeat
		case res == promoNoRoom:
			s.cnt.promotionsNoRoom.Add(1)
		}
	}
	return out
}

// promotable reports whether o can take a promotion from node n's SSD: no
// DRAM replica or put, no offload task, an SSD replica on n. Caller
// holds the shard lock.
func promotable(o *object, n *node) bool {
	if o == nil || o.dram.seg != nil || o.offload != nil {
		return false
	}
	i := o.ssdIndex(n.id)
	return i >= 0 && o.ssd[i].node == n && !n.dead.Load()
}

// promoStart is the outcome of startPromotion.
type promoStart uint8

const (
	promoStarted promoStart = iota
	promoNoRoom             // no room in n's segment, even after eviction
	promoMoot               // the object is gone, changed, or has a DRAM copy
)

// startPromotion allocates key's range in n's segment and records it as
// o's DRAM replica in progress (a put of a new token, marked promo).
// Its room never costs a DRAM-only object (allocatePromotion); a prefetch
// (pre) also evicts only colder objects.
func (s *Service) startPromotion(n *node, key string, pre bool) (masterapi.PromoteTask, promoStart) {
	sh := s.shardOf(key)
	sh.mu.Lock()
	o := s.obj(sh, key)
	ok := promotable(o, n)
	var size int64
	if ok {
		size = o.size
	}
	sh.mu.Unlock()
	if !ok {
		return masterapi.PromoteTask{}, promoMoot
	}
	seg, off, ok := s.allocatePromotion(n, size, key, pre)
	if !ok {
		return masterapi.PromoteTask{}, promoNoRoom
	}
	now := s.now()
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if o2 := sh.objs[key]; o2 != o || !promotable(o, n) || o.size != size {
		s.freeRange(seg, off, size)
		return masterapi.PromoteTask{}, promoMoot
	}
	o.dram = dramReplica{seg: seg, off: off, len: size, token: s.tokens.next(now), promo: true}
	sh.noteDRAM(key, o)
	o.putStart = now
	s.processing.Add(1)
	s.countDRAM(n, 1, size)
	s.cnt.promotionsStarted.Add(1)
	return masterapi.PromoteTask{Key: key, Segment: seg.name, Offset: off, Length: size, Size: size,
		CRC: o.crc, PutToken: o.dram.token}, promoStarted
}

// allocatePromotion allocates size bytes in one of n's segments for a
// promotion of key: in free room, else by making room on n, least recently
// used first, with objects that stay readable without their DRAM replica
// (promotionVictim). A promotion brings in a copy of an object that is
// already on SSD, so it never drops a DRAM-only object for it (that object
// would be lost). A prefetch (pre) also takes only objects colder than key
// (the policy's estimate strictly lower; without an estimate, free room
// only). Room that comes from a victim queued for offload arrives once the
// node has written it (a later heartbeat: the candidate is tried again,
// maxPromoTries); at most maxPromoAsks DRAM-only victims are put to the
// policy per attempt.
func (s *Service) allocatePromotion(n *node, size int64, key string, pre bool) (*segment, int64, bool) {
	if g, off, ok := s.tryAllocateOn(n, size); ok {
		return g, off, true
	}
	est, hasEst := s.policy.(estimator)
	if pre && !hasEst {
		return nil, 0, false
	}
	var hot uint32
	if pre {
		hot = est.Estimate(key)
	}
	now := s.now()
	var cands []victim
	s.eachDRAM(func(sh *shard, k string, o *object) { // a victim has a DRAM replica on n
		s.scanVisits.Add(1)
		if k != key && s.victimOK(o, now) && o.dramOn(n) >= 0 && (!pre || est.Estimate(k) < hot) {
			cands = append(cands, victim{key: k, o: o, sh: sh, lastUse: o.lastUse, soft: o.softPinned(now)})
		}
	})
	slices.SortFunc(cands, func(a, b victim) int {
		switch {
		case a.before(b):
			return -1
		case b.before(a):
			return 1
		}
		return 0
	})
	var pending int64 // bytes freed or queued for offload by this call
	asks := 0         // DRAM-only victims the admission policy was asked about
	for _, c := range cands {
		if pending >= size {
			break // the room will come when the queued victims are on SSD
		}
		freed, queued, asked := s.promotionVictim(c, now, asks < maxPromoAsks)
		if asked {
			asks++
		}
		switch {
		case queued:
			pending += alignUp(c.o.size)
		case freed > 0:
			pending += freed
			s.cnt.promotionEvictions.Add(1)
			s.cnt.evictions.Add(1)
			if pre {
				s.cnt.prefetchEvictions.Add(1)
			}
			if g, off, ok := s.tryAllocateOn(n, size); ok {
				return g, off, true
			}
		}
	}
	return s.tryAllocateOn(n, size)
}

// maxPromoAsks bounds the DRAM-only victims one promotion attempt asks the
// admission policy about: when the SSD refuses them, asking every object
// in DRAM at every attempt would cost a scan's worth of decisions (and
// count them all as rejections) for one promotion.
const maxPromoAsks = 4

// promotionVictim re-checks c under its shard lock and makes room with it
// for a promotion, never losing it: an object readable from SSD loses its
// DRAM replicas (it stays readable there); a DRAM-only object, when ask,
// is queued for offload if the admission policy admits it (its range
// frees once it is on SSD), and is otherwise left alone, never dropped.
// It returns the bytes freed, whether c was queued instead, and whether
// the policy was asked.
func (s *Service) promotionVictim(c victim, now int64, ask bool) (freed int64, queued, asked bool) {
	c.sh.mu.Lock()
	defer c.sh.mu.Unlock()
	o := c.o
	if c.sh.objs[c.key] != o || !s.victimOK(o, now) {
		return 0, false, false
	}
	if !o.readableSSD() {
		if !ask || o.offloadGaveUp != offloadOK {
			return 0, false, false
		}
		if _, queued := s.admitToSSD(c.key, o, s.policy.OnEvict, true); queued {
			return 0, true, true
		}
		s.cnt.promotionsSpared.Add(1)
		return 0, false, true
	}
	freed = alignUp(o.size)
	s.dropDRAM(o)
	s.freeze(c.sh, c.key, o, now) // SSD-only now: a record again if it can be
	return freed, false, false
}

// tryAllocateOn allocates size bytes in one of n's live segments.
func (s *Service) tryAllocateOn(n *node, size int64) (*segment, int64, bool) {
	s.nodesMu.RLock()
	defer s.nodesMu.RUnlock()
	if s.nodes[n.id] != n {
		return nil, 0, false // n expired or was retired
	}
	for _, g := range n.segments {
		if g.held.Load() || !g.live() {
			continue
		}
		if off, ok := g.allocate(size); ok {
			return g, off, true
		}
	}
	return nil, 0, false
}

// abandonPromotion gives up o's promotion in progress when its source,
// node id's SSD replica, is going: the range stays parked until the
// node answers (it may be writing) or the discard deadline. Caller holds
// the shard lock, before dropping the replica.
func (s *Service) abandonPromotion(key string, o *object, id string) {
	if !o.dram.promo || o.dram.complete || o.dram.seg == nil || o.dram.seg.node.id != id {
		return
	}
	if s.park(key, o) {
		s.forgetDRAM(o, keepAll)
	} else {
		s.dropDRAM(o)
	}
}

// PromoteEnd implements NodeAPI.
func (s *Service) PromoteEnd(ctx context.Context, nodeID string, results []masterapi.PromoteResult) ([]error, error) {
	if err := s.gate(ctx); err != nil {
		return nil, err
	}
	out := make([]error, len(results))
	for i, r := range results {
		out[i] = s.observe(s.promoteEnd(nodeID, r))
		if out[i] != nil || !r.Loaded {
			// Counted once, at the node's answer: not published.
			s.cnt.promotionsAbandoned.Add(1)
		}
	}
	return out, nil
}

func (s *Service) promoteEnd(nodeID string, r masterapi.PromoteResult) error {
	sh, err := s.lockKey(r.Key)
	if err != nil {
		return err
	}
	defer sh.mu.Unlock()
	o, err := s.ownPut(sh, "promote_end", r.Key, r.PutToken)
	if err != nil {
		return err
	}
	switch {
	case !o.dram.promo:
		return errcode.Errorf(errcode.InvalidParams, "master: promote_end: put %d is a client's put, not a promotion", r.PutToken)
	case o.dram.seg.node.id != nodeID:
		return errcode.Errorf(errcode.InvalidParams, "master: promote_end: promotion %d belongs to node %q, not %q", r.PutToken, o.dram.seg.node.id, nodeID)
	case o.dram.complete:
		return nil // repeated answer
	}
	now := s.now()
	if !r.Loaded || !o.dram.seg.live() {
		s.dropDRAM(o)
		if !r.Loaded {
			s.log.Debug("promotion not loaded by the node", "key", keyspec.Show(r.Key), "node", nodeID, "reason", r.Reason)
		}
		s.settleEmpty(sh, r.Key, o, now)
		if sh.objs[r.Key] == o {
			s.freeze(sh, r.Key, o, now) // SSD-only again: a record again if it can be
		}
		if r.Loaded {
			return errcode.Errorf(errcode.ReplicaIsGone, "master: promote_end: segment of node %q is gone", nodeID)
		}
		return nil
	}
	o.dram.complete = true // commit (the node wrote and checked) before publish
	s.processing.Add(-1)
	o.lastUse = now
	s.cnt.promotions.Add(1)
	s.room.signal() // the object may be evicted now
	return nil
}

// Heartbeat implements NodeAPI: the node's offload tasks, its SSD report
// to the policy, the policy's sketch when asked for, and the node's
// promotion tasks.
//
// The promotions are taken first: the offload of the victims their
// eviction queued (their room) then goes out in this same reply.
func (s *Service) Heartbeat(ctx context.Context, req masterapi.HeartbeatRequest) (masterapi.HeartbeatReply, error) {
	if err := s.gate(ctx); err != nil {
		return masterapi.HeartbeatReply{}, err
	}
	var promos []masterapi.PromoteTask
	if n := s.lookupNode(req.Node); n != nil {
		promos = s.takePromotions(n, masterapi.MaxPromotions)
	}
	tasks, err := s.offloadTasks(ctx, req.Node, req.Max)
	if err != nil {
		// The node was not known after all: the promotions started are
		// reclaimed as unanswered puts (put_start_discard_timeout).
		return masterapi.HeartbeatReply{}, err
	}
	rep := masterapi.HeartbeatReply{Tasks: tasks, Term: s.cfg.HA.Term, Promotions: promos}
	_, rep.WantSSDReport = s.policy.(ssdReportSink)
	if req.SSD != nil {
		s.ReportSSD(req.Node, *req.SSD)
	}
	if req.WantSketch {
		rep.Sketch = s.sketchForNode(req.Node, req.SketchVersion, req.SketchTransfer, req.SketchOffset)
	}
	return rep, nil
}

// sketchChunkBytes bounds the sketch chunk a heartbeat carries (a quarter
// of the RPC message limit, the rest for tasks and promotions): a sketch
// of 50 million cached objects (384 MiB) goes in 24 chunks, which the node
// fetches in back-to-back heartbeats (node.heartbeat).
const sketchChunkBytes = mastergrpc.MaxMessageSize / 4

// sketchMoves is the fraction of the sketch's ageing period (accesses
// between halvings) after which a node's copy is out of date: a copy
// misses at most 1/64 of a period's counts.
const sketchMoves = 64

// sketchForNode answers a node's sketch request (want: it takes one): the
// next chunk of the transfer it is joining (transfer, offset), else the
// first chunk of a new transfer when it holds none (have 0) or its copy,
// version have, is out of date; nil when the policy keeps no sketch or the
// copy is current. A version is 1 + the lookups the policy had counted.
// The chunk is copied under the policy's lock a piece at a time and
// encoded outside it (admission.TinyLFU.SketchChunk).
func (s *Service) sketchForNode(node string, have, transfer, offset uint64) *masterapi.SketchChunk {
	p, ok := s.policy.(interface {
		SketchChunk(offset uint64, maxBytes int) admission.SketchChunk
		Stats() admission.TinyLFUStats
	})
	if !ok {
		return nil
	}
	if transfer == 0 || offset == 0 {
		st := p.Stats()
		cur := uint64(st.Lookups) + 1
		if have != 0 && have <= cur && cur-have < uint64(max(1, st.Period/sketchMoves)) {
			return nil
		}
		transfer, offset = cur, 0
	}
	c := p.SketchChunk(offset, sketchChunkBytes)
	if c.Offset != offset {
		transfer = uint64(p.Stats().Lookups) + 1 // the sketch shrank: a new transfer
	}
	s.cnt.sketchChunksSent.Add(1)
	s.cnt.sketchBytesSent.Add(int64(len(c.Data)))
	if c.Offset+uint64(len(c.Data)/8) == c.Total {
		s.cnt.sketchesSent.Add(1)
	}
	return &masterapi.SketchChunk{Version: transfer, Width: c.Width, DoorBits: c.DoorBits, Period: c.Period, Samples: c.Samples,
		Resets: c.Resets, Offset: c.Offset, Total: c.Total, Data: c.Data}
}
