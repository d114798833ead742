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

	"github.com/tierstore/tierstore/internal/keyspec"
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
	// Live is the number of objects that still live in the bucket and
	// LiveBytes the sum of their stored lengths. Commit sets them from its
	// entries (the caller's values are ignored) and every later write that
	// moves or removes a member keeps them in step, in the same batch; a
	// bucket whose last member goes loses its record in that batch.
	Live      int
	LiveBytes int64
	// TrailerOff, TrailerLen and TrailerCRC locate the bucket file's
	// trailer and hold its CRC32C (package bucket's footer fields), so that
	// a bucket is validated against its file with one read at Open.
	TrailerOff int64
	TrailerLen int64
	TrailerCRC uint32
	// Written is the stored bytes of every object written into the bucket
	// file (the sum of its trailer's stored lengths; its dead bytes are
	// Written - LiveBytes), as the committer gave it; it never changes
	// afterwards. A tier that opens without reading the bucket's trailer
	// takes its dead bytes from it.
	Written int64
}

// Session is the session record (format 3): which buckets a later Open
// need not read to prove them against their records. Every bucket with an
// id below ProvenBelow was committed before the session that wrote the
// record started (and was proven at that Open, or by the clean close
// before it), or, when Clean, the record was written by a clean close and
// covers every bucket. A tier writes it (synced) at Open, before it writes
// any bucket, with ProvenBelow its next bucket id, and again at a clean
// Close: after a crash only the buckets the crashed session wrote (ids at
// or above ProvenBelow) are read.
type Session struct {
	ProvenBelow uint64
	Clean       bool
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
	keysChunk = 1024
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

// load computes count and next from the database: next from the
// next-bucket-id record and the bucket records (next must exceed every
// committed id even if the next-bucket-id record is older than them; it never
// is when written by this package, this is a belt for hand-made databases),
// count as the sum of the
// buckets' live counts (one record per bucket, not per object).
func (ix *Index) load() error {
	if err := ix.checkFormat(); err != nil {
		return err
	}
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
	// A bucket record that does not decode still raises next; it counts no
	// objects, and Buckets reports it (ErrCorrupt).
	var metas []BucketMeta
	err = ix.scan([]byte{prefixBucket}, func(k, v []byte) error {
		if len(k) != 9 {
			return &CorruptError{Kind: kindBucket, Reason: fmt.Sprintf("record key is %d bytes, want 9", len(k))}
		}
		id := binary.BigEndian.Uint64(k[1:])
		if id != math.MaxUint64 {
			next = max(next, id+1)
		}
		if m, err := decodeBucket(id, v); err == nil {
			metas = append(metas, m)
		}
		return nil
	})
	if err != nil {
		return err
	}
	var n int64
	for _, m := range metas {
		n += int64(m.Live)
	}
	ix.count.Store(n)
	ix.next.Store(next)
	return nil
}

// checkFormat reads the format record. An index without one is new (it has
// no record at all; the format record is then written, unless read-only)
// or was written before formats were versioned (format 0). Any version but
// FormatVersion is refused, naming both, and nothing is written.
func (ix *Index) checkFormat() error {
	v, closer, err := ix.db.Get(formatKey)
	switch {
	case err == nil:
		got, derr := decodeFormat(v)
		closer.Close()
		if derr != nil {
			return derr
		}
		if got != FormatVersion {
			return fmt.Errorf("%w: the index is of format version %d, this build reads version %d", ErrFormatVersion, got, FormatVersion)
		}
		return nil
	case !errors.Is(err, pebble.ErrNotFound):
		return err
	}
	it, err := ix.db.NewIter(nil)
	if err != nil {
		return err
	}
	empty := !it.First()
	if err := it.Close(); err != nil {
		return err
	}
	if !empty {
		return fmt.Errorf("%w: the index has records but no format record (format version 0, written before formats were versioned), this build reads version %d", ErrFormatVersion, FormatVersion)
	}
	if ix.readOnly {
		return nil
	}
	b := ix.db.NewBatch()
	defer b.Close()
	if err := b.Set(formatKey, encodeFormat(FormatVersion), nil); err != nil {
		return err
	}
	return ix.commit(b)
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
		return Location{}, false, fmt.Errorf("index: get %s: %w", keyspec.Show(key), err)
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

// Buckets returns every committed bucket, in ascending id order.
func (ix *Index) Buckets() ([]BucketMeta, error) {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	if err := ix.usable(); err != nil {
		return nil, fmt.Errorf("index: buckets: %w", err)
	}
	out, err := ix.buckets()
	if err != nil {
		return nil, fmt.Errorf("index: buckets: %w", err)
	}
	return out, nil
}

// Bucket returns the record of bucket id; found is false when there is none.
func (ix *Index) Bucket(id uint64) (meta BucketMeta, found bool, err error) {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	if err := ix.usable(); err != nil {
		return BucketMeta{}, false, fmt.Errorf("index: bucket %d: %w", id, err)
	}
	meta, found, err = ix.bucket(id)
	if err != nil {
		return BucketMeta{}, false, fmt.Errorf("index: bucket %d: %w", id, err)
	}
	return meta, found, nil
}

// bucket reads the record of bucket id. The caller holds mu.
func (ix *Index) bucket(id uint64) (BucketMeta, bool, error) {
	v, closer, err := ix.db.Get(bucketKey(id))
	if errors.Is(err, pebble.ErrNotFound) {
		return BucketMeta{}, false, nil
	}
	if err != nil {
		return BucketMeta{}, false, err
	}
	defer closer.Close()
	m, err := decodeBucket(id, v)
	return m, err == nil, err
}

// buckets reads every bucket record. The caller holds mu.
func (ix *Index) buckets() ([]BucketMeta, error) {
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
	return out, err
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
	buf := make([]KeyLoc, 0, keysChunk)
	for {
		batch, err := ix.keysChunk(lower, upper, buf)
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
		last := batch[len(batch)-1].Key
		lower = append(append(append(lower[:0], prefixObject), last...), 0)
	}
}

// keysChunk reads up to keysChunk object records from lower on into out
// (reset), their keys copied into one new arena per chunk (not one
// allocation per key: fn owns each key, so the arena is never reused).
func (ix *Index) keysChunk(lower, upper []byte, out []KeyLoc) ([]KeyLoc, error) {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	out = out[:0]
	if err := ix.usable(); err != nil {
		return nil, err
	}
	var arena []byte
	err := ix.scanRange(lower, upper, func(k, v []byte) error {
		k = k[1:]
		if len(arena)+len(k) > cap(arena) {
			arena = make([]byte, 0, max(keysArena, len(k)))
		}
		start := len(arena)
		arena = append(arena, k...)
		key := arena[start:len(arena):len(arena)]
		loc, err := decodeObject(key, v)
		if err != nil {
			return err
		}
		out = append(out, KeyLoc{Key: key, Loc: loc})
		if len(out) == keysChunk {
			return errStopKeys
		}
		return nil
	})
	if err != nil && err != errStopKeys {
		return nil, err
	}
	return out, nil
}

// keysArena is the size of the arenas Keys copies keys into.
const keysArena = 64 << 10

var errStopKeys = errors.New("stop")

// NextBucketID returns the smallest bucket id greater than every committed
// one (1 for an empty index). The engine allocates bucket ids from it.
func (ix *Index) NextBucketID() uint64 { return ix.next.Load() }

// Count returns the number of objects in the index.
func (ix *Index) Count() int64 { return ix.count.Load() }

// Close flushes and closes the pebble database. It waits for operations in
// progress.
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
	// Flush the memtable, so that the next Open has no WAL to replay and
	// flush (a few hundred ms on a slow disk): a clean restart opens fast.
	// A failed index (ErrFailed) is not flushed: its memory may hold the
	// failed batch.
	var ferr error
	if !ix.readOnly && ix.failed.Load() == nil {
		ferr = ix.db.Flush()
	}
	if err := errors.Join(ferr, ix.db.Close()); err != nil {
		return fmt.Errorf("index: close: %w", err)
	}
	return nil
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
