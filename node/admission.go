package node

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/tierstore/tierstore/admission"
	"github.com/tierstore/tierstore/eviction"
	"github.com/tierstore/tierstore/internal/wire"
	"github.com/tierstore/tierstore/masterapi"
	"github.com/tierstore/tierstore/tier"
)

// The node's side of SSD admission and promotion (package admission,
// tinylfu; docs/design.md, "Admission across the RPC boundary"):
//
//   - the heartbeat takes the master's frequency sketch, which the master
//     sends when the node has none or its copy (the version it sends
//     back) has fallen 1/64 of the sketch's ageing period behind, at most
//     once per AdmissionSketchInterval; it comes in chunks (a quarter of
//     the RPC message limit each: 384 MiB at 50 million cached objects is
//     24 of them), fetched in back-to-back heartbeats (heartbeat: one
//     round after the other while a transfer is in progress), joined
//     into a new sketch (admission.SketchAssembly) while the tier keeps
//     using the previous one, which the complete one replaces; the tier
//     ranks buckets with it (bucket_eviction "worth",
//     tier.Engine.SetWorthFreq);
//   - when the master says its policy uses SSD reports, the heartbeat
//     carries the tier's fill level and the worth of its next victims
//     (tier.Engine.Outlook weighed with eviction.Worth and the sketch),
//     recomputed when the tier changed or a new sketch arrived (their worth
//     depend on nothing else);
//   - promotion tasks of the reply are loaded from the tier into the
//     segment as the put the task names, then answered (PromoteEnd),
//     several at once alongside the round's offload (promote.go).
//
// All of it runs in the heartbeat loop, under roundMu (the promotions'
// loads in goroutines the round waits for); the sketch itself
// is swapped atomically because the tier reads it under its own lock.

// WorthTier is the worth-eviction capability of an SSDTier (*tier.Engine
// has it): Outlook describes the buckets eviction would take next, and
// SetWorthFreq hands the tier the master's frequency sketch to rank
// buckets by (--bucket_eviction=worth). The node uses it when the tier has
// it. A tier without it loses two things, silently for the operator: the
// node sends no SSD report, so a tinylfu master admits every DRAM victim
// it holds as offload_on_evict does (no_report) instead of comparing it
// with what it would push out; and the sketch the master sends is received
// but never used, so bucket eviction is by recency only.
type WorthTier interface {
	Outlook(cover int64) (tier.Outlook, error)
	SetWorthFreq(freq func(key []byte) uint32) bool
}

// nodeAdmission is the node's admission state. sketch is read by the
// tier's WorthFunc from any goroutine; the other fields belong to the
// heartbeat loop (roundMu).
type nodeAdmission struct {
	sketch     atomic.Pointer[admission.Sketch]
	version    uint64                   // of sketch (0: none)
	asm        admission.SketchAssembly // the sketch transfer in progress
	asmTerm    uint64                   // the leadership term of its first chunk
	sketchAt   time.Time                // when sketch was received
	wantReport bool                     // the master's policy takes SSD reports
	last       tier.Stats               // of the last report
	stale      bool                     // a report is due whatever the tier did (new sketch)
	cover      int64                    // bytes of victims a report describes (High-Low, plus a bucket)
}

// freq is the sketch's estimate of key, 0 without a sketch.
func (a *nodeAdmission) freq(key []byte) uint32 {
	if s := a.sketch.Load(); s != nil {
		return s.EstimateHash(admission.HashKey(key))
	}
	return 0
}

// heartbeatRequest builds the heartbeat's admission part. Caller holds
// roundMu.
func (n *Node) heartbeatRequest() masterapi.HeartbeatRequest {
	a := &n.adm
	req := masterapi.HeartbeatRequest{Node: n.name, Max: n.cfg.OffloadBatch}
	req.SketchTransfer, req.SketchOffset = a.asm.Transfer()
	req.WantSketch = a.version == 0 || req.SketchTransfer != 0 || time.Since(a.sketchAt) >= n.cfg.AdmissionSketchInterval
	req.SketchVersion = a.version
	if a.wantReport && a.sketch.Load() != nil {
		req.SSD = n.ssdReport()
	}
	return req
}

// ssdReport returns the tier's report when the tier changed since the last
// one or a new sketch arrived, nil otherwise or when the tier cannot tell.
func (n *Node) ssdReport() *masterapi.SSDReport {
	a := &n.adm
	at, ok := n.tier.(WorthTier)
	if !ok {
		return nil
	}
	st := n.tier.Stats()
	changed := st.BucketsWritten != a.last.BucketsWritten || st.Evictions != a.last.Evictions ||
		st.ObjectsLoaded != a.last.ObjectsLoaded || st.Objects != a.last.Objects
	if !changed && !a.stale {
		return nil
	}
	if a.cover == 0 {
		a.cover = st.Capacity/4 + BucketFileLimit(n.cfg.BucketSizeLimit)
	}
	ol, err := at.Outlook(a.cover)
	if err != nil {
		if !errors.Is(err, tier.ErrClosed) {
			n.log.Warn("SSD report for admission failed", "err", err)
		}
		return nil
	}
	a.cover = max(ol.High-ol.Low, 0) + BucketFileLimit(n.cfg.BucketSizeLimit)
	a.last, a.stale = st, false
	r := &masterapi.SSDReport{High: ol.High, Low: ol.Low, Used: ol.Used, Victims: make([]masterapi.SSDVictim, 0, len(ol.Victims))}
	for _, v := range ol.Victims {
		r.Victims = append(r.Victims, eviction.Worth(v.FileBytes, v.Keys, v.Sizes, a.freq))
	}
	n.metrics.ssdReports.Add(1)
	return r
}

// sketchMark is where the sketch transfer in progress stands.
type sketchMark struct{ transfer, offset uint64 }

// sketchMark returns where the sketch transfer stands. Caller holds roundMu.
func (a *nodeAdmission) sketchMark() sketchMark {
	v, off := a.asm.Transfer()
	return sketchMark{v, off}
}

// sketchMoved reports whether a sketch transfer is in progress and moved
// since before: the next heartbeat should follow at once. A transfer that
// did not move (the heartbeat failed) waits for the next tick, so a lost
// master is not hammered. Caller holds roundMu.
func (a *nodeAdmission) sketchMoved(before sketchMark) bool {
	now := a.sketchMark()
	return now.transfer != 0 && now != before
}

// takeAdmission applies the admission part of a heartbeat reply: a sketch
// chunk (joined; a complete sketch replaces the one in use and is handed
// to the tier once, SetWorthFreq) and whether the master wants SSD reports.
// Caller holds roundMu.
func (n *Node) takeAdmission(rep masterapi.HeartbeatReply) {
	a := &n.adm
	if a.wantReport != rep.WantSSDReport {
		a.wantReport = rep.WantSSDReport
		a.stale = true // report at the next heartbeat
	}
	c := rep.Sketch
	if c == nil {
		return
	}
	n.metrics.sketchChunksReceived.Add(1)
	if c.Offset == 0 {
		a.asmTerm = rep.Term
	} else if v, _ := a.asm.Transfer(); v != 0 && rep.Term != a.asmTerm {
		// Another leader's sketch: its words must not join the ones of
		// the previous leader's (a new transfer starts next heartbeat).
		a.asm.Reset()
		n.metrics.sketchRestarts.Add(1)
		return
	}
	s, err := a.asm.Add(admission.SketchChunk{Version: c.Version, Width: c.Width, DoorBits: c.DoorBits, Period: c.Period,
		Samples: c.Samples, Resets: c.Resets, Offset: c.Offset, Total: c.Total, Data: c.Data})
	switch {
	case errors.Is(err, admission.ErrSketchChanged):
		// The master's sketch halved or was resized since the transfer
		// began: the next heartbeat starts it again.
		n.metrics.sketchRestarts.Add(1)
		n.log.Debug("admission sketch transfer starts again", "err", err)
		return
	case err != nil:
		n.log.Warn("admission sketch chunk from the master ignored", "bytes", len(c.Data), "offset", c.Offset, "err", err)
		return
	case s == nil:
		return // more chunks to come
	}
	a.sketch.Store(s)
	a.version, a.sketchAt = c.Version, time.Now()
	a.stale = true // the victims' worth changed
	n.metrics.sketchesReceived.Add(1)
	// Each new sketch, so that the tier weighs its buckets again (it caches
	// their worth until then).
	if at, ok := n.tier.(WorthTier); ok {
		at.SetWorthFreq(a.freq) // false unless bucket_eviction is "worth"
	}
}

// answerPromotions answers the promotions of group (PromoteEnd) and
// forgets their loads: a read of one of these keys goes to the replica the
// master lists from now on.
func (n *Node) answerPromotions(ctx context.Context, group []*promoLoad) {
	res := make([]masterapi.PromoteResult, len(group))
	for i, p := range group {
		res[i] = p.res
	}
	errs, err := n.m.PromoteEnd(ctx, n.name, res)
	for _, p := range group {
		n.promoting.remove(p)
	}
	if err != nil {
		// The master reclaims the ranges after put_start_discard_timeout.
		n.log.Warn("answering promotions failed", "promotions", len(res), "err", err)
		n.metrics.promotionsFailed.Add(int64(len(res)))
		return
	}
	for i, r := range res {
		switch {
		case !r.Loaded:
			n.metrics.promotionsFailed.Add(1)
		case i < len(errs) && errs[i] != nil:
			// Removed, put again or abandoned meanwhile: nothing was
			// published; the bytes in the range are unreachable.
			n.metrics.promotionsRefused.Add(1)
		default:
			n.metrics.promotions.Add(1)
		}
	}
}

// promoteOne copies p's object from the tier (its load, run here unless a
// reader ran it) into the segment range the master allocated, as put
// p.t.PutToken (invariant 8), after checking it against the task's size
// and CRC32C (the tier checked it against its index); p.res is the answer.
func (n *Node) promoteOne(p *promoLoad) {
	t := p.t
	p.res = masterapi.PromoteResult{Key: t.Key, PutToken: t.PutToken}
	if err := n.checkSegment(t.Segment); err != nil {
		p.res.Reason = err.Error()
		return
	}
	if !p.tryRun(n) {
		<-p.done
	}
	if p.v == nil {
		p.res.Reason = p.reason
		return
	}
	if err := n.writePromoted(t, p.v); err != nil {
		p.res.Reason = err.Error()
		return
	}
	p.res.Loaded = true
}

// writePromoted claims t's range for its token and copies v into it, the
// way WriteRange does for a put (without counting a client write), and
// records the object for a failover's DRAM re-registration.
func (n *Node) writePromoted(t masterapi.PromoteTask, v []byte) error {
	if err := n.seg.check(t.Offset, len(v)); err != nil {
		return toCode(err)
	}
	if err := n.claimRange(t.Offset, t.Length, t.PutToken); err != nil {
		return toCode(err)
	}
	for off, p := t.Offset, v; len(p) > 0; {
		k := min(len(p), writeChunk)
		if err := n.writeOwned(p[:k], off, t.PutToken); err != nil {
			return toCode(err)
		}
		p, off = p[k:], off+int64(k)
	}
	n.recordWrite(wire.Object{Key: t.Key}, t.Offset, t.Length, t.CRC, t.PutToken)
	return nil
}
