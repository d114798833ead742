package index

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"

	"github.com/cockroachdb/pebble/v2"

	"github.com/tierstore/tierstore/internal/keyspec"
)

// Commit is one bucket commit: a single synced pebble batch (invariant 1 of
// the package documentation).
type Commit struct {
	// Meta describes the new bucket. Its Live and LiveBytes are computed
	// from Entries.
	Meta BucketMeta
	// Entries are the objects of the new bucket. A key already in another
	// bucket moves here: its membership record there is deleted and that
	// bucket's live counts drop, in the same batch.
	Entries []KeyLoc
	// Drop lists buckets removed in the same batch, after the entries moved:
	// their bucket records, membership records, and the object records that
	// still point at them (DeleteBucket's rules). An eviction that re-inserts
	// the objects it keeps commits them and drops the victim atomically.
	Drop []uint64
}

// CommitResult says what a Commit changed besides recording the new bucket.
type CommitResult struct {
	// Replaced holds the previous location of every entry whose key lived in
	// another bucket (a stale version, or a re-inserted object).
	Replaced []KeyLoc
	// Emptied lists the buckets, other than those in Drop, whose last member
	// moved into the new bucket; their records were removed in the batch.
	Emptied []uint64
	// Dropped lists the keys whose object records went with the Drop
	// buckets, in key order per bucket.
	Dropped [][]byte
}

// Removal says what RemoveKeys removed.
type Removal struct {
	// Removed holds each removed key with the location it had (zero for an
	// object record that did not decode).
	Removed []KeyLoc
	// Emptied lists the buckets left without members; their records were
	// removed in the same batch.
	Emptied []uint64
}

// CommitBucket is Commit without Drop, for callers that need no result.
func (ix *Index) CommitBucket(meta BucketMeta, entries []KeyLoc) error {
	_, err := ix.Commit(Commit{Meta: meta, Entries: entries})
	return err
}

// Commit records c in one synced pebble batch: the object record of each
// entry (overwriting an existing one, whose stale membership record in its
// old bucket is deleted and whose old bucket's live counts drop; a bucket left
// empty loses its record), the membership record of each key in c.Meta.ID,
// the bucket record, the next bucket id (raised to c.Meta.ID+1 if lower),
// and the removal of every bucket in c.Drop. When Commit returns nil all of
// it is durable; when it returns an error none of it is visible after a
// reopen (nor before one unless the error wraps ErrFailed, after which the
// index must be reopened anyway).
//
// Every entry must have Loc.Bucket == c.Meta.ID, distinct valid keys and a
// non-negative offset (ErrInvalidEntry, ErrInvalidKey). A bucket id is
// committed once (ErrBucketExists), and may not be in c.Drop.
func (ix *Index) Commit(c Commit) (CommitResult, error) {
	meta := c.Meta
	if err := validateCommit(c); err != nil {
		return CommitResult{}, fmt.Errorf("index: commit bucket %d: %w", meta.ID, err)
	}
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	if err := ix.writable(); err != nil {
		return CommitResult{}, fmt.Errorf("index: commit bucket %d: %w", meta.ID, err)
	}
	ix.writeMu.Lock()
	defer ix.writeMu.Unlock()
	res, delta, err := ix.stageCommit(c)
	if err != nil {
		return CommitResult{}, fmt.Errorf("index: commit bucket %d: %w", meta.ID, err)
	}
	ix.count.Add(delta)
	ix.next.Store(max(ix.next.Load(), meta.ID+1))
	return res, nil
}

// stageCommit builds and commits the batch of c. It returns the change of
// the object count. The caller holds mu (read) and writeMu.
func (ix *Index) stageCommit(c Commit) (CommitResult, int64, error) {
	meta := c.Meta
	exists, err := ix.has(bucketKey(meta.ID))
	if err != nil {
		return CommitResult{}, 0, err
	}
	if exists {
		return CommitResult{}, 0, ErrBucketExists
	}
	keys := make([][]byte, len(c.Entries))
	moving := make(map[string]bool, len(c.Entries))
	for i, e := range c.Entries {
		keys[i] = e.Key
		moving[string(e.Key)] = true
	}
	olds, err := ix.lookup(keys)
	if err != nil {
		return CommitResult{}, 0, err
	}
	b := ix.db.NewBatch()
	defer b.Close()
	var res CommitResult
	var delta int64
	t := tally{}
	meta.Live, meta.LiveBytes = len(c.Entries), 0
	for i, e := range c.Entries {
		switch old := olds[i]; {
		case !old.found:
			delta++
		case old.corrupt != nil:
			// The old record is unreadable: overwrite it, and drop its
			// membership record found by a scan (rare: corruption only).
			if err := ix.stageCorrupt(b, e.Key, t); err != nil {
				return CommitResult{}, 0, err
			}
		default:
			if err := b.Delete(membershipKey(old.loc.Bucket, e.Key), nil); err != nil {
				return CommitResult{}, 0, err
			}
			t.sub(old.loc)
			res.Replaced = append(res.Replaced, KeyLoc{Key: e.Key, Loc: old.loc})
		}
		if err := b.Set(objectKey(e.Key), encodeObject(e.Loc), nil); err != nil {
			return CommitResult{}, 0, err
		}
		if err := b.Set(membershipKey(meta.ID, e.Key), membershipValue, nil); err != nil {
			return CommitResult{}, 0, err
		}
		meta.LiveBytes += int64(e.Loc.StoredLen)
	}
	if err := b.Set(bucketKey(meta.ID), encodeBucket(meta), nil); err != nil {
		return CommitResult{}, 0, err
	}
	if err := b.Set(nextKey, encodeNext(max(ix.next.Load(), meta.ID+1)), nil); err != nil {
		return CommitResult{}, 0, err
	}
	skip := map[uint64]bool{}
	for _, id := range c.Drop {
		skip[id] = true
		removed, _, err := ix.stageDeleteBucket(b, id, moving)
		if err != nil {
			return CommitResult{}, 0, err
		}
		res.Dropped = append(res.Dropped, removed...)
		delta -= int64(len(removed))
	}
	if res.Emptied, err = ix.applyTally(b, t, skip); err != nil {
		return CommitResult{}, 0, err
	}
	if err := ix.commit(b); err != nil {
		return CommitResult{}, 0, err
	}
	return res, delta, nil
}

func validateCommit(c Commit) error {
	meta := c.Meta
	if meta.ID == math.MaxUint64 {
		return fmt.Errorf("%w: bucket id %d is reserved", ErrInvalidEntry, meta.ID)
	}
	if meta.Size < 0 || meta.Keys < 0 || meta.TrailerOff < 0 || meta.TrailerLen < 0 || meta.Written < 0 {
		return fmt.Errorf("%w: negative bucket size %d, key count %d, written bytes %d or trailer %d+%d", ErrInvalidEntry, meta.Size, meta.Keys, meta.Written, meta.TrailerOff, meta.TrailerLen)
	}
	if slices.Contains(c.Drop, meta.ID) {
		return fmt.Errorf("%w: bucket %d both committed and dropped", ErrInvalidEntry, meta.ID)
	}
	seen := make(map[string]struct{}, len(c.Entries))
	for i, e := range c.Entries {
		if err := checkKey(e.Key); err != nil {
			return fmt.Errorf("entry %d: %w", i, err)
		}
		if e.Loc.Bucket != meta.ID {
			return fmt.Errorf("%w: entry %d (key %s) has location in bucket %d", ErrInvalidEntry, i, keyspec.Show(e.Key), e.Loc.Bucket)
		}
		if e.Loc.Offset < 0 {
			return fmt.Errorf("%w: entry %d (key %s) has negative offset %d", ErrInvalidEntry, i, keyspec.Show(e.Key), e.Loc.Offset)
		}
		if _, dup := seen[string(e.Key)]; dup {
			return fmt.Errorf("%w: key %s appears twice", ErrInvalidEntry, keyspec.Show(e.Key))
		}
		seen[string(e.Key)] = struct{}{}
	}
	return nil
}

// DeleteBucket removes bucket id in one synced batch: its bucket record, its
// membership records, and the object record of every member whose location
// still points at id (a key re-committed into another bucket survives). It
// returns the keys whose object records it removed, in key order; an object
// record that does not decode is removed and returned too. Deleting a bucket
// that is not in the index removes nothing and is not an error.
func (ix *Index) DeleteBucket(id uint64) (removed [][]byte, err error) {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	if err := ix.writable(); err != nil {
		return nil, fmt.Errorf("index: delete bucket %d: %w", id, err)
	}
	ix.writeMu.Lock()
	defer ix.writeMu.Unlock()

	b := ix.db.NewBatch()
	defer b.Close()
	removed, found, err := ix.stageDeleteBucket(b, id, nil)
	if err != nil {
		return nil, fmt.Errorf("index: delete bucket %d: %w", id, err)
	}
	if !found {
		return nil, nil
	}
	if err := ix.commit(b); err != nil {
		return nil, fmt.Errorf("index: delete bucket %d: %w", id, err)
	}
	ix.count.Add(-int64(len(removed)))
	return removed, nil
}

// stageDeleteBucket adds the removal of bucket id to b, leaving alone the
// keys in keep (moved elsewhere by the same batch). found is false when the
// bucket has neither a record nor members. The caller holds mu (read) and
// writeMu.
func (ix *Index) stageDeleteBucket(b *pebble.Batch, id uint64, keep map[string]bool) (removed [][]byte, found bool, err error) {
	hasMeta, err := ix.has(bucketKey(id))
	if err != nil {
		return nil, false, err
	}
	members, err := ix.bucketKeys(id)
	if err != nil {
		return nil, false, err
	}
	if !hasMeta && len(members) == 0 {
		return nil, false, nil
	}
	for _, key := range members {
		if err := b.Delete(membershipKey(id, key), nil); err != nil {
			return nil, false, err
		}
		if keep[string(key)] {
			continue
		}
		loc, found, err := ix.get(key)
		var ce *CorruptError
		if errors.As(err, &ce) || (err == nil && found && loc.Bucket == id) {
			if err := b.Delete(objectKey(key), nil); err != nil {
				return nil, false, err
			}
			removed = append(removed, key)
		} else if err != nil {
			return nil, false, fmt.Errorf("read %s: %w", keyspec.Show(key), err)
		}
	}
	if err := b.Delete(bucketKey(id), nil); err != nil {
		return nil, false, err
	}
	if err := b.Delete(evictingKey(id), nil); err != nil {
		return nil, false, err
	}
	return removed, true, nil
}

// MarkEvicting records, in one synced batch, that bucket id is being
// evicted: its owner is being asked (tier.EvictFunc), and once it has
// answered the bucket goes. The record goes with the bucket
// (DeleteBucket, Commit's Drop) or with UnmarkEvicting (the owner
// refused); a tier that finds it at Open (a crash between the owner's
// answer and the bucket's removal) completes the eviction.
func (ix *Index) MarkEvicting(id uint64) error {
	return ix.setEvicting(id, true)
}

// UnmarkEvicting removes bucket id's evicting record in one synced batch
// (absent: nothing to do).
func (ix *Index) UnmarkEvicting(id uint64) error {
	return ix.setEvicting(id, false)
}

func (ix *Index) setEvicting(id uint64, on bool) error {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	if err := ix.writable(); err != nil {
		return fmt.Errorf("index: evicting record of bucket %d: %w", id, err)
	}
	ix.writeMu.Lock()
	defer ix.writeMu.Unlock()
	b := ix.db.NewBatch()
	defer b.Close()
	var err error
	if on {
		err = b.Set(evictingKey(id), evictingValue, nil)
	} else {
		err = b.Delete(evictingKey(id), nil)
	}
	if err == nil {
		err = ix.commit(b)
	}
	if err != nil {
		return fmt.Errorf("index: evicting record of bucket %d: %w", id, err)
	}
	return nil
}

// Evicting returns the ids of the buckets with an evicting record
// (MarkEvicting), in order. A record that does not decode is ErrCorrupt.
func (ix *Index) Evicting() ([]uint64, error) {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	if err := ix.usable(); err != nil {
		return nil, fmt.Errorf("index: evicting records: %w", err)
	}
	var ids []uint64
	err := ix.scan([]byte{prefixEvicting}, func(k, v []byte) error {
		if len(k) != 9 {
			return &CorruptError{Kind: kindEvicting, Reason: fmt.Sprintf("record key is %d bytes, want 9", len(k))}
		}
		id := binary.BigEndian.Uint64(k[1:])
		if r := checkValue(v, evictingValueLen); r != "" {
			return &CorruptError{Kind: kindEvicting, Bucket: id, Reason: r}
		}
		ids = append(ids, id)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("index: evicting records: %w", err)
	}
	return ids, nil
}

// DeleteKeys is RemoveKeys for callers that need no result.
func (ix *Index) DeleteKeys(keys [][]byte) error {
	_, err := ix.RemoveKeys(keys)
	return err
}

// RemoveKeys removes the object record of each key and its membership record
// in one synced batch, and lowers the live counts of their buckets in the
// same batch; a bucket left without members loses its record (Emptied).
// Keys not in the index are ignored; an object record that does not decode is
// removed, with the membership record that names the key (found by a scan of
// the membership records: corruption only).
func (ix *Index) RemoveKeys(keys [][]byte) (Removal, error) {
	return ix.remove(keys, nil)
}

// RemoveIfAt is RemoveKeys for keys that are still where the caller saw
// them: each entry's key is removed only if its object record names the
// same bucket and offset as its Loc (a key re-committed elsewhere meanwhile
// stays). The check and the removal are one step under the index's write
// lock. The engine drops an object that failed its checksum this way.
func (ix *Index) RemoveIfAt(entries []KeyLoc) (Removal, error) {
	keys := make([][]byte, len(entries))
	for i, e := range entries {
		keys[i] = e.Key
	}
	return ix.remove(keys, entries)
}

// remove is RemoveKeys, and RemoveIfAt when expect is not nil.
func (ix *Index) remove(keys [][]byte, expect []KeyLoc) (Removal, error) {
	for i, k := range keys {
		if err := checkKey(k); err != nil {
			return Removal{}, fmt.Errorf("index: delete keys: key %d: %w", i, err)
		}
	}
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	if err := ix.writable(); err != nil {
		return Removal{}, fmt.Errorf("index: delete keys: %w", err)
	}
	ix.writeMu.Lock()
	defer ix.writeMu.Unlock()

	b := ix.db.NewBatch()
	defer b.Close()
	seen := make(map[string]struct{}, len(keys))
	var res Removal
	t := tally{}
	for i, key := range keys {
		if _, dup := seen[string(key)]; dup {
			continue
		}
		seen[string(key)] = struct{}{}
		loc, found, err := ix.get(key)
		var ce *CorruptError
		switch {
		case errors.As(err, &ce) && expect == nil:
			loc = Location{}
			if err := ix.stageCorrupt(b, key, t); err != nil {
				return Removal{}, fmt.Errorf("index: delete keys: %w", err)
			}
		case errors.As(err, &ce):
			continue // not where the caller saw it
		case err != nil:
			return Removal{}, fmt.Errorf("index: delete keys: read %s: %w", keyspec.Show(key), err)
		case !found:
			continue
		case expect != nil && (loc.Bucket != expect[i].Loc.Bucket || loc.Offset != expect[i].Loc.Offset):
			continue
		default:
			if err := b.Delete(membershipKey(loc.Bucket, key), nil); err != nil {
				return Removal{}, fmt.Errorf("index: delete keys: %w", err)
			}
			t.sub(loc)
		}
		if err := b.Delete(objectKey(key), nil); err != nil {
			return Removal{}, fmt.Errorf("index: delete keys: %w", err)
		}
		res.Removed = append(res.Removed, KeyLoc{Key: clone(key), Loc: loc})
	}
	if len(res.Removed) == 0 {
		return Removal{}, nil
	}
	emptied, err := ix.applyTally(b, t, nil)
	if err != nil {
		return Removal{}, fmt.Errorf("index: delete keys: %w", err)
	}
	if err := ix.commit(b); err != nil {
		return Removal{}, fmt.Errorf("index: delete keys: %w", err)
	}
	res.Emptied = emptied
	ix.count.Add(-int64(len(res.Removed)))
	return res, nil
}

// stageCorrupt deletes, in b, the membership records of key, whose object
// record does not decode, and counts them in t. Membership records are keyed
// by bucket first, so this scans all of them: it runs only for corrupt
// records. The caller holds mu (read) and writeMu.
func (ix *Index) stageCorrupt(b *pebble.Batch, key []byte, t tally) error {
	var owners []uint64
	err := ix.scan([]byte{prefixMembership}, func(k, _ []byte) error {
		if len(k) == 9+len(key) && string(k[9:]) == string(key) {
			owners = append(owners, binary.BigEndian.Uint64(k[1:9]))
		}
		return nil
	})
	if err != nil {
		return err
	}
	for _, id := range owners {
		if err := b.Delete(membershipKey(id, key), nil); err != nil {
			return err
		}
		t.sub(Location{Bucket: id})
	}
	return nil
}

// tally accumulates, within one batch, the members that buckets lose.
type tally map[uint64]*struct {
	live  int
	bytes int64
}

// sub records that the object at loc leaves its bucket.
func (t tally) sub(loc Location) {
	d := t[loc.Bucket]
	if d == nil {
		d = &struct {
			live  int
			bytes int64
		}{}
		t[loc.Bucket] = d
	}
	d.live++
	d.bytes += int64(loc.StoredLen)
}

// applyTally rewrites, in b, the record of every bucket in t that is not in
// skip with its lowered live counts, or deletes it when no member is left.
// It returns the buckets so emptied, in ascending order. The caller holds mu
// (read) and writeMu.
func (ix *Index) applyTally(b *pebble.Batch, t tally, skip map[uint64]bool) ([]uint64, error) {
	ids := make([]uint64, 0, len(t))
	for id := range t {
		if !skip[id] {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	var emptied []uint64
	for _, id := range ids {
		m, found, err := ix.bucket(id)
		if err != nil {
			return nil, err
		}
		if !found {
			continue
		}
		d := t[id]
		m.Live -= d.live
		m.LiveBytes = max(m.LiveBytes-d.bytes, 0)
		if m.Live <= 0 {
			if err := b.Delete(bucketKey(id), nil); err != nil {
				return nil, err
			}
			if err := b.Delete(evictingKey(id), nil); err != nil {
				return nil, err
			}
			emptied = append(emptied, id)
			continue
		}
		if err := b.Set(bucketKey(id), encodeBucket(m), nil); err != nil {
			return nil, err
		}
	}
	return emptied, nil
}

// commit commits b with a WAL sync. pebble treats a failed WAL write or sync
// as fatal (it calls Logger.Fatalf, which pebbleLogger turns into a panic);
// commit recovers that panic, marks the index failed and returns ErrFailed.
// The caller holds mu (read) and writeMu.
func (ix *Index) commit(b *pebble.Batch) (err error) {
	defer func() {
		if ferr := recoverFatal(recover()); ferr != nil {
			ix.failed.CompareAndSwap(nil, &ferr)
			ix.log.Error("index commit failed; the index must be reopened", "err", ferr)
			err = ferr
		}
	}()
	return b.Commit(pebble.Sync)
}

// Session returns the session record (found false when there is none: a
// new index, or one whose tier never completed an Open). A record that
// does not decode is ErrCorrupt.
func (ix *Index) Session() (s Session, found bool, err error) {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	if err := ix.usable(); err != nil {
		return Session{}, false, fmt.Errorf("index: session record: %w", err)
	}
	v, closer, err := ix.db.Get(sessionKey)
	if errors.Is(err, pebble.ErrNotFound) {
		return Session{}, false, nil
	}
	if err != nil {
		return Session{}, false, fmt.Errorf("index: session record: %w", err)
	}
	defer closer.Close()
	s, err = decodeSession(v)
	if err != nil {
		return Session{}, false, fmt.Errorf("index: session record: %w", err)
	}
	return s, true, nil
}

// SetSession writes the session record in one synced batch.
func (ix *Index) SetSession(s Session) error {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	if err := ix.writable(); err != nil {
		return fmt.Errorf("index: session record: %w", err)
	}
	ix.writeMu.Lock()
	defer ix.writeMu.Unlock()
	b := ix.db.NewBatch()
	defer b.Close()
	err := b.Set(sessionKey, encodeSession(s), nil)
	if err == nil {
		err = ix.commit(b)
	}
	if err != nil {
		return fmt.Errorf("index: session record: %w", err)
	}
	return nil
}
