package node

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tierstore/tierstore/internal/crc32c"
	"github.com/tierstore/tierstore/internal/wire"
	"github.com/tierstore/tierstore/masterapi"
)

// A node with highly available masters (docs/ha.md).
//
// Rebuild: the node records, per range of its segment, the object its
// last complete write stored (the write's header carries the key and the
// put's pins; its size, CRC32C and put token come with it). Whenever it
// mounts (at start, and at every remount: the master restarted, a new
// leader was elected, or the node expired), it mounts with HoldAllocation
// and re-registers those objects (ReRegisterDRAMObjects): the master
// allocates nothing in the segment until the last call (done), so no put
// is given the range of a live object. Before a record is sent its bytes
// are checked against its CRC32C; a record whose bytes changed (its range
// was reused by a later put), that overlaps a newer put's record, or that
// the master refuses, is forgotten. The SSD objects are re-registered
// after, as before (reregister, by the heartbeat loop).
//
// Fencing by term: the node keeps the highest leadership term it has seen
// (Ping answers, offload tasks, its master connection's resolver) and
// ignores a Ping answer or an offload task of an older term: a deposed
// leader still running (paused, partitioned) cannot make it remount or
// offload. Every other answer of an older term is refused by the etcd://
// mastergrpc.Client itself (mastergrpc.TermTrailer).
//
// A node whose master connection follows an elected leader
// (leaderFollower: mastergrpc.Client dialed with etcd://) pings at once
// when the resolved leader changes, so a new leader hears from it (and
// answers NEED_REMOUNT, starting the rebuild) within milliseconds instead
// of at the next ping.
//
// Resurrection: the records are of complete writes, not of objects the
// master still knows. The removal log keeps removed objects and DRAM
// copies evicted by EvictDRAM out (the node pulls it before it
// re-registers; removals.go). A DRAM copy the old leader dropped without
// an entry (evicted for room, reported bad) whose forget list the node had
// not pulled, and whose range no later put has overwritten, comes back
// after a failover: a copy of the object's current version (docs/design.md,
// "Crash windows").

// nodeHA is the node's high-availability state.
type nodeHA struct {
	term atomic.Uint64 // the highest leadership term seen

	// pingMu serialises pingOnce between the ping loop and followLeader.
	pingMu sync.Mutex
	// regMu serialises DRAM re-registrations.
	regMu sync.Mutex
	// dramPending: the last DRAM re-registration did not finish (the
	// segment stays held at the master); the ping loop retries it.
	dramPending atomic.Bool

	recMu   sync.Mutex // protects records and pruneAt
	records map[int64]dramRecord
	pruneAt int // prune (drop overlapped records) when records grows past it
}

// dramRecord is the object the last complete write of a range stored.
type dramRecord struct {
	off, len int64
	token    uint64
	crc      uint32
	obj      wire.Object
}

// leaderFollower is a master connection that follows an elected leader
// (mastergrpc.Client dialed with etcd://).
type leaderFollower interface {
	LeaderChanged() (term uint64, changed <-chan struct{})
}

// recordWrite records that the complete write of token to [off, off+n)
// stored the object o with CRC32C crc, unless a newer put has claimed part
// of that range since (then that put's write will be recorded instead).
func (n *Node) recordWrite(o wire.Object, off, length int64, crc uint32, token uint64) {
	if o.Key == "" || length <= 0 || n.removedLately(o.Key, token) {
		return
	}
	n.ownMu.Lock()
	defer n.ownMu.Unlock()
	if n.owners.check(off, off+length, token) != nil {
		return
	}
	h := &n.ha
	h.recMu.Lock()
	defer h.recMu.Unlock()
	if h.records == nil {
		h.records = map[int64]dramRecord{}
		h.pruneAt = claimsLimit(n.seg.Size())
	}
	h.records[off] = dramRecord{off: off, len: length, token: token, crc: crc, obj: o}
	if len(h.records) > h.pruneAt {
		h.pruneLocked()
		h.pruneAt = max(claimsLimit(n.seg.Size()), 2*len(h.records))
	}
}

// pruneLocked drops every record overlapped by a record of a newer put and
// returns the rest sorted by offset. Caller holds recMu.
func (h *nodeHA) pruneLocked() []dramRecord {
	recs := make([]dramRecord, 0, len(h.records))
	for _, r := range h.records {
		recs = append(recs, r)
	}
	slices.SortFunc(recs, func(a, b dramRecord) int { return compareInt64(a.off, b.off) })
	out := recs[:0]
	for _, r := range recs {
		// Records before r are disjoint and sorted: r overlaps only
		// the last ones kept whose end is past r.off.
		keep := true
		for len(out) > 0 && out[len(out)-1].off+out[len(out)-1].len > r.off {
			last := out[len(out)-1]
			if last.token > r.token {
				keep = false
				break
			}
			out = out[:len(out)-1]
			delete(h.records, last.off)
		}
		if keep {
			out = append(out, r)
		} else {
			delete(h.records, r.off)
		}
	}
	return out
}

func compareInt64(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// recordCount is how many DRAM records the node keeps.
func (h *nodeHA) recordCount() int64 {
	h.recMu.Lock()
	defer h.recMu.Unlock()
	return int64(len(h.records))
}

// forgetAll drops every record and returns how many there were.
func (h *nodeHA) forgetAll() int {
	h.recMu.Lock()
	defer h.recMu.Unlock()
	n := len(h.records)
	clear(h.records)
	return n
}

// forgetCovered drops the records an entry of set removes or evicts (an
// entry covering the key's DRAM copies with a sequence number above the
// record's put token) and returns how many.
func (h *nodeHA) forgetCovered(set *masterapi.RemovalSet) int {
	h.recMu.Lock()
	defer h.recMu.Unlock()
	n := 0
	for off, r := range h.records {
		if set.LatestDRAM(r.obj.Key) > r.token {
			delete(h.records, off)
			n++
		}
	}
	return n
}

// forgetRefs drops the records named by refs (range and put token) and
// returns how many it found.
func (h *nodeHA) forgetRefs(refs []masterapi.DRAMRef) int {
	if len(refs) == 0 {
		return 0
	}
	h.recMu.Lock()
	defer h.recMu.Unlock()
	n := 0
	for _, ref := range refs {
		if r, ok := h.records[ref.Offset]; ok && r.token == ref.Token {
			delete(h.records, ref.Offset)
			n++
		}
	}
	return n
}

// forgetOverlapped drops every record that a claim of a newer put
// overlaps (its write started, so the record's bytes are going) and
// returns how many. Caller holds ownMu (the claims are n.owners).
func (n *Node) forgetOverlapped() int {
	h := &n.ha
	h.recMu.Lock()
	defer h.recMu.Unlock()
	dropped := 0
	for off, r := range h.records {
		newer := false
		n.owners.each(r.off, r.off+r.len, func(cl claim) bool {
			newer = cl.token > r.token
			return !newer
		})
		if newer {
			delete(h.records, off)
			dropped++
		}
	}
	return dropped
}

// forget drops the record at off if it is still r.
func (h *nodeHA) forget(r dramRecord) {
	h.recMu.Lock()
	defer h.recMu.Unlock()
	if cur, ok := h.records[r.off]; ok && cur.token == r.token {
		delete(h.records, r.off)
	}
}

// dramRegBatch is the most objects of one ReRegisterDRAMObjects call.
const dramRegBatch = 4096

// reRegisterDRAM re-registers the segment's recorded objects at the
// master (the segment was just mounted with HoldAllocation), then ends the
// re-registration (done). On failure the segment stays held at the master
// and dramPending is set for the ping loop to retry.
func (n *Node) reRegisterDRAM(ctx context.Context) error {
	h := &n.ha
	h.regMu.Lock()
	defer h.regMu.Unlock()
	h.dramPending.Store(true)
	// The log first: records it removes are forgotten, and all of them
	// when the master's log does not cover them (docs/design.md,
	// invariant 10).
	if err := n.syncRemovals(ctx, false); err != nil {
		n.log.Warn("DRAM re-registration: pulling the removal log failed; will retry", "err", err)
		return err
	}
	objs, recs := n.checkedRecords()
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	kept := 0
	for first := true; first || len(objs) > 0; first = false {
		k := min(len(objs), dramRegBatch)
		errs, err := n.m.ReRegisterDRAMObjects(ctx, n.name, n.segName, objs[:k], k == len(objs))
		if err != nil {
			n.log.Warn("re-registering DRAM objects failed; will retry", "err", err)
			return err
		}
		for i, e := range errs {
			if e != nil && i < k {
				h.forget(recs[i])
				n.log.Debug("DRAM object refused at re-registration", "key", objs[i].Key, "err", e)
			} else if e == nil {
				kept++
			}
		}
		objs, recs = objs[k:], recs[k:]
	}
	h.dramPending.Store(false)
	if kept > 0 {
		n.log.Info("re-registered DRAM objects", "objects", kept)
	}
	return nil
}

// checkedRecords returns the records whose bytes still match their CRC32C
// (forgetting the others), sorted by offset, and as DRAMObjects.
func (n *Node) checkedRecords() ([]masterapi.DRAMObject, []dramRecord) {
	h := &n.ha
	h.recMu.Lock()
	recs := h.pruneLocked()
	recs = slices.Clone(recs)
	h.recMu.Unlock()
	view, release := n.seg.pin()
	defer release()
	objs := make([]masterapi.DRAMObject, 0, len(recs))
	good := recs[:0]
	for _, r := range recs {
		b, err := view(r.off, int(r.len))
		if err != nil || crc32c.Checksum(b) != r.crc {
			h.forget(r)
			continue
		}
		good = append(good, r)
		objs = append(objs, masterapi.DRAMObject{Key: r.obj.Key, Offset: r.off, Length: r.len, CRC: r.crc,
			PutToken: r.token, SoftPin: r.obj.SoftPin, HardPin: r.obj.HardPin})
	}
	return objs, good
}

// afterMount runs after every successful mount: the DRAM re-registration
// that releases the segment's hold.
func (n *Node) afterMount(ctx context.Context) {
	if err := n.reRegisterDRAM(ctx); err != nil {
		n.log.Warn("DRAM re-registration pending", "err", err)
	}
}

// pingLocked is the ping loop's tick: a pending DRAM re-registration, then
// a ping.
func (n *Node) pingLocked() {
	n.ha.pingMu.Lock()
	defer n.ha.pingMu.Unlock()
	if n.ha.dramPending.Load() {
		n.afterMount(n.ctx)
	}
	n.pingOnce()
}

// staleTerm records term and reports whether it is older than the highest
// term seen (0: no high availability, never stale).
func (n *Node) staleTerm(term uint64) bool {
	if term == 0 {
		return false
	}
	for {
		h := n.ha.term.Load()
		if term < h {
			n.log.Warn("answer of a deposed leader ignored", "term", term, "highest_term", h)
			return true
		}
		if term == h || n.ha.term.CompareAndSwap(h, term) {
			return false
		}
	}
}

// dropStaleTasks removes the offload tasks of a term older than the highest
// seen (a deposed leader's).
func (n *Node) dropStaleTasks(tasks []masterapi.OffloadTask) []masterapi.OffloadTask {
	if len(tasks) == 0 || !n.staleTerm(tasks[0].Term) {
		return tasks
	}
	return nil
}

// Term is the highest leadership term the node has seen (0 without high
// availability).
func (n *Node) Term() uint64 { return n.ha.term.Load() }

// followLeader pings at once whenever the master connection resolves a new
// leader, so the new leader starts the rebuild (NEED_REMOUNT) without
// waiting for the next ping.
func (n *Node) followLeader() {
	f, ok := n.m.(leaderFollower)
	if !ok {
		return
	}
	if _, ch := f.LeaderChanged(); ch == nil {
		return // host:port: never changes
	}
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		for {
			term, ch := f.LeaderChanged()
			n.staleTerm(term)
			select {
			case <-n.ctx.Done():
				return
			case <-ch:
			}
			n.pingLocked()
			n.reRegisterSSDNow()
		}
	}()
}

// reRegisterSSDNow runs a pending SSD re-registration at once unless an
// offload round (or reconcile) holds roundMu; then the heartbeat loop runs
// it after that round.
func (n *Node) reRegisterSSDNow() {
	if n.tier == nil || !n.reregister.Load() || !n.roundMu.TryLock() {
		return
	}
	defer n.roundMu.Unlock()
	if n.reregister.Swap(false) {
		n.reRegister(n.ctx)
	}
}
