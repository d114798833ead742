package node

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tierstore/tierstore/internal/errcode"
	"github.com/tierstore/tierstore/internal/keyspec"
	"github.com/tierstore/tierstore/masterapi"
	"github.com/tierstore/tierstore/tier"
)

// Re-registration and reconcile stream the SSD key list: the node's memory
// is one batch (and a reconcile digest of at most
// masterapi.MaxReconcileSlots slots), never the key count, so a node
// with tens of millions of SSD objects re-registers and reconciles like a
// small one (docs/design.md invariant 6; masterapi/reconcile.go).
const (
	// reRegisterBatch is the objects of one ReRegisterSSDColumns call.
	reRegisterBatch = 4096
	// reRegisterInFlight is how many ReRegisterSSDColumns calls one
	// re-registration keeps in flight.
	reRegisterInFlight = 3
	// reconcileBatchKeys and reconcileBatchBytes bound one ReconcileKeys
	// call (keys, and key bytes).
	reconcileBatchKeys  = 16384
	reconcileBatchBytes = 4 << 20
	// masterCallTimeout bounds one call of a re-registration or reconcile.
	masterCallTimeout = 30 * time.Second
	// digestBatch is the key hashes a reconcile's digest pass adds at a
	// time (masterapi.SlotDigest.AddHashes: 64 KiB of hashes).
	digestBatch = 8192
)

// reRegister tells the master every object the SSD tier holds, in chunks
// of reRegisterBatch as the tier lists them, up to reRegisterInFlight
// chunks in flight. Objects the master refuses as
// conflicting (the key was re-put with other bytes) are stale and removed
// from SSD. A failure flags a new re-registration. Caller holds roundMu.
func (n *Node) reRegister(ctx context.Context) {
	if n.tier == nil {
		return
	}
	gen := n.mountGen.Load()
	// The log first: the master checks each copy against the entries
	// above the cursor this pull reports (docs/design.md, invariant 10).
	if err := n.syncRemovals(ctx, true); err != nil {
		n.log.Warn("re-register: pulling the removal log failed; will retry", "err", err)
		n.reregister.Store(true)
		return
	}
	// reRegisterInFlight chunks of columns, reused: no allocation per
	// object. The node lists the next chunk while the master records the
	// previous ones (on other cores).
	expected := n.tier.Stats().Objects
	free := make(chan *masterapi.SSDColumns, reRegisterInFlight)
	for range reRegisterInFlight {
		free <- &masterapi.SSDColumns{Lens: make([]uint32, 0, reRegisterBatch), Sizes: make([]int64, 0, reRegisterBatch),
			CRCs: make([]uint32, 0, reRegisterBatch), Expected: expected}
	}
	var (
		wg     sync.WaitGroup
		sent   atomic.Int64
		failed atomic.Bool
		errMu  sync.Mutex // protects callErr
		// callErr is the first failed call's error.
		callErr error
	)
	send := func(b *masterapi.SSDColumns) {
		defer wg.Done()
		cctx, cancel := context.WithTimeout(ctx, masterCallTimeout)
		errs, err := n.m.ReRegisterSSDColumns(cctx, n.name, *b)
		cancel()
		if err != nil {
			errMu.Lock()
			if callErr == nil {
				callErr = err
			}
			errMu.Unlock()
			failed.Store(true)
		} else {
			n.dropConflicts(b, errs, gen)
			sent.Add(int64(b.Len()))
		}
		b.Reset()
		free <- b
	}
	cur := <-free
	err := n.tier.Keys(func(key []byte, info tier.KeyInfo) bool {
		cur.Append(key, info.Size, info.CRC)
		if cur.Len() < reRegisterBatch {
			return true
		}
		wg.Add(1)
		go send(cur)
		select {
		case cur = <-free:
		case <-ctx.Done():
			failed.Store(true)
			return false
		}
		return !failed.Load()
	})
	if err == nil && !failed.Load() && cur.Len() > 0 {
		wg.Add(1)
		go send(cur)
	}
	wg.Wait()
	if callErr == nil && ctx.Err() != nil && failed.Load() {
		callErr = ctx.Err()
	}
	switch {
	case err != nil:
		n.log.Error("re-register: listing SSD keys", "err", err)
	case callErr != nil:
		n.log.Warn("re-register SSD objects failed; will retry", "err", callErr, "sent", sent.Load())
	default:
		n.log.Info("re-registered SSD objects", "objects", sent.Load())
		return
	}
	n.reregister.Store(true)
}

// dropConflicts removes from SSD the objects the master refused: their
// size or CRC differ from the object's current metadata, or the master does
// not know the key (it was removed; only re-registration creates objects).
// A key refused as unknown is kept, and a re-registration flagged, when the
// node remounted since gen (the master may have restarted and not heard the
// SSD objects yet).
func (n *Node) dropConflicts(objs *masterapi.SSDColumns, errs []error, gen uint64) {
	off := 0
	for i := 0; i < objs.Len(); i++ {
		var key []byte
		key, off = objs.Key(i, off)
		if i >= len(errs) || errs[i] == nil {
			continue
		}
		e := errs[i]
		if n.refusedKeepsCopy(e, gen) {
			continue
		}
		if errors.Is(e, errcode.ErrChecksumConflict) || errors.Is(e, errcode.ErrObjectNotFound) || errors.Is(e, errcode.ErrReplicaNotFound) {
			if err := n.tier.Remove(key); err != nil && !errors.Is(err, tier.ErrNotFound) {
				n.log.Warn("removing an SSD object the master refused", "key", keyspec.Show(key), "err", err)
			}
		}
	}
}

// refusedKeepsCopy reports whether an SSD copy the master refused with err
// must be kept: the master called the key unknown, but the node remounted
// since gen, so that master may be a restarted one; a re-registration is
// flagged to announce it.
func (n *Node) refusedKeepsCopy(err error, gen uint64) bool {
	if errors.Is(err, errcode.ErrObjectNotFound) && n.mountGen.Load() != gen {
		n.reregister.Store(true)
		return true
	}
	return false
}

func (n *Node) reconcileTick() {
	if err := n.Reconcile(n.ctx); err != nil {
		n.log.Warn("reconcile failed", "err", err)
	}
}

// remountedSince reports whether the node remounted (or must) since gen:
// the master it talks to may be a new one that has not heard its SSD
// objects, so a reconcile answer is not to be acted upon.
func (n *Node) remountedSince(gen uint64) bool {
	return n.mountGen.Load() != gen || n.reregister.Load()
}

// Reconcile brings the master's list of this node's SSD replicas and
// the SSD's contents together: the master drops replicas the SSD no longer
// holds, and the node deletes from its SSD the keys the master answers as
// unwanted (removed objects, dropped replicas). It runs periodically; tests
// and operators may call it directly.
//
// It is a session (masterapi/reconcile.go): a digest of the SSD keys per
// hash slot, then the keys of the slots whose digests differ, in
// batches, then the end of the session. When nothing changed it costs one
// pass over the SSD index and one small call.
//
// It holds roundMu, so no notify or re-registration of this node is in
// flight during the session (invariant: a list taken before a commit must
// not reach the master after that commit's notify). A pending
// re-registration runs first; if the node remounted during the session,
// the unwanted keys are kept and the session is not ended (a restarted
// master knows no keys until the node re-registers).
func (n *Node) Reconcile(ctx context.Context) error {
	if n.tier == nil {
		return nil
	}
	n.roundMu.Lock()
	defer n.roundMu.Unlock()
	if n.reregister.Swap(false) {
		n.reRegister(ctx)
		if n.reregister.Load() {
			return fmt.Errorf("node: reconcile: %w: re-registration pending", errcode.ErrNeedRemount)
		}
	}
	gen := n.mountGen.Load()
	d := masterapi.NewSlotDigest(masterapi.SlotsFor(n.tier.Stats().Objects))
	hs := make([]uint64, 0, digestBatch)
	var scratch []uint64
	if err := n.tier.Keys(func(k []byte, _ tier.KeyInfo) bool {
		if hs = append(hs, masterapi.KeyHashBytes(k)); len(hs) == digestBatch {
			scratch = d.AddHashes(hs, scratch)
			hs = hs[:0]
		}
		return true
	}); err != nil {
		return fmt.Errorf("node: reconcile: listing SSD keys: %w", err)
	}
	d.AddHashes(hs, scratch)
	cctx, cancel := context.WithTimeout(ctx, masterCallTimeout)
	ses, err := n.m.ReconcileBegin(cctx, n.name, d)
	cancel()
	if err != nil {
		return n.reconcileFailed(err)
	}
	if len(ses.Differ) == 0 {
		n.metrics.reconciles.Add(1)
		return nil
	}
	if err := n.sendDiffering(ctx, ses, d.Slots(), gen); err != nil {
		return n.reconcileFailed(err)
	}
	if n.remountedSince(gen) {
		n.log.Warn("reconcile not ended: the node remounted meanwhile")
		return nil
	}
	cctx, cancel = context.WithTimeout(ctx, masterCallTimeout)
	dropped, err := n.m.ReconcileEnd(cctx, n.name, ses.ID)
	cancel()
	if err != nil {
		return n.reconcileFailed(err)
	}
	n.metrics.reconciles.Add(1)
	if dropped > 0 {
		n.log.Info("reconcile dropped replicas the SSD no longer holds", "dropped", dropped)
	}
	return nil
}

// reconcileFailed wraps a reconcile call's error; NEED_REMOUNT flags a
// re-registration before the next try (the ping loop remounts).
func (n *Node) reconcileFailed(err error) error {
	if errors.Is(err, errcode.ErrNeedRemount) {
		n.reregister.Store(true)
	}
	return fmt.Errorf("node: reconcile: %w", err)
}

// sendDiffering sends the master, in batches, every SSD key of the
// session's differing slots (at resolution slots), and deletes the keys
// it answers as unwanted, unless the node remounted since gen (then it
// stops sending: the session is void).
func (n *Node) sendDiffering(ctx context.Context, ses masterapi.ReconcileSession, slots int, gen uint64) error {
	differ := make([]uint64, (slots+63)/64) // a bit a slot: 32 KiB at 2^18, cached
	for _, r := range ses.Differ {
		if int(r) >= slots {
			return fmt.Errorf("master answered slot %d of a %d-slot digest: %w", r, slots, errcode.ErrInvalidParams)
		}
		differ[r>>6] |= 1 << (r & 63)
	}
	var batch []string
	size := 0
	var callErr error
	flush := func() bool {
		cctx, cancel := context.WithTimeout(ctx, masterCallTimeout)
		res, err := n.m.ReconcileKeys(cctx, n.name, ses.ID, batch)
		cancel()
		if err != nil {
			callErr = err
			return false
		}
		n.metrics.reconcileKeysSent.Add(int64(len(batch)))
		batch, size = batch[:0], 0
		if n.remountedSince(gen) {
			if len(res.Unwanted) > 0 {
				n.log.Warn("reconcile answer ignored: the node remounted meanwhile", "unwanted", len(res.Unwanted))
			}
			return false
		}
		n.removeUnwanted(res.Unwanted)
		return true
	}
	err := n.tier.Keys(func(k []byte, _ tier.KeyInfo) bool {
		if r := masterapi.SlotOf(masterapi.KeyHashBytes(k), slots); differ[r>>6]&(1<<(r&63)) == 0 {
			return true
		}
		batch = append(batch, string(k))
		size += len(k)
		return (len(batch) < reconcileBatchKeys && size < reconcileBatchBytes) || flush()
	})
	if err == nil && callErr == nil && len(batch) > 0 && !n.remountedSince(gen) {
		flush()
	}
	if err != nil {
		return fmt.Errorf("listing SSD keys: %w", err)
	}
	return callErr
}

// removeUnwanted deletes from the SSD the keys a reconcile answered as
// unwanted.
func (n *Node) removeUnwanted(keys []string) {
	if len(keys) == 0 {
		return
	}
	removed := 0
	for _, k := range keys {
		if err := n.tier.Remove([]byte(k)); err != nil {
			if !errors.Is(err, tier.ErrNotFound) {
				n.log.Warn("reconcile: removing an unwanted SSD object", "key", keyspec.Show(k), "err", err)
			}
			continue
		}
		removed++
	}
	n.metrics.reconcileRemoved.Add(int64(removed))
	n.log.Info("reconcile removed SSD objects the master no longer wants", "removed", removed, "unwanted", len(keys))
}
