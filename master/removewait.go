package master

import (
	"context"
	"sync"
	"time"

	"github.com/tierstore/tierstore/internal/errcode"
)

// Forced removals of leased objects wait for the holders (issue 24,
// docs/design.md, "Replica-location cache"). A client keeps the answer of
// a lookup (the object's replicas) until shortly before the read lease that
// lookup granted ends, and reads a cached key straight from the node. A
// non-forced removal never touches a leased object, so those entries are
// safe from it; a forced one removes the object at once, and its holders
// learn of it only when they pull the removal log (every ping interval).
// So that a cached read which starts after a forced Remove (RemoveAll,
// RemoveByRegex) returned is refused by the node, such a removal of an
// object whose lease is active answers only once every node that held a
// copy has applied the removal to its DRAM records (the node then refuses
// the range, and an SSD read of the key until its SSD has applied it too:
// node/removals.go), or once the lease has ended (after which no client
// uses the entry), whichever comes first. The master rings the holders
// (WaitOffload answers pressed while a removal is owed to the node, and
// the node pulls the log at once), so the wait is about one pull's round
// trip; a holder that cannot be reached holds the removal until the lease
// ends.

// holdersWait is what a forced removal of leased objects waits for: the
// nodes that held copies, and the end of the latest lease (unix ns).
type holdersWait struct {
	nodes []*node
	until int64
	keys  []string // the leased objects' keys (keyWaits)
}

// keyWaits are the keys whose forced removal waits for the holders. A
// PutStart of such a key waits until the removal answers: a new object
// of the key acknowledged before the removal reached the holders would be
// followed, for a client holding the old object's location, by a read of
// the removed bytes.
type keyWaits struct {
	mu sync.Mutex // protects m
	m  map[string]*keyWait
}

type keyWait struct {
	n    int           // removals of the key waiting
	done chan struct{} // closed when the last ends
}

// add registers key (under its shard lock, before the removal unlocks it).
func (w *keyWaits) add(key string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.m == nil {
		w.m = map[string]*keyWait{}
	}
	kw := w.m[key]
	if kw == nil {
		kw = &keyWait{done: make(chan struct{})}
		w.m[key] = kw
	}
	kw.n++
}

// release ends one registration of key.
func (w *keyWaits) release(key string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if kw := w.m[key]; kw != nil {
		if kw.n--; kw.n == 0 {
			close(kw.done)
			delete(w.m, key)
		}
	}
}

// of returns the channel closed when key's removals end, or nil.
func (w *keyWaits) of(key string) <-chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	if kw := w.m[key]; kw != nil {
		return kw.done
	}
	return nil
}

// hold registers w's keys in s.keyWaits (caller holds their shard lock,
// or, for a scan, the lock of the shard of the key just added).
func (s *Service) holdKey(w *holdersWait, key string) {
	w.keys = append(w.keys, key)
	s.keyWaits.add(key)
}

// releaseKeys ends w's registrations.
func (s *Service) releaseKeys(w holdersWait) {
	for _, k := range w.keys {
		s.keyWaits.release(k)
	}
}

// add records o's holders when o is leased at now, and reports whether it
// did. Caller holds the shard lock, before o's replicas are dropped.
func (w *holdersWait) add(o *object, now int64) bool {
	if !o.leased(now) || o.empty() {
		return false
	}
	w.until = max(w.until, o.leaseUntil)
	addNode := func(n *node) {
		for _, m := range w.nodes {
			if m == n {
				return
			}
		}
		w.nodes = append(w.nodes, n)
	}
	for _, m := range o.drams() {
		addNode(m.seg.node)
	}
	for _, r := range o.ssd {
		addNode(r.node)
	}
	return true
}

// removalWaitPoll is how often a wait re-reads the master's clock (a
// manual clock in tests moves without a signal).
const removalWaitPoll = 20 * time.Millisecond

// waitHolders waits until every node of w has applied the removal log
// through seq to its DRAM records, or w's lease has ended (by the master's
// clock, or the same span of real time), or ctx ends (its error).
func (s *Service) waitHolders(ctx context.Context, w holdersWait, seq uint64) error {
	defer s.releaseKeys(w)
	if len(w.nodes) == 0 {
		return nil
	}
	id, _, _ := s.rlog.position()
	for _, n := range w.nodes {
		n.owe(id, seq, w.until)
		n.wake.signal()
	}
	start := time.Now()
	span := time.Duration(w.until - s.now())
	for _, n := range w.nodes {
		ch, done := n.pulled.wait()
		for !n.appliedThrough(id, seq) {
			if s.now() >= w.until || time.Since(start) >= span {
				done()
				s.cnt.removalWaitsTimedOut.Add(1)
				s.log.Warn("a forced removal of a leased object answered at the lease's end, before a holder applied it", "node", n.id, "seq", seq)
				return nil
			}
			t := time.NewTimer(removalWaitPoll)
			select {
			case <-ch:
				ch = n.pulled.rearm()
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				done()
				return errcode.Errorf(errcode.ContextCanceled, "master: remove: waiting for node %q to apply the removal of a leased object: %v", n.id, ctx.Err())
			case <-s.stop:
				t.Stop()
				done()
				return ErrClosed
			}
			t.Stop()
		}
		done()
	}
	s.cnt.removalWaits.Add(1)
	return nil
}

// owe records that a forced removal waits, until the master's time until
// (unix ns), for this node to apply the removal log (log id) through seq:
// WaitOffload answers pressed until it has, or until then.
func (n *node) owe(id string, seq uint64, until int64) {
	n.cursorMu.Lock()
	defer n.cursorMu.Unlock()
	if n.owedLog != id {
		n.owedLog, n.owed = id, 0
	}
	n.owed = max(n.owed, seq)
	n.owedUntil = max(n.owedUntil, until)
}

// removalOwed reports whether a forced removal waits for this node to pull
// the removal log (at now, the master's unix ns).
func (n *node) removalOwed(now int64) bool {
	n.cursorMu.Lock()
	defer n.cursorMu.Unlock()
	return n.owed > 0 && now < n.owedUntil && !(n.dramLog == n.owedLog && n.dramSeq >= n.owed)
}

// appliedThrough reports whether the node's DRAM cursor (its last pull)
// is at or past seq of log id.
func (n *node) appliedThrough(id string, seq uint64) bool {
	n.cursorMu.Lock()
	defer n.cursorMu.Unlock()
	return n.dramLog == id && n.dramSeq >= seq
}

// setDRAMCursor records the DRAM cursor a pull of the node named, and
// wakes the removals waiting for it.
func (n *node) setDRAMCursor(log string, seq uint64) {
	n.cursorMu.Lock()
	if log != n.dramLog || seq > n.dramSeq {
		n.dramLog, n.dramSeq = log, seq
	}
	n.cursorMu.Unlock()
	n.pulled.signal()
}
