package tier

import (
	"context"
	"fmt"
	"sync"

	"github.com/tierstore/tierstore/backend"
	"github.com/tierstore/tierstore/bucket"
	"github.com/tierstore/tierstore/index"
)

type readReq struct {
	i   int
	loc index.Location
}

// Load reads keys from SSD. Every value is checked against its CRC32C
// (invariant 5): a mismatch is ErrChecksum for that key, the entry is dropped
// from the index and the owner is told through OnEvict; other keys are not
// affected.
func (e *Engine) Load(ctx context.Context, keys [][]byte) []LoadResult {
	res := make([]LoadResult, len(keys))
	if err := e.begin(); err != nil {
		for i := range res {
			res[i].Err = err
		}
		return res
	}
	defer e.ops.Done()

	// Index lookups run without the engine lock (pebble is safe for
	// concurrent use); the lock only pins the buckets found. A location whose
	// bucket died in between is looked up again under the lock.
	var look []int
	var lookKeys [][]byte
	for i, k := range keys {
		if err := validKey(k); err != nil {
			res[i].Err = err
			continue
		}
		look = append(look, i)
		lookKeys = append(lookKeys, k)
	}
	locs, found, err := e.ix.GetMany(lookKeys)
	if err != nil {
		for _, i := range look {
			res[i].Err = fmt.Errorf("tier: index lookup: %w", err)
		}
		return res
	}
	byBucket := map[uint64][]readReq{}
	pinned := map[uint64]*bucketState{}
	e.mu.Lock()
	for n, i := range look {
		k, loc, ok := keys[i], locs[n], found[n]
		b := e.buckets[loc.Bucket]
		if ok && (b == nil || b.dead.Load()) {
			loc, ok, err = e.ix.Get(k)
			if err != nil {
				res[i].Err = fmt.Errorf("tier: index lookup: %w", err)
				continue
			}
			b = e.buckets[loc.Bucket]
		}
		if !ok || b == nil || b.dead.Load() {
			res[i].Err = fmt.Errorf("%w: %q", ErrNotFound, k)
			continue
		}
		if len(byBucket[loc.Bucket]) == 0 {
			b.readers.Add(1)
			pinned[loc.Bucket] = b
			if b.notified && !b.evicting {
				e.policy.Touch(loc.Bucket)
			}
		}
		byBucket[loc.Bucket] = append(byBucket[loc.Bucket], readReq{i, loc})
	}
	e.mu.Unlock()

	var corrupt []readReq
	if len(byBucket) == 1 {
		for id, reqs := range byBucket {
			corrupt = e.readBucket(ctx, id, reqs, keys, res)
			e.release(pinned[id])
		}
	} else {
		// Buckets are read concurrently; each backend Read keeps its own
		// queue depth.
		var wg sync.WaitGroup
		var dmu sync.Mutex
		for id, reqs := range byBucket {
			wg.Go(func() {
				bad := e.readBucket(ctx, id, reqs, keys, res)
				dmu.Lock()
				corrupt = append(corrupt, bad...)
				dmu.Unlock()
				e.release(pinned[id])
			})
		}
		wg.Wait()
	}
	if len(corrupt) > 0 {
		e.dropCorrupt(ctx, corrupt, keys)
	}
	return res
}

func (e *Engine) readBucket(ctx context.Context, id uint64, reqs []readReq, keys [][]byte, res []LoadResult) (corrupt []readReq) {
	ops := make([]backend.ReadOp, len(reqs))
	for n, r := range reqs {
		ops[n] = backend.ReadOp{Off: r.loc.Offset, Len: int(r.loc.StoredLen)}
	}
	if err := e.be.Read(ctx, id, ops); err != nil {
		for _, r := range reqs {
			res[r.i].Err = fmt.Errorf("tier: read bucket %d: %w", id, err)
		}
		return nil
	}
	for n, r := range reqs {
		if ops[n].Err != nil {
			res[r.i].Err = fmt.Errorf("tier: read bucket %d: %w", id, ops[n].Err)
			continue
		}
		en := bucket.Entry{
			Key: keys[r.i], Offset: r.loc.Offset, ValueLen: r.loc.ValueLen,
			StoredLen: r.loc.StoredLen, Codec: bucket.Codec(r.loc.Codec), CRC: r.loc.CRC,
		}
		v, err := bucket.DecodeValue(en, ops[n].Data)
		if err != nil {
			res[r.i].Err = fmt.Errorf("%w: %w", ErrChecksum, err)
			corrupt = append(corrupt, r)
			continue
		}
		res[r.i].Value = v
		e.st.objectsLoaded.Add(1)
		e.st.bytesRead.Add(int64(len(v)))
	}
	return corrupt
}

// release ends a Load's read of bucket b, without the engine lock, and
// deletes the file if the bucket died while being read.
func (e *Engine) release(b *bucketState) {
	if b.readers.Add(-1) == 0 && b.dead.Load() && b.deleted.CompareAndSwap(false, true) {
		e.deleteFile(b)
	}
}

// dropCorrupt removes index entries whose bytes failed their checksum, so the
// replica is no longer offered, and tells the owner.
func (e *Engine) dropCorrupt(ctx context.Context, bad []readReq, keys [][]byte) {
	var gone [][]byte
	var del []*bucketState
	e.mu.Lock()
	for _, r := range bad {
		e.st.checksumErrors.Add(1)
		loc, ok, err := e.ix.Get(keys[r.i])
		if err != nil || !ok || loc.Bucket != r.loc.Bucket || loc.Offset != r.loc.Offset {
			continue
		}
		if err := e.ix.DeleteKeys([][]byte{keys[r.i]}); err != nil {
			e.log.Error("tier: could not drop corrupt entry", "key", keys[r.i], "err", err)
			continue
		}
		gone = append(gone, keys[r.i])
		if d := e.decLive(r.loc.Bucket); d != nil {
			del = append(del, d)
		}
	}
	e.mu.Unlock()
	for _, d := range del {
		e.deleteFile(d)
	}
	if len(gone) > 0 {
		e.log.Warn("tier: dropped objects that failed their checksum", "keys", len(gone))
		if e.opts.OnEvict != nil {
			if err := e.opts.OnEvict(ctx, gone); err != nil {
				e.log.Warn("tier: could not report dropped objects", "err", err)
			}
		}
	}
}
