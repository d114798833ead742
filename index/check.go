package index

import (
	"encoding/binary"
	"fmt"
)

// Check verifies the invariants of the index against its records and returns
// an error wrapping ErrInconsistent (or ErrCorrupt) describing the first
// violation: every object record decodes and has a membership record in the
// bucket it names; every membership record has an object record naming its
// bucket and a bucket record; NextBucketID exceeds every bucket id; Count
// equals the number of object records. It reads the whole index and holds
// the write lock meanwhile: it is meant for tests and offline tools.
func (ix *Index) Check() error {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	if err := ix.usable(); err != nil {
		return fmt.Errorf("index: check: %w", err)
	}
	ix.writeMu.Lock()
	defer ix.writeMu.Unlock()

	buckets := map[uint64]bool{}
	next := ix.next.Load()
	err := ix.scan([]byte{prefixBucket}, func(k, v []byte) error {
		if len(k) != 9 {
			return &CorruptError{Kind: kindBucket, Reason: fmt.Sprintf("record key is %d bytes, want 9", len(k))}
		}
		id := binary.BigEndian.Uint64(k[1:])
		if _, err := decodeBucket(id, v); err != nil {
			return err
		}
		if id >= next {
			return fmt.Errorf("%w: bucket %d is not below the next bucket id %d", ErrInconsistent, id, next)
		}
		buckets[id] = true
		return nil
	})
	if err != nil {
		return fmt.Errorf("index: check: %w", err)
	}

	// objects maps each key to its bucket; member records which keys have
	// their membership record.
	objects := map[string]uint64{}
	err = ix.scan([]byte{prefixObject}, func(k, v []byte) error {
		loc, err := decodeObject(k[1:], v)
		if err != nil {
			return err
		}
		objects[string(k[1:])] = loc.Bucket
		return nil
	})
	if err != nil {
		return fmt.Errorf("index: check: %w", err)
	}
	if n := ix.count.Load(); n != int64(len(objects)) {
		return fmt.Errorf("index: check: %w: Count is %d but there are %d object records", ErrInconsistent, n, len(objects))
	}

	member := map[string]bool{}
	err = ix.scan([]byte{prefixMembership}, func(k, v []byte) error {
		if len(k) < 10 {
			return &CorruptError{Kind: kindMembership, Reason: fmt.Sprintf("record key is %d bytes, want at least 10", len(k))}
		}
		id, key := binary.BigEndian.Uint64(k[1:9]), k[9:]
		if err := decodeMembership(id, key, v); err != nil {
			return err
		}
		b, ok := objects[string(key)]
		switch {
		case !ok:
			return fmt.Errorf("%w: key %s is a member of bucket %d but has no object record", ErrInconsistent, showKey(key), id)
		case b != id:
			return fmt.Errorf("%w: key %s is a member of bucket %d but its location is in bucket %d", ErrInconsistent, showKey(key), id, b)
		case !buckets[id]:
			return fmt.Errorf("%w: key %s is a member of bucket %d, which has no bucket record", ErrInconsistent, showKey(key), id)
		}
		member[string(key)] = true
		return nil
	})
	if err != nil {
		return fmt.Errorf("index: check: %w", err)
	}
	for key, id := range objects {
		if !member[key] {
			return fmt.Errorf("index: check: %w: key %s has no membership record in bucket %d", ErrInconsistent, showKey([]byte(key)), id)
		}
	}
	return nil
}
