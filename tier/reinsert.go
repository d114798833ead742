package tier

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/tierstore/tierstore/bucket"
	"github.com/tierstore/tierstore/index"
)

// reinsertResult says what a re-insertion did.
type reinsertResult struct {
	// Bucket is the new bucket holding the re-inserted objects (0 when
	// none was written).
	Bucket uint64
	// Objects and Bytes are the objects re-inserted and the bucket bytes
	// written for them.
	Objects int
	Bytes   int64
	// Skipped are the keys asked for that were not re-inserted: not on SSD,
	// moved or removed meanwhile, failing their checksum (then dropped, as
	// by Load), or beyond the byte limit.
	Skipped [][]byte
}

// reinsertion is one re-insertion on its way: read, encode, reserve,
// write, commit.
type reinsertion struct {
	e        *Engine
	maxBytes int64
	// reserve takes the new bucket's bytes from the space accounting.
	reserve func(size int64) error
}

// run re-inserts the objects of keys that live in bucket from (any bucket
// when from is 0), dropping the buckets in drop in the same index batch.
// When nothing is left to re-insert and drop is not empty, the buckets are
// dropped alone.
func (r *reinsertion) run(ctx context.Context, keys [][]byte, drop []uint64, from uint64) (reinsertResult, index.CommitResult, error) {
	e := r.e
	var res reinsertResult
	vals, locs := e.loadAt(ctx, keys)
	var objs []bucket.Object
	var at []index.Location
	for i, v := range vals {
		if from != 0 && v.Err != nil && !errors.Is(v.Err, ErrNotFound) && !errors.Is(v.Err, ErrChecksum) {
			// Still in the victim, maybe: dropping it would lose a kept
			// object.
			return res, index.CommitResult{}, fmt.Errorf("tier: re-insertion: %w", v.Err)
		}
		if v.Err != nil || (from != 0 && locs[i].Bucket != from) {
			res.Skipped = append(res.Skipped, keys[i])
			continue
		}
		next := append(objs, bucket.Object{Key: keys[i], Value: v.Value})
		if size := encodedSize(next); size > r.maxBytes {
			res.Skipped = append(res.Skipped, keys[i])
			continue
		}
		objs, at = next, append(at, locs[i])
	}
	if len(objs) == 0 {
		cr, err := r.dropOnly(drop)
		return res, cr, err
	}
	id, enc, err := r.write(ctx, objs)
	if err != nil {
		return res, index.CommitResult{}, err
	}
	moved, cr, err := r.commit(id, enc, at, drop)
	if err != nil {
		return res, cr, err
	}
	n := len(moved)
	for _, o := range objs {
		if !moved[string(o.Key)] {
			res.Skipped = append(res.Skipped, o.Key)
		}
	}
	if n > 0 {
		res.Bucket, res.Objects, res.Bytes = id, n, enc.Size
	}
	e.st.reinsertedObjects.Add(int64(n))
	e.st.reinsertedBytes.Add(enc.Size)
	return res, cr, nil
}

// encodedSize is the bucket file size of objs, uncompressed (an upper
// bound).
func encodedSize(objs []bucket.Object) int64 {
	var keyBytes, data int64
	for _, o := range objs {
		keyBytes += int64(len(o.Key))
		data += bucket.AlignUp(int64(len(o.Value)))
	}
	return bucket.Size(len(objs), keyBytes, data)
}

// dropOnly removes the buckets in drop from the index (nothing to move).
func (r *reinsertion) dropOnly(drop []uint64) (index.CommitResult, error) {
	var cr index.CommitResult
	for _, id := range drop {
		removed, err := r.e.ix.DeleteBucket(id)
		if err != nil {
			return cr, err
		}
		cr.Dropped = append(cr.Dropped, removed...)
	}
	return cr, nil
}

// write encodes objs as a new bucket, reserves its bytes and writes it
// durably; the bytes stay reserved for the commit.
func (r *reinsertion) write(ctx context.Context, objs []bucket.Object) (uint64, *bucket.Encoded, error) {
	e := r.e
	e.mu.Lock()
	id := e.nextID
	e.nextID++
	e.mu.Unlock()
	enc, err := bucket.Encode(objs, bucket.EncodeOptions{ID: id, Created: time.Now().UnixNano(), Compression: e.codec})
	if err != nil {
		return 0, nil, err
	}
	if err := r.reserve(enc.Size); err != nil {
		return 0, nil, fmt.Errorf("tier: re-insertion: %w", err)
	}
	if err := e.be.WriteBucket(ctx, id, enc.Data); err != nil {
		e.unreserve(enc.Size)
		return 0, nil, fmt.Errorf("tier: re-insertion: write bucket %d: %w", id, err)
	}
	e.st.bucketsWritten.Add(1)
	e.st.bytesWritten.Add(enc.Size)
	return id, enc, nil
}

// commit moves the objects that are still where they were read (at) into
// the written bucket id, and drops the buckets in drop, in one synced index
// batch under commitMu (Remove and offload commits cannot slip in between
// the check and the move). The bucket is registered before the commit, as an
// offloaded one is, and is evictable at once: its objects are known to the
// owner already. It returns the keys moved.
func (r *reinsertion) commit(id uint64, enc *bucket.Encoded, at []index.Location, drop []uint64) (map[string]bool, index.CommitResult, error) {
	e := r.e
	b := &bucketState{id: id, size: enc.Size, notified: true}
	e.mu.Lock()
	e.reserved -= enc.Size
	e.used += enc.Size
	e.buckets[id] = b
	e.mu.Unlock()

	e.commitMu.Lock()
	entries, err := r.stillAt(enc, at)
	if err == nil {
		// Set before the commit, under commitMu: a removal of a moved key
		// (after the commit) finds them.
		e.mu.Lock()
		b.written, b.live = encodedStored(enc), storedBytes(entries)
		e.track(b)
		e.mu.Unlock()
	}
	var cr index.CommitResult
	switch {
	case err != nil:
	case len(entries) == 0:
		cr, err = r.dropOnly(drop)
	default:
		meta := index.BucketMeta{ID: id, Size: enc.Size, Keys: len(enc.Entries), Created: time.Now().UnixNano(),
			TrailerOff: enc.Footer.TrailerOff, TrailerLen: enc.Footer.TrailerLen, TrailerCRC: enc.Footer.TrailerCRC,
			Written: encodedStored(enc)}
		if e.testHookCommit != nil {
			err = e.testHookCommit(id)
		}
		if err == nil {
			cr, err = e.ix.Commit(index.Commit{Meta: meta, Entries: entries, Drop: drop})
		}
	}
	e.commitMu.Unlock()

	if err == nil {
		e.left(cr.Replaced)
	}
	e.mu.Lock()
	var del *bucketState
	if err != nil || len(entries) == 0 {
		del = e.markDead(b)
	} else {
		e.policy.Add(id, b.size)
	}
	e.mu.Unlock()
	e.deleteFile(del)
	if err != nil {
		return nil, cr, fmt.Errorf("tier: re-insertion: index commit of bucket %d: %w", id, err)
	}
	if e.testHookReinserted != nil {
		e.testHookReinserted(id)
	}
	moved := make(map[string]bool, len(entries))
	for _, en := range entries {
		moved[string(en.Key)] = true
	}
	return moved, cr, nil
}

// stillAt returns the index entries of the encoded objects whose keys are
// still at the location they were read from. Called with commitMu held.
func (r *reinsertion) stillAt(enc *bucket.Encoded, at []index.Location) ([]index.KeyLoc, error) {
	keys := make([][]byte, len(enc.Entries))
	for k, en := range enc.Entries {
		keys[k] = en.Key
	}
	locs, found, err := r.e.ix.GetMany(keys)
	if err != nil {
		return nil, err
	}
	var entries []index.KeyLoc
	for k, en := range enc.Entries {
		if !found[k] || locs[k].Bucket != at[k].Bucket || locs[k].Offset != at[k].Offset {
			continue
		}
		entries = append(entries, index.KeyLoc{Key: en.Key, Loc: index.Location{
			Bucket: enc.Footer.ID, Offset: en.Offset, StoredLen: en.StoredLen,
			ValueLen: en.ValueLen, Codec: uint8(en.Codec), CRC: en.CRC,
		}})
	}
	return entries, nil
}
