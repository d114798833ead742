package node

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/tierstore/tierstore/internal/errcode"
	"github.com/tierstore/tierstore/masterapi"
	"github.com/tierstore/tierstore/tier"
)

// The node's side of the removal log (docs/design.md, "Object lifecycle",
// invariant 10). The node pulls the master's log (every PingInterval, and
// before every re-registration and every offload round's writes), applies
// each entry to the copies it holds, and reports how far it got with its
// next pull:
//
//   - DRAM: a record of key K written by put t is forgotten when an entry
//     covering K has a sequence number above t (tokens make it exact; a
//     DRAM eviction's entry too), or when the master lists it in the
//     pull's forget list (a replica dropped without an entry: evicted to
//     make room, reported bad, abandoned). The DRAM cursor lives in memory: a new process's DRAM is
//     empty. Entries applied in the last appliedKeep are remembered, so
//     that a put that completes after its object was removed (a forced
//     Remove of a put in progress) is not recorded.
//   - SSD: every covered key is removed in one synced index batch, then
//     the cursor is stored with the tier's contents (tier mark). SSD
//     copies carry no token: a copy is exact relative to the cursor,
//     because the SSD part is applied under roundMu, like offload rounds,
//     and each round applies the log between fetching its tasks and
//     writing them.
//   - A tier whose cursor names another log, or lies below the log's
//     floor, cannot tell removed copies from the others: every copy of
//     that tier is dropped (the master says so: PullReply.DropDRAM,
//     DropSSD).

// appliedKeep is how long applied entries are remembered for refusing to
// record a late write they cover.
const appliedKeep = 10 * time.Minute

// pullRounds bounds the pulls of one sync (each takes up to 16384 entries).
const pullRounds = 64

// nodeRemovals is the node's removal-log state.
type nodeRemovals struct {
	// syncMu serialises syncs (the pull loop, re-registrations, rounds).
	syncMu sync.Mutex

	mu   sync.Mutex // protects the fields below
	dram masterapi.RemovalCursor
	ssd  masterapi.RemovalCursor
	// applied indexes the entries applied in the last appliedKeep; times
	// holds each one's sequence number and when it was applied, in order.
	applied *masterapi.RemovalSet
	times   []appliedAt
}

type appliedAt struct {
	e  masterapi.Removal
	at time.Time
}

// loadRemovalCursor reads the SSD cursor from the tier's mark.
func (n *Node) loadRemovalCursor() error {
	n.rem.applied = masterapi.NewRemovalSet()
	if n.tier == nil {
		return nil
	}
	b, err := n.tier.Mark()
	if err != nil {
		return err
	}
	c, err := parseCursor(b)
	if err != nil {
		n.log.Warn("the SSD tier's removal cursor does not parse; the master will have the node drop its SSD copies", "err", err)
	}
	n.rem.ssd = c
	return nil
}

func formatCursor(c masterapi.RemovalCursor) []byte {
	return []byte(c.Log + " " + strconv.FormatUint(c.Seq, 10) + "\n")
}

func parseCursor(b []byte) (masterapi.RemovalCursor, error) {
	if len(b) == 0 {
		return masterapi.RemovalCursor{}, nil
	}
	log, seq, ok := strings.Cut(strings.TrimSpace(string(b)), " ")
	s, err := strconv.ParseUint(seq, 10, 64)
	if !ok || err != nil || log == "" {
		return masterapi.RemovalCursor{}, fmt.Errorf("node: removal cursor %q", b)
	}
	return masterapi.RemovalCursor{Log: log, Seq: s}, nil
}

// syncRemovals pulls the removal log until the master has nothing new for
// the tiers it applies: DRAM always, the SSD with ssd (the caller then
// holds roundMu). The last pull tells the master the node's cursors.
func (n *Node) syncRemovals(ctx context.Context, ssd bool) error {
	r := &n.rem
	r.syncMu.Lock()
	defer r.syncMu.Unlock()
	ssd = ssd && n.tier != nil
	ctx, cancel := context.WithTimeout(ctx, masterCallTimeout)
	defer cancel()
	for range pullRounds {
		r.mu.Lock()
		req := masterapi.PullRequest{Node: n.name, DRAM: r.dram, SSD: r.ssd, HasSSD: n.tier != nil}
		r.mu.Unlock()
		rep, err := n.m.PullRemovals(ctx, req)
		if err != nil {
			return fmt.Errorf("node: pulling the removal log: %w", err)
		}
		at := masterapi.RemovalCursor{Log: rep.Log, Seq: rep.Through}
		dramNew := rep.DropDRAM || len(rep.Forget) > 0 || newer(rep, req.DRAM)
		ssdNew := ssd && (rep.DropSSD || newer(rep, req.SSD))
		if !dramNew && !ssdNew && !rep.More {
			return nil
		}
		n.applyDRAM(rep, req.DRAM)
		if ssd {
			if err := n.applySSD(rep, req.SSD); err != nil {
				return err
			}
		}
		r.mu.Lock()
		if r.dram.Log != at.Log || r.dram.Seq < at.Seq {
			r.dram = at
		}
		if ssd {
			r.ssd = at
		}
		r.mu.Unlock()
	}
	return nil
}

// newer reports whether rep moves cursor c: another log, entries above
// it, or a later position.
func newer(rep masterapi.PullReply, c masterapi.RemovalCursor) bool {
	return c.Log != rep.Log || c.Seq < rep.Through
}

// above returns rep's entries the tier at cursor c has not applied (all
// of them when c names another log).
func above(rep masterapi.PullReply, c masterapi.RemovalCursor) []masterapi.Removal {
	if c.Log != rep.Log {
		return rep.Removals
	}
	i := 0
	for i < len(rep.Removals) && rep.Removals[i].Seq <= c.Seq {
		i++
	}
	return rep.Removals[i:]
}

// applyDRAM applies rep to the DRAM records (the tier at cursor c).
func (n *Node) applyDRAM(rep masterapi.PullReply, c masterapi.RemovalCursor) {
	if rep.DropDRAM {
		dropped := n.ha.forgetAll()
		n.log.Warn("the master's removal log does not cover this node's DRAM records (it restarted without a durable log, or the node was away too long): all forgotten", "records", dropped)
	}
	es := above(rep, c)
	set := masterapi.NewRemovalSet()
	now := time.Now()
	r := &n.rem
	r.mu.Lock()
	for _, e := range es {
		if err := set.Add(e); err != nil {
			n.log.Warn("removal log entry ignored", "seq", e.Seq, "err", err)
			continue
		}
		if e.Kind.DRAMOnly() {
			continue // an eviction: a later write of the key (a promotion) is recorded
		}
		_ = r.applied.Add(e)
		r.times = append(r.times, appliedAt{e: e, at: now})
	}
	r.pruneAppliedLocked(now)
	r.mu.Unlock()
	forgot := 0
	if set.Len() > 0 {
		forgot = n.ha.forgetCovered(set)
	}
	forgot += n.ha.forgetRefs(rep.Forget)
	if forgot > 0 {
		n.log.Debug("DRAM records forgotten (removed or evicted at the master)", "records", forgot)
	}
}

// pruneAppliedLocked forgets the applied entries older than appliedKeep.
func (r *nodeRemovals) pruneAppliedLocked(now time.Time) {
	i := 0
	for i < len(r.times) && now.Sub(r.times[i].at) > appliedKeep {
		r.applied.Drop(r.times[i].e)
		i++
	}
	if i > 0 {
		r.times = append(r.times[:0], r.times[i:]...)
	}
}

// removedLately reports whether an entry applied lately covers a DRAM
// record of key written by put token (recordWrite then does not record it).
func (n *Node) removedLately(key string, token uint64) bool {
	r := &n.rem
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.applied != nil && r.applied.Latest(key) > token
}

// removedOnSSDPending returns the sequence number of a removal entry
// covering key that the node applied to its DRAM records and not yet to
// its SSD (the SSD part waits for roundMu), or 0: an SSD read of such a
// key is refused as removed. A forced removal of a leased object answers
// once the holders' DRAM cursors pass it (master/removewait.go); from then
// on no read of a holder serves the key, though a client may still hold
// its replica locations. Cheap when both cursors agree.
func (n *Node) removedOnSSDPending(key []byte) uint64 {
	r := &n.rem
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.applied == nil || (r.dram.Log == r.ssd.Log && r.dram.Seq <= r.ssd.Seq) {
		return 0
	}
	seq := r.applied.Latest(string(key))
	if r.dram.Log == r.ssd.Log && seq <= r.ssd.Seq {
		return 0
	}
	return seq
}

// applySSD applies rep to the SSD (the tier at cursor c) and stores the
// new cursor with it. Caller holds roundMu.
func (n *Node) applySSD(rep masterapi.PullReply, c masterapi.RemovalCursor) error {
	var keys [][]byte
	var err error
	if rep.DropSSD {
		keys, err = n.ssdKeys(func(string) bool { return true })
	} else if es := above(rep, c); len(es) > 0 {
		keys, err = n.coveredSSDKeys(es)
	}
	if err != nil {
		return fmt.Errorf("node: applying the removal log to the SSD: %w", err)
	}
	removed := 0
	for len(keys) > 0 {
		k := min(len(keys), reRegisterBatch)
		got, err := n.tier.RemoveKeys(keys[:k])
		if err != nil && !errors.Is(err, tier.ErrNotFound) {
			return fmt.Errorf("node: applying the removal log to the SSD: %w", err)
		}
		removed += got
		keys = keys[k:]
	}
	if rep.DropSSD {
		n.log.Warn("the master's removal log does not cover this node's SSD (it restarted without a durable log, or the node was away too long): every SSD object dropped", "objects", removed)
	} else if removed > 0 {
		n.log.Info("SSD objects removed by the removal log", "objects", removed)
	}
	n.metrics.removalsApplied.Add(int64(removed))
	if err := n.tier.SetMark(formatCursor(masterapi.RemovalCursor{Log: rep.Log, Seq: rep.Through})); err != nil {
		return fmt.Errorf("node: storing the removal cursor: %w", err)
	}
	return nil
}

// coveredSSDKeys returns the SSD keys the entries es cover: the keys of
// key entries directly, and a scan of the tier's keys when an entry
// covers more than one.
func (n *Node) coveredSSDKeys(es []masterapi.Removal) ([][]byte, error) {
	set := masterapi.NewRemovalSet()
	var keys [][]byte
	broad := false
	for _, e := range es {
		if e.Kind.DRAMOnly() {
			continue // a DRAM eviction: the SSD copy stays
		}
		if err := set.Add(e); err != nil {
			continue // logged by applyDRAM
		}
		if e.Kind == masterapi.RemovalKey {
			keys = append(keys, []byte(e.Key))
		} else {
			broad = true
		}
	}
	if !broad {
		return keys, nil
	}
	return n.ssdKeys(func(k string) bool { return set.Latest(k) > 0 })
}

// ssdKeys lists the SSD keys match accepts.
func (n *Node) ssdKeys(match func(key string) bool) ([][]byte, error) {
	var keys [][]byte
	err := n.tier.Keys(func(k []byte, _ tier.KeyInfo) bool {
		if match(string(k)) {
			keys = append(keys, append([]byte(nil), k...))
		}
		return true
	})
	return keys, err
}

// removalTick is the pull loop's tick: DRAM and, with an SSD tier, the
// SSD (under roundMu, after any offload round in progress).
func (n *Node) removalTick() {
	if n.tier != nil {
		n.roundMu.Lock()
		defer n.roundMu.Unlock()
	}
	if err := n.syncRemovals(n.ctx, true); err != nil && !errors.Is(err, errcode.ErrNeedRemount) {
		n.log.Debug("removal log pull failed; will retry", "err", err)
	}
}

// RemovalCursors returns the node's DRAM and SSD removal cursors (tests,
// stats).
func (n *Node) RemovalCursors() (dram, ssd masterapi.RemovalCursor) {
	n.rem.mu.Lock()
	defer n.rem.mu.Unlock()
	return n.rem.dram, n.rem.ssd
}

// SyncRemovals pulls and applies the removal log at once (both tiers), as
// the pull loop does every PingInterval; tests and the embedded mode use
// it instead of waiting for the next tick.
func (n *Node) SyncRemovals(ctx context.Context) error {
	if n.tier != nil {
		n.roundMu.Lock()
		defer n.roundMu.Unlock()
	}
	return n.syncRemovals(ctx, true)
}
