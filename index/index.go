package index

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"sort"
	"sync"
	"sync/atomic"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/bloom"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// Location says where an object's bytes are: which bucket file, at which
// offset, how many bytes are stored there (StoredLen, after the codec) and how
// long the value is once decoded (ValueLen), the codec (as defined by package
// bucket) and the CRC32C of the value.
type Location struct {
	Bucket    uint64
	Offset    int64
	StoredLen uint32
	ValueLen  uint32
	Codec     uint8
	CRC       uint32
}

// BucketMeta describes one committed bucket file.
type BucketMeta struct {
	ID      uint64
	Size    int64 // bucket file bytes
	Keys    int   // objects written into the bucket file
	Created int64 // unix nanoseconds
}

// KeyLoc is one object committed by CommitBucket.
type KeyLoc struct {
	Key []byte
	Loc Location
}

// Options configure Open. The zero value of each field takes its default.
type Options struct {
	// FS is the filesystem of the pebble database. Default vfs.Default.
	FS vfs.FS
	// CacheSize is pebble's block cache in bytes, not counting the memtables
	// (two of 4 MiB at most, plus any an iterator keeps alive). Default 8 MiB.
	CacheSize int64
	// Logger receives pebble's messages (informational ones at Debug level).
	// Default slog.Default().
	Logger *slog.Logger
	// ReadOnly opens the database without write access; writes return
	// ErrReadOnly.
	ReadOnly bool
}

const (
	defaultCacheSize = 8 << 20
	memTableSize     = 4 << 20
	// memTableReserve is how many memtables' worth of bytes the block cache
	// is enlarged by (see Open).
	memTableReserve = 3
	// keysChunk is how many objects Keys reads under the lock before it
	// calls fn for them without the lock.
	keysChunk = 256
)

// Index is the pebble-backed object index of one tier directory. See the
// package documentation for its invariants and concurrency contract.
type Index struct {
	db       *pebble.DB
	readOnly bool
	log      *slog.Logger

	// mu guards closed and the lifetime of db: every operation holds it in
	// read mode for as long as it uses db; Close holds it in write mode.
	mu     sync.RWMutex
	closed bool

	// writeMu serialises CommitBucket, DeleteBucket and DeleteKeys, so that
	// the read-modify-write of count and next against db is exact. Lock
	// order: mu (read) before writeMu.
	writeMu sync.Mutex

	count  atomic.Int64          // objects in the index; written under writeMu
	next   atomic.Uint64         // next unused bucket id; written under writeMu
	failed atomic.Pointer[error] // set once, when a pebble commit failed fatally
}

// Open opens (creating if needed, unless opts.ReadOnly) the pebble database in
// dir and loads the object count and the next bucket id.
func Open(dir string, opts Options) (ix *Index, err error) {
	if dir == "" {
		return nil, fmt.Errorf("index: open: %w: empty directory name", ErrInvalidOptions)
	}
	if opts.FS == nil {
		opts.FS = vfs.Default
	}
	if opts.CacheSize < 0 {
		return nil, fmt.Errorf("index: open: %w: negative CacheSize %d", ErrInvalidOptions, opts.CacheSize)
	}
	if opts.CacheSize == 0 {
		opts.CacheSize = defaultCacheSize
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	log := opts.Logger.With("component", "index", "dir", dir)

	// pebble charges every memtable (the mutable one, one being flushed and
	// zombies kept alive by iterators) against the block cache's capacity.
	// Without headroom a small cache holds no blocks at all, and every
	// lookup goes to the disk. The headroom is accounting, not memory: the
	// memtables exist either way.
	cache := pebble.NewCache(opts.CacheSize + memTableReserve*memTableSize)
	defer cache.Unref() // the DB holds its own reference
	popts := &pebble.Options{
		FS:                 opts.FS,
		Cache:              cache,
		MemTableSize:       memTableSize,
		ReadOnly:           opts.ReadOnly,
		ErrorIfNotExists:   opts.ReadOnly,
		FormatMajorVersion: pebble.FormatNewest,
		Logger:             pebbleLogger{log},
	}
	// Bloom filters: CommitBucket looks up every key it commits, and the
	// engine's duplicate checks look up keys that are mostly absent.
	for i := range popts.Levels {
		popts.Levels[i].FilterPolicy = bloom.FilterPolicy(10)
	}
	defer func() {
		if ferr := recoverFatal(recover()); ferr != nil {
			ix, err = nil, fmt.Errorf("index: open %s: %w", dir, ferr)
		}
	}()
	db, err := pebble.Open(dir, popts)
	if err != nil {
		return nil, fmt.Errorf("index: open %s: %w", dir, err)
	}
	ix = &Index{db: db, readOnly: opts.ReadOnly, log: log}
	if err := ix.load(); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("index: open %s: %w", dir, err)
	}
	return ix, nil
}

// load computes count and next from the database.
func (ix *Index) load() error {
	next := uint64(1)
	v, closer, err := ix.db.Get(nextKey)
	switch {
	case err == nil:
		n, derr := decodeNext(v)
		closer.Close()
		if derr != nil {
			return derr
		}
		next = max(next, n)
	case !errors.Is(err, pebble.ErrNotFound):
		return err
	}

	// Bucket records: next must exceed every committed id even if the
	// next-bucket-id record is older than them (it never is when written by
	// this package; this is a belt for hand-made databases).
	if err := ix.scan([]byte{prefixBucket}, func(k, _ []byte) error {
		if len(k) != 9 {
			return &CorruptError{Kind: kindBucket, Reason: fmt.Sprintf("record key is %d bytes, want 9", len(k))}
		}
		if id := binary.BigEndian.Uint64(k[1:]); id != math.MaxUint64 {
			next = max(next, id+1)
		}
		return nil
	}); err != nil {
		return err
	}

	var n int64
	if err := ix.scan([]byte{prefixObject}, func(_, _ []byte) error { n++; return nil }); err != nil {
		return err
	}
	ix.count.Store(n)
	ix.next.Store(next)
	return nil
}

// scan calls fn for every record whose key starts with prefix, in key order.
// The slices are valid only during the call. The caller holds mu (or owns ix
// exclusively).
func (ix *Index) scan(prefix []byte, fn func(k, v []byte) error) error {
	return ix.scanRange(prefix, prefixUpperBound(prefix), fn)
}

// scanRange calls fn for every record with lower <= key < upper.
func (ix *Index) scanRange(lower, upper []byte, fn func(k, v []byte) error) error {
	it, err := ix.db.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: upper})
	if err != nil {
		return err
	}
	for valid := it.First(); valid; valid = it.Next() {
		v, err := it.ValueAndErr()
		if err != nil {
			it.Close()
			return err
		}
		if err := fn(it.Key(), v); err != nil {
			it.Close()
			return err
		}
	}
	return it.Close()
}

// usable reports why ix cannot be used, or nil. The caller holds mu.
func (ix *Index) usable() error {
	if ix.closed {
		return ErrClosed
	}
	if f := ix.failed.Load(); f != nil {
		return *f
	}
	return nil
}

func (ix *Index) writable() error {
	if err := ix.usable(); err != nil {
		return err
	}
	if ix.readOnly {
		return ErrReadOnly
	}
	return nil
}

// Get returns the location of key; found is false when the key is not in the
// index. A record that does not decode returns an error wrapping ErrCorrupt
// (a *CorruptError naming the key).
func (ix *Index) Get(key []byte) (loc Location, found bool, err error) {
	if err := checkKey(key); err != nil {
		return Location{}, false, fmt.Errorf("index: get: %w", err)
	}
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	if err := ix.usable(); err != nil {
		return Location{}, false, fmt.Errorf("index: get: %w", err)
	}
	loc, found, err = ix.get(key)
	if err != nil {
		return Location{}, false, fmt.Errorf("index: get %s: %w", showKey(key), err)
	}
	return loc, found, nil
}

// GetMany looks up many keys at once: locs[i] and found[i] answer keys[i]. It
// sorts the keys and probes them through one iterator that uses the bloom
// filters of every level, which is cheaper than a Get per key when many keys
// are absent (the duplicate check of an offload). A record that does not
// decode fails the call with an error wrapping ErrCorrupt naming the key.
func (ix *Index) GetMany(keys [][]byte) (locs []Location, found []bool, err error) {
	for i, k := range keys {
		if err := checkKey(k); err != nil {
			return nil, nil, fmt.Errorf("index: get many: key %d: %w", i, err)
		}
	}
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	if err := ix.usable(); err != nil {
		return nil, nil, fmt.Errorf("index: get many: %w", err)
	}
	res, err := ix.lookup(keys)
	if err != nil {
		return nil, nil, fmt.Errorf("index: get many: %w", err)
	}
	locs, found = make([]Location, len(keys)), make([]bool, len(keys))
	for i, r := range res {
		if r.corrupt != nil {
			return nil, nil, fmt.Errorf("index: get many: %w", r.corrupt)
		}
		locs[i], found[i] = r.loc, r.found
	}
	return locs, found, nil
}

// get reads and decodes the object record of key. The caller holds mu.
func (ix *Index) get(key []byte) (Location, bool, error) {
	v, closer, err := ix.db.Get(objectKey(key))
	if errors.Is(err, pebble.ErrNotFound) {
		return Location{}, false, nil
	}
	if err != nil {
		return Location{}, false, err
	}
	defer closer.Close()
	loc, err := decodeObject(key, v)
	if err != nil {
		return Location{}, false, err
	}
	return loc, true, nil
}

// lookupResult is the state of one key found by lookup.
type lookupResult struct {
	found   bool
	corrupt error // found, but the record does not decode (*CorruptError)
	loc     Location
}

// lookup returns the current state of each key, in the order given. It uses
// one iterator that consults the bloom filters of every level (a plain Get
// skips them on the bottom level, where most records of a small index live),
// so keys that are absent, the common case for a commit, cost a filter probe
// instead of index and data block reads. The caller holds mu.
func (ix *Index) lookup(keys [][]byte) ([]lookupResult, error) {
	out := make([]lookupResult, len(keys))
	if len(keys) == 0 {
		return out, nil
	}
	lower := []byte{prefixObject}
	it, err := ix.db.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: prefixUpperBound(lower), UseL6Filters: true})
	if err != nil {
		return nil, err
	}
	defer it.Close()
	// Seek in key order: neighbouring seeks then share cached blocks.
	order := make([]int, len(keys))
	for i := range order {
		order[i] = i
	}
	sort.Slice(order, func(a, b int) bool { return bytes.Compare(keys[order[a]], keys[order[b]]) < 0 })
	for _, i := range order {
		k := objectKey(keys[i])
		if !it.SeekPrefixGE(k) || !bytes.Equal(it.Key(), k) {
			if err := it.Error(); err != nil {
				return nil, err
			}
			continue
		}
		v, err := it.ValueAndErr()
		if err != nil {
			return nil, err
		}
		out[i].found = true
		loc, err := decodeObject(keys[i], v)
		if err != nil {
			out[i].corrupt = err
			continue
		}
		out[i].loc = loc
	}
	return out, nil
}

// has reports whether pebble holds key. The caller holds mu.
func (ix *Index) has(k []byte) (bool, error) {
	_, closer, err := ix.db.Get(k)
	if errors.Is(err, pebble.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	closer.Close()
	return true, nil
}

// CommitBucket records bucket meta and every entry in one synced pebble
// batch: the object record of each key (overwriting an existing one, whose
// stale membership record in its old bucket is deleted), the membership record
// of each key in meta.ID, the bucket record, and the next bucket id, raised to
// meta.ID+1 if it is lower. When CommitBucket returns nil, all of it is
// durable; when it returns an error, none of it is visible after a reopen (and
// none of it is visible before one unless the error wraps ErrFailed, after
// which the index must be reopened anyway).
//
// Every entry must have Loc.Bucket == meta.ID, distinct valid keys and a
// non-negative offset (ErrInvalidEntry, ErrInvalidKey). A bucket id is
// committed once (ErrBucketExists).
func (ix *Index) CommitBucket(meta BucketMeta, entries []KeyLoc) error {
	if err := validateCommit(meta, entries); err != nil {
		return fmt.Errorf("index: commit bucket %d: %w", meta.ID, err)
	}
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	if err := ix.writable(); err != nil {
		return fmt.Errorf("index: commit bucket %d: %w", meta.ID, err)
	}
	ix.writeMu.Lock()
	defer ix.writeMu.Unlock()

	exists, err := ix.has(bucketKey(meta.ID))
	if err != nil {
		return fmt.Errorf("index: commit bucket %d: %w", meta.ID, err)
	}
	if exists {
		return fmt.Errorf("index: commit bucket %d: %w", meta.ID, ErrBucketExists)
	}

	keys := make([][]byte, len(entries))
	for i, e := range entries {
		keys[i] = e.Key
	}
	olds, err := ix.lookup(keys)
	if err != nil {
		return fmt.Errorf("index: commit bucket %d: %w", meta.ID, err)
	}
	b := ix.db.NewBatch()
	defer b.Close()
	var added int64
	for i, e := range entries {
		switch old := olds[i]; {
		case !old.found:
			added++
		case old.corrupt != nil:
			// The old record is unreadable: overwrite it. Its membership
			// record (if any) cannot be found and is left to DeleteBucket.
		case old.loc.Bucket != meta.ID:
			if err := b.Delete(membershipKey(old.loc.Bucket, e.Key), nil); err != nil {
				return fmt.Errorf("index: commit bucket %d: %w", meta.ID, err)
			}
		}
		if err := b.Set(objectKey(e.Key), encodeObject(e.Loc), nil); err != nil {
			return fmt.Errorf("index: commit bucket %d: %w", meta.ID, err)
		}
		if err := b.Set(membershipKey(meta.ID, e.Key), membershipValue, nil); err != nil {
			return fmt.Errorf("index: commit bucket %d: %w", meta.ID, err)
		}
	}
	if err := b.Set(bucketKey(meta.ID), encodeBucket(meta), nil); err != nil {
		return fmt.Errorf("index: commit bucket %d: %w", meta.ID, err)
	}
	next := max(ix.next.Load(), meta.ID+1)
	if err := b.Set(nextKey, encodeNext(next), nil); err != nil {
		return fmt.Errorf("index: commit bucket %d: %w", meta.ID, err)
	}
	if err := ix.commit(b); err != nil {
		return fmt.Errorf("index: commit bucket %d: %w", meta.ID, err)
	}
	ix.count.Add(added)
	ix.next.Store(next)
	return nil
}

func validateCommit(meta BucketMeta, entries []KeyLoc) error {
	if meta.ID == math.MaxUint64 {
		return fmt.Errorf("%w: bucket id %d is reserved", ErrInvalidEntry, meta.ID)
	}
	if meta.Size < 0 || meta.Keys < 0 {
		return fmt.Errorf("%w: negative bucket size %d or key count %d", ErrInvalidEntry, meta.Size, meta.Keys)
	}
	seen := make(map[string]struct{}, len(entries))
	for i, e := range entries {
		if err := checkKey(e.Key); err != nil {
			return fmt.Errorf("entry %d: %w", i, err)
		}
		if e.Loc.Bucket != meta.ID {
			return fmt.Errorf("%w: entry %d (key %s) has location in bucket %d", ErrInvalidEntry, i, showKey(e.Key), e.Loc.Bucket)
		}
		if e.Loc.Offset < 0 {
			return fmt.Errorf("%w: entry %d (key %s) has negative offset %d", ErrInvalidEntry, i, showKey(e.Key), e.Loc.Offset)
		}
		if _, dup := seen[string(e.Key)]; dup {
			return fmt.Errorf("%w: key %s appears twice", ErrInvalidEntry, showKey(e.Key))
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

	hasMeta, err := ix.has(bucketKey(id))
	if err != nil {
		return nil, fmt.Errorf("index: delete bucket %d: %w", id, err)
	}
	members, err := ix.bucketKeys(id)
	if err != nil {
		return nil, fmt.Errorf("index: delete bucket %d: %w", id, err)
	}
	if !hasMeta && len(members) == 0 {
		return nil, nil
	}

	b := ix.db.NewBatch()
	defer b.Close()
	for _, key := range members {
		loc, found, err := ix.get(key)
		var ce *CorruptError
		if errors.As(err, &ce) || (err == nil && found && loc.Bucket == id) {
			if err := b.Delete(objectKey(key), nil); err != nil {
				return nil, fmt.Errorf("index: delete bucket %d: %w", id, err)
			}
			removed = append(removed, key)
		} else if err != nil {
			return nil, fmt.Errorf("index: delete bucket %d: read %s: %w", id, showKey(key), err)
		}
		if err := b.Delete(membershipKey(id, key), nil); err != nil {
			return nil, fmt.Errorf("index: delete bucket %d: %w", id, err)
		}
	}
	if err := b.Delete(bucketKey(id), nil); err != nil {
		return nil, fmt.Errorf("index: delete bucket %d: %w", id, err)
	}
	if err := ix.commit(b); err != nil {
		return nil, fmt.Errorf("index: delete bucket %d: %w", id, err)
	}
	ix.count.Add(-int64(len(removed)))
	return removed, nil
}

// DeleteKeys removes the object record of each key and its membership record
// in one synced batch. Keys not in the index are ignored; an object record
// that does not decode is removed (its membership record, which cannot be
// located, is left for DeleteBucket).
func (ix *Index) DeleteKeys(keys [][]byte) error {
	for i, k := range keys {
		if err := checkKey(k); err != nil {
			return fmt.Errorf("index: delete keys: key %d: %w", i, err)
		}
	}
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	if err := ix.writable(); err != nil {
		return fmt.Errorf("index: delete keys: %w", err)
	}
	ix.writeMu.Lock()
	defer ix.writeMu.Unlock()

	b := ix.db.NewBatch()
	defer b.Close()
	seen := make(map[string]struct{}, len(keys))
	var removed int64
	for _, key := range keys {
		if _, dup := seen[string(key)]; dup {
			continue
		}
		seen[string(key)] = struct{}{}
		loc, found, err := ix.get(key)
		var ce *CorruptError
		switch {
		case errors.As(err, &ce):
		case err != nil:
			return fmt.Errorf("index: delete keys: read %s: %w", showKey(key), err)
		case !found:
			continue
		default:
			if err := b.Delete(membershipKey(loc.Bucket, key), nil); err != nil {
				return fmt.Errorf("index: delete keys: %w", err)
			}
		}
		if err := b.Delete(objectKey(key), nil); err != nil {
			return fmt.Errorf("index: delete keys: %w", err)
		}
		removed++
	}
	if removed == 0 {
		return nil
	}
	if err := ix.commit(b); err != nil {
		return fmt.Errorf("index: delete keys: %w", err)
	}
	ix.count.Add(-removed)
	return nil
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

// Buckets returns every committed bucket, in ascending id order.
func (ix *Index) Buckets() ([]BucketMeta, error) {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	if err := ix.usable(); err != nil {
		return nil, fmt.Errorf("index: buckets: %w", err)
	}
	var out []BucketMeta
	err := ix.scan([]byte{prefixBucket}, func(k, v []byte) error {
		if len(k) != 9 {
			return &CorruptError{Kind: kindBucket, Reason: fmt.Sprintf("record key is %d bytes, want 9", len(k))}
		}
		m, err := decodeBucket(binary.BigEndian.Uint64(k[1:]), v)
		if err != nil {
			return err
		}
		out = append(out, m)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("index: buckets: %w", err)
	}
	return out, nil
}

// BucketKeys returns the keys whose membership records say they live in
// bucket id, in key order.
func (ix *Index) BucketKeys(id uint64) ([][]byte, error) {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	if err := ix.usable(); err != nil {
		return nil, fmt.Errorf("index: bucket keys %d: %w", id, err)
	}
	keys, err := ix.bucketKeys(id)
	if err != nil {
		return nil, fmt.Errorf("index: bucket keys %d: %w", id, err)
	}
	return keys, nil
}

func (ix *Index) bucketKeys(id uint64) ([][]byte, error) {
	var keys [][]byte
	err := ix.scan(membershipPrefix(id), func(k, v []byte) error {
		key := k[9:]
		if err := decodeMembership(id, key, v); err != nil {
			return err
		}
		keys = append(keys, clone(key))
		return nil
	})
	return keys, err
}

// BucketLiveKeys returns the number of membership records of bucket id: the
// objects that still live in it.
func (ix *Index) BucketLiveKeys(id uint64) (int, error) {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	if err := ix.usable(); err != nil {
		return 0, fmt.Errorf("index: bucket live keys %d: %w", id, err)
	}
	n := 0
	err := ix.scan(membershipPrefix(id), func(k, v []byte) error {
		if err := decodeMembership(id, k[9:], v); err != nil {
			return err
		}
		n++
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("index: bucket live keys %d: %w", id, err)
	}
	return n, nil
}

// Keys calls fn for every object in key order until fn returns false. fn
// owns the key slice it is given and runs without any index lock held, so it
// may call other methods of ix (a commit made during Keys may or may not be
// seen). A record that does not decode stops the iteration with an error
// wrapping ErrCorrupt.
func (ix *Index) Keys(fn func(key []byte, loc Location) bool) error {
	lower := []byte{prefixObject}
	upper := prefixUpperBound(lower)
	for {
		batch, err := ix.keysChunk(lower, upper)
		if err != nil {
			return fmt.Errorf("index: keys: %w", err)
		}
		for _, kl := range batch {
			if !fn(kl.Key, kl.Loc) {
				return nil
			}
		}
		if len(batch) < keysChunk {
			return nil
		}
		// Resume just after the last key seen: its successor is key+0x00.
		lower = append(objectKey(batch[len(batch)-1].Key), 0)
	}
}

// keysChunk reads up to keysChunk object records from lower on.
func (ix *Index) keysChunk(lower, upper []byte) ([]KeyLoc, error) {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	if err := ix.usable(); err != nil {
		return nil, err
	}
	out := make([]KeyLoc, 0, keysChunk)
	errStop := errors.New("stop")
	err := ix.scanRange(lower, upper, func(k, v []byte) error {
		key := clone(k[1:])
		loc, err := decodeObject(key, v)
		if err != nil {
			return err
		}
		out = append(out, KeyLoc{Key: key, Loc: loc})
		if len(out) == keysChunk {
			return errStop
		}
		return nil
	})
	if err != nil && err != errStop {
		return nil, err
	}
	return out, nil
}

// NextBucketID returns the smallest bucket id greater than every committed
// one (1 for an empty index). The engine allocates bucket ids from it.
func (ix *Index) NextBucketID() uint64 { return ix.next.Load() }

// Count returns the number of objects in the index.
func (ix *Index) Count() int64 { return ix.count.Load() }

// Close closes the pebble database. It waits for operations in progress.
// Later calls (and a second Close) return ErrClosed.
func (ix *Index) Close() (err error) {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	if ix.closed {
		return fmt.Errorf("index: close: %w", ErrClosed)
	}
	ix.closed = true
	defer func() {
		if ferr := recoverFatal(recover()); ferr != nil {
			err = fmt.Errorf("index: close: %w", ferr)
		}
	}()
	if err := ix.db.Close(); err != nil {
		return fmt.Errorf("index: close: %w", err)
	}
	return nil
}

// showKey renders a key for an error message, shortened if long.
func showKey(key []byte) string {
	const max = 64
	if len(key) > max {
		return fmt.Sprintf("%q...(%d bytes)", key[:max], len(key))
	}
	return fmt.Sprintf("%q", key)
}

// pebbleFatal is the panic value of pebbleLogger.Fatalf.
type pebbleFatal struct{ msg string }

// recoverFatal turns a recovered pebbleFatal into an error wrapping
// ErrFailed; any other panic is re-raised. It returns nil when r is nil.
func recoverFatal(r any) error {
	if r == nil {
		return nil
	}
	if f, ok := r.(pebbleFatal); ok {
		return fmt.Errorf("%w: %s", ErrFailed, f.msg)
	}
	panic(r)
}

// pebbleLogger routes pebble's log messages to slog. Fatalf panics with a
// pebbleFatal instead of exiting the process, so that a failed commit
// becomes an error of the call that made it (see Index.commit). A fatal error
// in one of pebble's background goroutines still ends the process, as it
// would with pebble's default logger.
type pebbleLogger struct{ l *slog.Logger }

func (p pebbleLogger) Infof(format string, args ...any) {
	p.l.Debug(fmt.Sprintf(format, args...))
}

func (p pebbleLogger) Errorf(format string, args ...any) {
	p.l.Error(fmt.Sprintf(format, args...))
}

func (p pebbleLogger) Fatalf(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	p.l.Error("pebble fatal error", "msg", msg)
	panic(pebbleFatal{msg: msg})
}
