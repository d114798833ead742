package tier

import (
	"context"
	"errors"
	"fmt"

	"github.com/tierstore/tierstore/backend"
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
	if b.readers.Load() == 0 && b.deleted.CompareAndSwap(false, true) {
		return b
	}
	return nil
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
// low watermark when the high watermark would be crossed (invariant 7). The
// owner is told through OnEvict, once per victim bucket, before any of its
// bytes disappear; a bucket the owner refuses (for example because it cannot
// be reached) stays, and the next candidate is tried. If the bytes cannot
// fit under the capacity, ErrNoSpace.
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
	refusal := e.evictDownTo(ctx, int64(e.opts.LowWatermark*float64(capacity)))
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
// reserved bytes are at most low or no candidate is left. It returns the
// last refusal (nil if none).
func (e *Engine) evictDownTo(ctx context.Context, low int64) (refusal error) {
	refused := map[uint64]bool{}
	for {
		e.mu.Lock()
		if e.used+e.reserved <= low {
			e.mu.Unlock()
			return refusal
		}
		victims := e.policy.Victims(1, func(id uint64) bool {
			b := e.buckets[id]
			return b == nil || b.readers.Load() > 0 || b.evicting || b.dead.Load() || !b.notified || refused[id]
		})
		if len(victims) == 0 {
			e.mu.Unlock()
			return refusal
		}
		b := e.buckets[victims[0]]
		b.evicting = true
		e.policy.Remove(b.id)
		e.mu.Unlock()

		err := e.evictBucket(ctx, b)

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

// evictBucket tells the owner that b's keys go away, removes them from the
// index and deletes the file, waiting for readers that got in just before.
// b is marked evicting and out of the policy; on error nothing was removed.
func (e *Engine) evictBucket(ctx context.Context, b *bucketState) error {
	keys, err := e.ix.BucketKeys(b.id)
	if err != nil {
		return fmt.Errorf("tier: eviction: %w", err)
	}
	if e.opts.OnEvict != nil && len(keys) > 0 {
		if err := e.opts.OnEvict(ctx, keys); err != nil {
			return fmt.Errorf("tier: owner refused eviction of bucket %d: %w", b.id, err)
		}
	}
	removed, err := e.ix.DeleteBucket(b.id)
	if err != nil {
		return fmt.Errorf("tier: eviction: %w", err)
	}
	e.st.evictions.Add(1)
	e.st.evictedKeys.Add(int64(len(removed)))
	return e.bury(ctx, b)
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
