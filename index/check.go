package index

import (
	"encoding/binary"
	"fmt"

	"github.com/tierstore/tierstore/internal/keyspec"
)

// Check verifies the invariants of the index against its records and returns
// an error wrapping ErrInconsistent (or ErrCorrupt) describing the first
// violation: every object record decodes and has a membership record in the
// bucket it names; every membership record has an object record naming its
// bucket and a bucket record; every bucket record's live count and live
// bytes equal its members' count and summed stored lengths; NextBucketID
// exceeds every bucket id; Count equals the number of object records. It reads the whole index and holds
// the write lock meanwhile: it is meant for tests and offline tools.
func (ix *Index) Check() error {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	if err := ix.usable(); err != nil {
		return fmt.Errorf("index: check: %w", err)
	}
	ix.writeMu.Lock()
	defer ix.writeMu.Unlock()

	buckets := map[uint64]BucketMeta{}
	next := ix.next.Load()
	err := ix.scan([]byte{prefixBucket}, func(k, v []byte) error {
		if len(k) != 9 {
			return &CorruptError{Kind: kindBucket, Reason: fmt.Sprintf("record key is %d bytes, want 9", len(k))}
		}
		id := binary.BigEndian.Uint64(k[1:])
		m, err := decodeBucket(id, v)
		if err != nil {
			return err
		}
		if id >= next {
			return fmt.Errorf("%w: bucket %d is not below the next bucket id %d", ErrInconsistent, id, next)
		}
		buckets[id] = m
		return nil
	})
	if err != nil {
		return fmt.Errorf("index: check: %w", err)
	}

	// objects maps each key to its bucket; member records which keys have
	// their membership record.
	objects := map[string]Location{}
	err = ix.scan([]byte{prefixObject}, func(k, v []byte) error {
		loc, err := decodeObject(k[1:], v)
		if err != nil {
			return err
		}
		objects[string(k[1:])] = loc
		return nil
	})
	if err != nil {
		return fmt.Errorf("index: check: %w", err)
	}

	member := map[string]bool{}
	live := map[uint64]int{}
	liveBytes := map[uint64]int64{}
	err = ix.scan([]byte{prefixMembership}, func(k, v []byte) error {
		if len(k) < 10 {
			return &CorruptError{Kind: kindMembership, Reason: fmt.Sprintf("record key is %d bytes, want at least 10", len(k))}
		}
		id, key := binary.BigEndian.Uint64(k[1:9]), k[9:]
		if err := decodeMembership(id, key, v); err != nil {
			return err
		}
		loc, ok := objects[string(key)]
		_, hasBucket := buckets[id]
		switch {
		case !ok:
			return fmt.Errorf("%w: key %s is a member of bucket %d but has no object record", ErrInconsistent, keyspec.Show(key), id)
		case loc.Bucket != id:
			return fmt.Errorf("%w: key %s is a member of bucket %d but its location is in bucket %d", ErrInconsistent, keyspec.Show(key), id, loc.Bucket)
		case !hasBucket:
			return fmt.Errorf("%w: key %s is a member of bucket %d, which has no bucket record", ErrInconsistent, keyspec.Show(key), id)
		}
		member[string(key)] = true
		live[id]++
		liveBytes[id] += int64(loc.StoredLen)
		return nil
	})
	if err != nil {
		return fmt.Errorf("index: check: %w", err)
	}
	for key, loc := range objects {
		if !member[key] {
			return fmt.Errorf("index: check: %w: key %s has no membership record in bucket %d", ErrInconsistent, keyspec.Show([]byte(key)), loc.Bucket)
		}
	}
	if n := ix.count.Load(); n != int64(len(objects)) {
		return fmt.Errorf("index: check: %w: Count is %d but there are %d object records", ErrInconsistent, n, len(objects))
	}
	for id, m := range buckets {
		if m.Live != live[id] || m.LiveBytes != liveBytes[id] {
			return fmt.Errorf("index: check: %w: bucket %d records %d live objects of %d bytes, its members are %d of %d bytes",
				ErrInconsistent, id, m.Live, m.LiveBytes, live[id], liveBytes[id])
		}
	}
	return nil
}
