package master

import (
	"context"
	"time"

	"github.com/tierstore/tierstore/internal/errcode"
	"github.com/tierstore/tierstore/masterapi"
)

// Offload under pressure (issue 24 item 3). A node fetches its offload and
// promotion tasks in a Heartbeat, on its heartbeat tick; with a full DRAM
// and eager offload that let a put in only once a tick (one tick's worth of
// offloaded objects then becomes evictable) while the disk idled. A node
// also keeps a WaitOffload call open: it returns at once when the node's
// offload is pressing, and the node runs a heartbeat then rather than at
// its next tick. Pressing means some task of the node is queued (not
// fetched) and
//
//   - a PutStart waits for DRAM room (waitForRoom rings every node), or
//   - the queued tasks' source bytes reach wakeShare of the node's DRAM
//     (queueTask rings the node), or
//   - a promotion is queued for the node (a prefetch or an SSD hit the
//     policy found worth a DRAM copy: promote.go rings the node; one that
//     found no room presses again only once the node has answered every
//     offload task it fetched, its victims' among them, and is tried at
//     most maxPromoTries times).
//
// Each wait re-checks the condition after registering on the node's
// broadcast, so a ring between a check and the wait is never lost; a
// WaitOffload that finds the condition true answers at once (level, not
// edge), and the node's heartbeat, which takes the queued tasks, is what
// makes it false again.

// wakeShare: queued offload bytes past this share of a node's DRAM wake
// the node without waiting for a put to be refused room.
const wakeShare = 4 // a quarter

// offloadPressing reports whether node n should fetch its tasks now.
func (s *Service) offloadPressing(n *node) bool {
	if promos, fresh := n.promo.counts(); fresh > 0 {
		return true
	} else if promos > 0 {
		// Candidates that found no room wait for the offload of the
		// victims their eviction queued: tried again once the node has
		// answered every task it fetched (promote.go, maxPromoTries).
		if _, inflight := n.box.counts(); inflight == 0 {
			return true
		}
	}
	queued, bytes := n.box.queuedBytes()
	if queued == 0 {
		return false
	}
	if s.room.waiting.Load() > 0 {
		return true
	}
	return bytes*wakeShare >= s.nodeDRAM(n)
}

// nodeDRAM returns the bytes of n's mounted segments.
func (s *Service) nodeDRAM(n *node) int64 {
	s.nodesMu.RLock()
	defer s.nodesMu.RUnlock()
	var total int64
	for _, g := range n.segments {
		total += g.size
	}
	return total
}

// wakeNodes rings every node: a put is about to wait for room.
func (s *Service) wakeNodes() {
	s.nodesMu.RLock()
	defer s.nodesMu.RUnlock()
	for _, n := range s.nodes {
		n.wake.signal()
	}
}

// WaitOffload implements masterapi.OffloadWaiter: it returns true as soon
// as nodeID's offload is pressing (at once if it is), false once timeout
// (capped at masterapi.MaxOffloadWait) passed. ErrNeedRemount for an
// unknown node. It is not a ping: a node that only waits expires.
func (s *Service) WaitOffload(ctx context.Context, nodeID string, timeout time.Duration) (bool, error) {
	if err := s.gate(ctx); err != nil {
		return false, err
	}
	n := s.lookupNode(nodeID)
	if n == nil {
		return false, s.observe(errcode.Errorf(errcode.NeedRemount, "master: wait_offload: unknown node %q", nodeID))
	}
	timeout = min(max(timeout, 0), masterapi.MaxOffloadWait)
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	ch, done := n.wake.wait()
	defer done()
	for {
		if n.removalOwed(s.now()) {
			return true, nil // pull the removal log now (removewait.go)
		}
		if s.offloadPressing(n) {
			s.cnt.offloadWakes.Add(1)
			return true, nil
		}
		if n.dead.Load() {
			return false, s.observe(errcode.Errorf(errcode.NeedRemount, "master: wait_offload: node %q expired", nodeID))
		}
		select {
		case <-ch:
			ch = n.wake.rearm()
		case <-timer.C:
			return false, nil
		case <-ctx.Done():
			return false, ctx.Err()
		case <-s.stop:
			return false, ErrClosed
		}
	}
}
