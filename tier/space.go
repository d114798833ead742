package tier

import (
	"context"
	"errors"
	"fmt"
	"math"

	"github.com/tierstore/tierstore/backend"
	"github.com/tierstore/tierstore/bucket"
	"github.com/tierstore/tierstore/index"
)

func (e *Engine) unreserve(size int64) {
	e.mu.Lock()
	e.reserved -= size
	e.mu.Unlock()
}

// markDead records that b is gone from the index. It returns b when its file
// can be deleted now (no readers). Called with e.mu held; idempotent.
func (e *Engine) markDead(b *bucketState) *bucketState {
	if b.drained == nil {
		b.drained = make(chan struct{})
	}
	b.dead.Store(true)
	e.policy.Remove(b.id)
	delete(e.dying, b.id)
	if b.readers.Load() == 0 && b.deleted.CompareAndSwap(false, true) {
		return b
	}
	return nil
}

// left records that the objects at locs left their buckets (removed,
// superseded by a newer version, moved or dropped) in an index batch that
// has committed: their stored bytes stop counting as live at once.
func (e *Engine) left(locs []index.KeyLoc) {
	if len(locs) == 0 {
		return
	}
	e.mu.Lock()
	for _, kl := range locs {
		if b := e.buckets[kl.Loc.Bucket]; b != nil {
			b.live = max(b.live-int64(kl.Loc.StoredLen), 0)
			e.track(b)
		}
	}
	e.mu.Unlock()
}

// storedBytes is the sum of the stored lengths of entries.
func storedBytes(entries []index.KeyLoc) int64 {
	var n int64
	for _, en := range entries {
		n += int64(en.Loc.StoredLen)
	}
	return n
}

// encodedStored is the sum of the stored lengths of every object of enc.
func encodedStored(enc *bucket.Encoded) int64 {
	var n int64
	for _, en := range enc.Entries {
		n += int64(en.StoredLen)
	}
	return n
}

// mostlyDead reports whether at least half of b's object bytes are dead.
func (b *bucketState) mostlyDead() bool {
	return b.written > 0 && 2*b.live <= b.written
}

// track adds b to the mostly dead buckets when it is one. Caller holds
// e.mu.
func (e *Engine) track(b *bucketState) {
	if b.mostlyDead() && !b.dead.Load() {
		e.dying[b.id] = b
	}
}

// mostlyDeadVictim returns the evictable bucket with the most dead bytes
// among those whose dead bytes are at least half their object bytes, or
// nil. Caller holds e.mu.
func (e *Engine) mostlyDeadVictim(skip func(id uint64) bool) *bucketState {
	if e.noDeadFirst {
		return nil
	}
	var best *bucketState
	for id, b := range e.dying {
		if skip(id) {
			continue
		}
		if best == nil || b.written-b.live > best.written-best.live || (b.written-b.live == best.written-best.live && id < best.id) {
			best = b
		}
	}
	return best
}

// deleteFile removes a dead bucket's file, then its accounting. A file that
// cannot be deleted is an orphan that the next Open removes.
func (e *Engine) deleteFile(b *bucketState) {
	if b == nil {
		return
	}
	err := e.be.Delete(b.id)
	if err != nil && !errors.Is(err, backend.ErrNotFound) {
		e.log.Warn("tier: could not delete bucket file; the next Open removes it", "bucket", b.id, "err", err)
	}
	e.mu.Lock()
	e.used -= b.size
	delete(e.buckets, b.id)
	close(b.drained)
	e.mu.Unlock()
}

// buryEmptied marks dead the buckets the index reports emptied (their last
// object moved or was removed, and their records went in the same batch),
// and deletes their files once their readers leave.
func (e *Engine) buryEmptied(ids []uint64) {
	if len(ids) == 0 {
		return
	}
	var del []*bucketState
	e.mu.Lock()
	for _, id := range ids {
		if b := e.buckets[id]; b != nil && !b.dead.Load() {
			if d := e.markDead(b); d != nil {
				del = append(del, d)
			}
		}
	}
	e.mu.Unlock()
	for _, d := range del {
		e.deleteFile(d)
	}
}

// reserve makes room for size more bytes, evicting whole buckets down to the
// low watermark (with Options.EvictToFit, only until size fits under the
// high one) when the high watermark would be crossed (invariant 7). The
// owner is told through OnEvict, once per victim bucket, before any of its
// bytes disappear; the objects it keeps are re-inserted (bounded, see
// Options.OnEvict) and the rest evicted; a bucket the owner refuses (it
// cannot be reached) stays, and the next candidate is tried. If the bytes
// cannot fit under the capacity, ErrNoSpace.
func (e *Engine) reserve(ctx context.Context, size int64) error {
	capacity := e.opts.Capacity
	e.mu.Lock()
	if capacity == 0 || float64(e.used+e.reserved+size) <= e.opts.HighWatermark*float64(capacity) {
		e.reserved += size
		e.mu.Unlock()
		return nil
	}
	if size > capacity {
		e.mu.Unlock()
		return fmt.Errorf("%w: bucket of %d bytes exceeds the capacity of %d", ErrTooLarge, size, capacity)
	}
	// Reserve first, so that concurrent writers see these bytes as taken.
	e.reserved += size
	e.mu.Unlock()
	target := int64(e.opts.LowWatermark * float64(capacity))
	if e.opts.EvictToFit {
		target = int64(e.opts.HighWatermark * float64(capacity))
	}
	refusal := e.evictDownTo(ctx, target, size)
	e.mu.Lock()
	defer e.mu.Unlock()
	if over := e.used + e.reserved - capacity; over > 0 {
		e.reserved -= size
		err := fmt.Errorf("%w: need %d bytes, %d in use, %d reserved by other writes, capacity %d", ErrNoSpace, size, e.used, e.reserved, capacity)
		if refusal != nil {
			err = fmt.Errorf("%w; last eviction refused: %w", err, refusal)
		}
		return err
	}
	return nil
}

// evictDownTo evicts buckets, one victim at a time, until used plus
// reserved bytes are at most low or no candidate is left. own is the
// reservation being made room for (already in e.reserved); it is also the
// budget of bytes re-inserted for kept objects. It returns the last refusal
// (nil if none).
func (e *Engine) evictDownTo(ctx context.Context, low, own int64) (refusal error) {
	refused := map[uint64]bool{}
	budget := own
	for {
		e.mu.Lock()
		if e.used+e.reserved <= low {
			e.mu.Unlock()
			return refusal
		}
		skip := func(id uint64) bool {
			b := e.buckets[id]
			return b == nil || b.readers.Load() > 0 || b.evicting || b.dead.Load() || !b.notified || refused[id]
		}
		// A mostly dead bucket goes before any bucket of live data, most
		// dead first (docs/design.md, reclaiming SSD space); then the
		// policy's order.
		b := e.mostlyDeadVictim(skip)
		if b == nil {
			victims := e.policy.Victims(1, skip)
			if len(victims) == 0 {
				e.mu.Unlock()
				return refusal
			}
			b = e.buckets[victims[0]]
		}
		b.evicting = true
		e.policy.Remove(b.id)
		e.mu.Unlock()

		err := e.evictBucket(ctx, b, &budget, own)

		e.mu.Lock()
		b.evicting = false
		if err != nil {
			refused[b.id] = true
			refusal = err
			if !b.dead.Load() {
				e.policy.Add(b.id, b.size)
			}
		}
		e.mu.Unlock()
		if err != nil && ctx.Err() != nil {
			return refusal
		}
	}
}

// evictBucket asks the owner about b's keys, re-inserts those it keeps,
// removes the others from the index with the victim (one synced batch, no
// engine lock) and deletes the file, waiting for readers that got in just
// before. b is marked evicting and out of the policy. On error b stays: with
// nothing removed when the owner refused, or with only the kept keys when
// their re-insertion failed (the owner was told the others go).
func (e *Engine) evictBucket(ctx context.Context, b *bucketState, budget *int64, own int64) error {
	keys, err := e.ix.BucketKeys(b.id)
	if err != nil {
		return fmt.Errorf("tier: eviction: %w", err)
	}
	var keep [][]byte
	if e.opts.OnEvict != nil && len(keys) > 0 {
		// Once the owner has answered, the keys it did not keep are gone
		// for it: a crash before the batch below must not bring them back
		// (docs/design.md, invariant 10). The mark makes the next Open
		// complete the eviction; it goes with the bucket, or now if the
		// owner refuses.
		if err := e.ix.MarkEvicting(b.id); err != nil {
			return fmt.Errorf("tier: eviction: %w", err)
		}
		if keep, err = e.opts.OnEvict(ctx, keys); err != nil {
			e.unmarkEvicting(b)
			return fmt.Errorf("tier: owner refused eviction of bucket %d: %w", b.id, err)
		}
	}
	keep = members(keep, keys)
	e.mu.Lock()
	live, written := b.live, b.written
	e.mu.Unlock()
	if len(keep) == 0 {
		removed, err := e.ix.DeleteBucket(b.id)
		if err != nil {
			return fmt.Errorf("tier: eviction: %w", err)
		}
		e.st.evictions.Add(1)
		e.st.evictedKeys.Add(int64(len(removed)))
		e.st.evictedLiveBytes.Add(live)
		e.st.evictedDeadBytes.Add(written - live)
		return e.bury(ctx, b)
	}
	cr, err := e.keepAndEvict(ctx, b, keep, budget, own)
	if err != nil {
		e.evictExcept(b, keys, keep)
		e.unmarkEvicting(b) // b stays with the kept objects
		return err
	}
	e.st.evictions.Add(1)
	e.st.evictedKeys.Add(int64(len(cr.Dropped)))
	e.st.evictedLiveBytes.Add(max(live-storedBytes(cr.Replaced), 0))
	e.st.evictedDeadBytes.Add(written - live)
	e.buryEmptied(cr.Emptied)
	return e.bury(ctx, b)
}

// unmarkEvicting removes b's evicting mark: b stays. A failure is logged
// (the index is failing): the next Open would then evict b.
func (e *Engine) unmarkEvicting(b *bucketState) {
	if err := e.ix.UnmarkEvicting(b.id); err != nil {
		e.log.Error("tier: could not clear the evicting mark of a bucket that stays; the next open evicts it", "bucket", b.id, "err", err)
	}
}

// members returns the keys of keep that are in keys, once each.
func members(keep, keys [][]byte) [][]byte {
	if len(keep) == 0 {
		return nil
	}
	in := make(map[string]bool, len(keys))
	for _, k := range keys {
		in[string(k)] = true
	}
	var out [][]byte
	for _, k := range keep {
		if in[string(k)] {
			in[string(k)] = false
			out = append(out, k)
		}
	}
	return out
}

// keepAndEvict re-inserts the kept objects of victim b into a new bucket and
// drops b from the index in the same batch, within the bounds of
// Options.OnEvict: the kept objects may take at most half of b, and at most
// *budget bytes (lowered by what is written). The new bucket must fit beside
// what is on disk without own, the reservation not yet written.
func (e *Engine) keepAndEvict(ctx context.Context, b *bucketState, keep [][]byte, budget *int64, own int64) (index.CommitResult, error) {
	locs, found, err := e.ix.GetMany(keep)
	if err != nil {
		return index.CommitResult{}, fmt.Errorf("tier: eviction: %w", err)
	}
	var n int
	var keyBytes, data int64
	for i, k := range keep {
		if found[i] && locs[i].Bucket == b.id {
			n, keyBytes, data = n+1, keyBytes+int64(len(k)), data+bucket.AlignUp(int64(locs[i].ValueLen))
		}
	}
	est := bucket.Size(n, keyBytes, data)
	switch {
	case 2*est > b.size:
		return index.CommitResult{}, fmt.Errorf("tier: eviction of bucket %d: the owner keeps %d of its %d bytes, more than half", b.id, est, b.size)
	case est > *budget:
		return index.CommitResult{}, fmt.Errorf("tier: eviction of bucket %d: re-inserting %d kept bytes exceeds the budget left (%d)", b.id, est, *budget)
	}
	r := &reinsertion{e: e, maxBytes: math.MaxInt64, reserve: func(size int64) error {
		e.mu.Lock()
		defer e.mu.Unlock()
		if c := e.opts.Capacity; c > 0 && e.used+e.reserved-own+size > c {
			return fmt.Errorf("%w: no room to re-insert %d kept bytes", ErrNoSpace, size)
		}
		e.reserved += size
		return nil
	}}
	res, cr, err := r.run(ctx, keep, []uint64{b.id}, b.id)
	if err != nil {
		return cr, fmt.Errorf("tier: eviction of bucket %d: %w", b.id, err)
	}
	*budget -= res.Bytes
	return cr, nil
}

// evictExcept removes from the index the keys of b the owner did not keep
// (the owner was told they go) where they still are in b; b stays with the
// kept ones.
func (e *Engine) evictExcept(b *bucketState, keys, keep [][]byte) {
	kept := make(map[string]bool, len(keep))
	for _, k := range keep {
		kept[string(k)] = true
	}
	var gone [][]byte
	for _, k := range keys {
		if !kept[string(k)] {
			gone = append(gone, k)
		}
	}
	if len(gone) == 0 {
		return
	}
	locs, found, err := e.ix.GetMany(gone)
	var at []index.KeyLoc
	for i, k := range gone {
		if err == nil && found[i] && locs[i].Bucket == b.id {
			at = append(at, index.KeyLoc{Key: k, Loc: locs[i]})
		}
	}
	if err == nil && len(at) > 0 {
		var res index.Removal
		res, err = e.ix.RemoveIfAt(at)
		e.st.evictedKeys.Add(int64(len(res.Removed)))
		e.left(res.Removed)
		e.buryEmptied(res.Emptied)
	}
	if err != nil {
		e.log.Error("tier: could not remove the evicted keys of a bucket whose kept objects stay", "bucket", b.id, "err", err)
	}
}

// bury marks b dead (it is gone from the index), deletes its file when its
// readers leave, and waits for that: a reader that found a key just before
// the index entry went away is still reading, and the bytes must leave the
// disk before new bytes arrive. If ctx ends first the file goes when the
// reader leaves; its bytes count in e.used until then.
func (e *Engine) bury(ctx context.Context, b *bucketState) error {
	e.mu.Lock()
	del := e.markDead(b)
	drained := b.drained
	e.mu.Unlock()
	e.deleteFile(del)
	select {
	case <-drained:
	case <-ctx.Done():
	}
	return nil
}
