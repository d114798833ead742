package master

import (
	"context"
	"sync"
	"time"

	"github.com/tierstore/tierstore/internal/errcode"
	"github.com/tierstore/tierstore/masterapi"
)

// pullBatch bounds the entries of one PullRemovals answer.
const pullBatch = 16384

// forgetLimit bounds a node's forget list; beyond it the oldest half is
// dropped (a record the node was not told to forget may be re-registered
// by a later master: a copy of the object's current version, see
// docs/design.md, "Crash windows").
const forgetLimit = 1 << 16

// removalTrimEvery is how often Tick trims the removal log.
const removalTrimEvery = time.Minute

// forgetBox is a node incarnation's list of DRAM records to forget: those
// of DRAM replicas the master dropped (eviction, bad replica, abandoned
// put) while the object lives on, delivered with the node's next pull.
type forgetBox struct {
	mu   sync.Mutex // protects refs; a leaf
	refs []masterapi.DRAMRef
}

func (b *forgetBox) add(r masterapi.DRAMRef) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.refs) >= forgetLimit {
		b.refs = append(b.refs[:0], b.refs[len(b.refs)/2:]...)
	}
	b.refs = append(b.refs, r)
}

func (b *forgetBox) take() []masterapi.DRAMRef {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := b.refs
	b.refs = nil
	return out
}

// PullRemovals implements API.
func (s *Service) PullRemovals(ctx context.Context, req masterapi.PullRequest) (masterapi.PullReply, error) {
	if err := s.gate(ctx); err != nil {
		return masterapi.PullReply{}, err
	}
	n := s.lookupNode(req.Node)
	if n == nil {
		return masterapi.PullReply{}, s.observe(errcode.Errorf(errcode.NeedRemount, "master: pull_removals: unknown node %q", req.Node))
	}
	n.lastPing.Store(s.now())
	id, floor, durable := s.rlog.position()
	rep := masterapi.PullReply{Log: id, Through: durable}
	if req.DRAM.Log != "" {
		n.setDRAMCursor(req.DRAM.Log, req.DRAM.Seq)
	}
	stale := func(c masterapi.RemovalCursor) bool { return c.Log != id || c.Seq < floor }
	from := durable
	if req.DRAM.Log != "" { // "": a new process, its DRAM holds nothing yet
		if stale(req.DRAM) {
			rep.DropDRAM = true
		} else {
			from = min(from, req.DRAM.Seq)
		}
	}
	if req.HasSSD {
		// An SSD that never pulled (a new directory: the node stores its
		// cursor with every SSD it writes to) is checked against every
		// retained entry instead (ssdCursor).
		if req.SSD.Log != "" && stale(req.SSD) {
			rep.DropSSD = true
		} else {
			from = min(from, req.SSD.Seq)
		}
		s.setCursor(req.Node, req.SSD)
	}
	rep.Removals, rep.More = s.rlog.since(from, pullBatch)
	if rep.More {
		rep.Through = rep.Removals[len(rep.Removals)-1].Seq
	}
	rep.Forget = n.forget.take()
	if rep.DropDRAM || rep.DropSSD {
		s.log.Warn("a node's removal cursor predates this removal log: it drops its copies", "node", req.Node,
			"log", id, "floor", floor, "dram_cursor", req.DRAM, "ssd_cursor", req.SSD, "drop_dram", rep.DropDRAM, "drop_ssd", rep.DropSSD)
	}
	return rep, nil
}

// setCursor records node id's SSD cursor (its last pull).
func (s *Service) setCursor(id string, c masterapi.RemovalCursor) {
	s.cursorMu.Lock()
	s.cursors[id] = c
	s.cursorMu.Unlock()
}

// ssdCursor is the sequence number up to which node id has applied the
// log to its SSD, as its last pull said; 0 when it never pulled (or its
// cursor names another log): every retained entry is then checked.
func (s *Service) ssdCursor(id string) uint64 {
	s.cursorMu.Lock()
	c := s.cursors[id]
	s.cursorMu.Unlock()
	if c.Log != s.rlog.id {
		return 0
	}
	return c.Seq
}

// removedSSDMany says, for every item of a re-registration chunk, why
// node id's SSD copy of its key must not be re-registered: an entry above
// the node's cursor covers it (out[i] set). One lock of the removal log
// per chunk.
func (s *Service) removedSSDMany(id string, items []reItem, out []error) {
	cur := s.ssdCursor(id)
	l := s.rlog
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.set.Len() == 0 {
		return
	}
	for i := range items {
		if seq := l.set.Latest(items[i].key); seq > cur {
			out[i] = errcode.Errorf(errcode.ObjectNotFound, "master: re_register: removed (removal log entry %d, above node %q's cursor %d); delete the SSD copy", seq, id, cur)
		}
	}
}

// removedDRAM says why a DRAM record must not be re-registered: an entry
// covers it (its put token is below the entry's sequence number: a
// removal, or an acknowledged DRAM eviction), or it predates the removal
// log. Nil otherwise.
func (s *Service) removedDRAM(m masterapi.DRAMObject) error {
	if m.PutToken < s.rlog.origin {
		return errcode.Errorf(errcode.ObjectNotFound, "master: re_register_dram: put %d predates the removal log (origin %d)", m.PutToken, s.rlog.origin)
	}
	if seq := s.rlog.latest(m.Key); seq > m.PutToken {
		return errcode.Errorf(errcode.ObjectNotFound, "master: re_register_dram: put %d was removed (removal log entry %d)", m.PutToken, seq)
	}
	if seq := s.rlog.latestDRAM(m.Key); seq > m.PutToken {
		return errcode.Errorf(errcode.ObjectNotFound, "master: re_register_dram: the DRAM copy of put %d was evicted (removal log entry %d)", m.PutToken, seq)
	}
	return nil
}

// forgetRecord queues the node's DRAM record of the DRAM replica m for
// forgetting. Caller holds the shard lock.
func (s *Service) forgetRecord(m *dramReplica) {
	if m.seg != nil && m.complete && m.seg.live() {
		m.seg.node.forget.add(masterapi.DRAMRef{Offset: m.off, Token: m.token})
	}
}

// trimRemovals drops the entries older than the retention or beyond the
// limit, at most every removalTrimEvery.
func (s *Service) trimRemovals(now int64) {
	if now-s.lastTrim.Load() < removalTrimEvery.Nanoseconds() {
		return
	}
	s.lastTrim.Store(now)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.rlog.trim(ctx, now-s.cfg.RemovalLogRetention.Nanoseconds(), s.cfg.RemovalLogLimit); err != nil {
		s.log.Warn("trimming the removal log failed; will retry", "err", err)
	}
}

// RemovalLogInfo describes the Service's removal log (Stats, tests).
type RemovalLogInfo struct {
	ID            string
	Origin, Floor uint64
	Durable       uint64 // largest durable sequence number
	Retained      int    // entries kept
	Pending       int    // of those, not durable yet
}

// RemovalLog describes the removal log.
func (s *Service) RemovalLog() RemovalLogInfo {
	id, floor, durable := s.rlog.position()
	ret, pend := s.rlog.stats()
	return RemovalLogInfo{ID: id, Origin: s.rlog.origin, Floor: floor, Durable: durable, Retained: ret, Pending: pend}
}
