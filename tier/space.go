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
// can be deleted now (no readers). Called with e.mu held.
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

// deleteFile removes a dead bucket's file, then its accounting.
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

// reserve makes room for size more bytes, evicting whole buckets down to the
// low watermark when the high watermark would be crossed (invariant 7). The
// owner is told through OnEvict, once per victim bucket, before any of its
// bytes disappear; a bucket the owner refuses (for example because a reader
// holds a lease on one of its objects) stays, and the next candidate is
// tried. If the bytes cannot fit under the capacity, ErrNoSpace.
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
	low := int64(e.opts.LowWatermark * float64(capacity))
	refused := map[uint64]bool{}
	var refusal error
	for e.used+e.reserved > low {
		victims := e.policy.Victims(1, func(id uint64) bool {
			b := e.buckets[id]
			return b == nil || b.readers.Load() > 0 || b.evicting || b.dead.Load() || !b.notified || refused[id]
		})
		if len(victims) == 0 {
			break
		}
		b := e.buckets[victims[0]]
		b.evicting = true
		e.policy.Remove(b.id)
		e.mu.Unlock()

		err := e.evictBucket(ctx, b)

		e.mu.Lock()
		if err != nil {
			refused[b.id] = true
			refusal = err
			b.evicting = false
			if !b.dead.Load() {
				e.policy.Add(b.id, b.size)
			}
			if ctx.Err() != nil {
				break
			}
		}
	}
	if over := e.used + e.reserved - capacity; over > 0 {
		e.reserved -= size
		used, reserved := e.used, e.reserved
		e.mu.Unlock()
		err := fmt.Errorf("%w: need %d bytes, %d in use, %d reserved by other writes, capacity %d", ErrNoSpace, size, used, reserved, capacity)
		if refusal != nil {
			err = fmt.Errorf("%w; last eviction refused: %w", err, refusal)
		}
		return err
	}
	e.mu.Unlock()
	return nil
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
	e.mu.Lock()
	removed, err := e.ix.DeleteBucket(b.id)
	if err != nil {
		e.mu.Unlock()
		return fmt.Errorf("tier: eviction: %w", err)
	}
	e.st.evictions.Add(1)
	e.st.evictedKeys.Add(int64(len(removed)))
	b.live = 0
	del := e.markDead(b)
	drained := b.drained
	e.mu.Unlock()
	e.deleteFile(del)
	// A reader that found a key just before the index entry went away is
	// still reading: wait for it, so the bytes leave the disk before new
	// bytes arrive.
	select {
	case <-drained:
		return nil
	case <-ctx.Done():
		// The bucket is gone from the index; its file goes when the
		// reader leaves. Its bytes still count in e.used until then.
		return nil
	}
}

// decLive records that one index entry of bucket id went away; a bucket with
// no entries left is removed. Called with e.mu held.
func (e *Engine) decLive(id uint64) *bucketState {
	b := e.buckets[id]
	if b == nil || b.dead.Load() {
		return nil
	}
	b.live--
	if b.live > 0 {
		return nil
	}
	if _, err := e.ix.DeleteBucket(id); err != nil {
		e.log.Error("tier: could not remove empty bucket", "bucket", id, "err", err)
		return nil
	}
	return e.markDead(b)
}
