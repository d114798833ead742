package tier

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tierstore/tierstore/backend"
	"github.com/tierstore/tierstore/backend/pwrite"
	"github.com/tierstore/tierstore/bucket"
	"github.com/tierstore/tierstore/eviction"
	"github.com/tierstore/tierstore/index"
)

// offloadPipeline is how many buckets of one Offload call are in flight at
// once (encoding, writing, committing, notifying).
const offloadPipeline = 2

// Engine is the node-local SSD tier. See the package documentation for its
// invariants and concurrency contract.
type Engine struct {
	dir   string
	opts  Options
	be    backend.Backend
	ix    *index.Index
	lim   bucket.Limits
	codec bucket.Codec
	log   *slog.Logger

	// life guards closed and the Add side of ops: calls take it shared to
	// register themselves, Close takes it exclusively to stop new calls.
	life   sync.RWMutex
	closed bool
	// ops counts calls in progress so that Close can wait for them.
	ops sync.WaitGroup

	// mu protects every field below it, and serialises the duplicate check
	// with the index commit (invariant 2: no TOCTOU window between them).
	mu       sync.Mutex
	buckets  map[uint64]*bucketState // every bucket file the engine knows
	policy   eviction.Policy         // committed, notified, evictable buckets
	used     int64                   // bytes of bucket files present
	reserved int64                   // bytes reserved by bucket writes in progress
	nextID   uint64                  // next bucket id to hand out
	// pending holds keys committed to the index whose notify has not
	// returned yet. A concurrent offload of such a key waits for the outcome
	// instead of answering "already present" for a key that may be rolled
	// back.
	pending map[string]*pendingBucket

	st counters

	// testHookPendingWait, when set by a test, runs each time an Offload
	// starts waiting for another call's pending notify.
	testHookPendingWait func()
}

// bucketState is the engine's view of one bucket file. Its plain fields are
// guarded by Engine.mu. readers, dead and deleted are atomic so that a Load
// can drop its reference without the engine lock: readers is only increased
// under Engine.mu after checking dead, dead only becomes true under
// Engine.mu, and whoever sees "dead and no readers" first (CAS on deleted)
// deletes the file.
type bucketState struct {
	id       uint64
	size     int64
	live     int  // index entries pointing at this bucket
	notified bool // notify succeeded (the bucket is evictable)
	evicting bool // chosen as an eviction victim
	// drained is closed when the bucket is dead and its file deleted; it
	// is made (under Engine.mu) before dead is set.
	drained chan struct{}

	readers atomic.Int32 // Loads reading the file now
	dead    atomic.Bool  // gone from the index; the file goes when readers reach 0
	deleted atomic.Bool  // the file deletion has been started
}

type pendingBucket struct {
	done chan struct{}
}

type counters struct {
	bucketsWritten, bytesWritten           atomic.Int64
	objectsLoaded, bytesRead               atomic.Int64
	evictions, evictedKeys, checksumErrors atomic.Int64
	notifyFailures, orphans, dropped       atomic.Int64
}

// Open opens (creating if needed) the tier in dir, an absolute path, and
// reconciles the index with the bucket files (invariant 6): bucket files the
// index does not know are deleted, and index entries whose bucket file is
// missing or fails validation are dropped. Stats reports what was repaired.
func Open(dir string, opts Options) (*Engine, error) {
	if dir == "" || !filepath.IsAbs(dir) {
		return nil, fmt.Errorf("%w: directory %q must be an absolute path", ErrBadOptions, dir)
	}
	o, lim, codec, err := normalize(opts)
	if err != nil {
		return nil, err
	}
	policy, err := eviction.New(o.Eviction)
	if err != nil {
		return nil, fmt.Errorf("%w: Eviction: %v", ErrBadOptions, err)
	}
	be := o.Backend
	if be == nil {
		be, err = pwrite.Open(filepath.Join(dir, "buckets"), pwrite.Options{Logger: o.Logger})
		if err != nil {
			return nil, fmt.Errorf("tier: open bucket directory: %w", err)
		}
	}
	ix, err := index.Open(filepath.Join(dir, "index"), index.Options{FS: o.IndexFS, CacheSize: o.IndexCacheSize, Logger: o.Logger})
	if err != nil {
		if o.Backend == nil {
			be.Close()
		}
		return nil, fmt.Errorf("tier: open index: %w", err)
	}
	e := &Engine{
		dir: dir, opts: o, be: be, ix: ix, lim: lim, codec: codec, log: o.Logger,
		buckets: map[uint64]*bucketState{}, policy: policy, pending: map[string]*pendingBucket{},
	}
	if err := e.reconcile(); err != nil {
		ix.Close()
		be.Close()
		return nil, fmt.Errorf("tier: reconcile: %w", err)
	}
	return e, nil
}

func normalize(o Options) (Options, bucket.Limits, bucket.Codec, error) {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", ErrBadOptions, fmt.Sprintf(format, args...))
	}
	if o.Capacity < 0 {
		return o, bucket.Limits{}, 0, bad("Capacity %d is negative", o.Capacity)
	}
	if o.HighWatermark == 0 {
		o.HighWatermark = 0.90
	}
	if o.LowWatermark == 0 {
		o.LowWatermark = 0.80
	}
	if !(o.HighWatermark > 0 && o.HighWatermark <= 1) {
		return o, bucket.Limits{}, 0, bad("HighWatermark %v must be in (0, 1]", o.HighWatermark)
	}
	if !(o.LowWatermark > 0 && o.LowWatermark < o.HighWatermark) {
		return o, bucket.Limits{}, 0, bad("LowWatermark %v must be in (0, HighWatermark %v)", o.LowWatermark, o.HighWatermark)
	}
	if o.Eviction == "" {
		o.Eviction = "lru"
	}
	codec, err := bucket.ParseCodec(o.Compression)
	if err != nil {
		return o, bucket.Limits{}, 0, bad("Compression: %v", err)
	}
	if o.BucketKeysLimit == 0 {
		o.BucketKeysLimit = bucket.DefaultMaxKeys
	}
	if o.BucketBytesLimit == 0 {
		o.BucketBytesLimit = bucket.DefaultMaxBytes
		if o.Capacity > 0 {
			// Small tiers get buckets of a tenth of the capacity so that
			// eviction between the watermarks stays fine-grained.
			o.BucketBytesLimit = max(min(o.BucketBytesLimit, o.Capacity/10&^(bucket.Align-1)), bucket.Size(1, 1, 0))
		}
	}
	lim := bucket.Limits{MaxKeys: o.BucketKeysLimit, MaxBytes: o.BucketBytesLimit}
	if err := lim.Validate(); err != nil {
		return o, lim, 0, bad("BucketKeysLimit/BucketBytesLimit: %v", err)
	}
	if o.Capacity > 0 && o.BucketBytesLimit > o.Capacity {
		return o, lim, 0, bad("BucketBytesLimit %d exceeds Capacity %d", o.BucketBytesLimit, o.Capacity)
	}
	if o.IndexCacheSize == 0 {
		o.IndexCacheSize = 8 << 20
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return o, lim, codec, nil
}

// reconcile brings the index and the bucket files into agreement at Open.
func (e *Engine) reconcile() error {
	files, err := e.be.List()
	if err != nil {
		return err
	}
	sizes := make(map[uint64]int64, len(files))
	var maxFile uint64
	for _, f := range files {
		sizes[f.ID] = f.Size
		maxFile = max(maxFile, f.ID)
	}
	metas, err := e.ix.Buckets()
	if err != nil {
		return err
	}
	known := make(map[uint64]bool, len(metas))
	for _, m := range metas {
		known[m.ID] = true
		size, present := sizes[m.ID]
		reason := ""
		live := 0
		switch {
		case !present:
			reason = "bucket file missing"
		case size != m.Size:
			reason = fmt.Sprintf("bucket file has %d bytes, index says %d", size, m.Size)
		default:
			if err := e.validateBucket(m.ID, size); err != nil {
				reason = err.Error()
			} else if live, err = e.ix.BucketLiveKeys(m.ID); err != nil {
				return err
			} else if live == 0 {
				reason = "no live objects"
			}
		}
		if reason == "" {
			e.buckets[m.ID] = &bucketState{id: m.ID, size: size, live: live, notified: true}
			e.used += size
			e.policy.Add(m.ID, size)
			continue
		}
		removed, err := e.ix.DeleteBucket(m.ID)
		if err != nil {
			return err
		}
		if live == 0 && reason == "no live objects" {
			e.log.Info("tier: removing empty bucket at open", "bucket", m.ID)
		} else {
			e.st.dropped.Add(int64(len(removed)))
			e.log.Warn("tier: dropping bucket at open", "bucket", m.ID, "reason", reason, "entries", len(removed))
		}
		if present {
			if err := e.be.Delete(m.ID); err != nil && !errors.Is(err, backend.ErrNotFound) {
				return err
			}
		}
	}
	for _, f := range files {
		if known[f.ID] {
			continue
		}
		// Written but never committed (crash before the index commit), or
		// rolled back without its file being removed: an orphan.
		if err := e.be.Delete(f.ID); err != nil && !errors.Is(err, backend.ErrNotFound) {
			return err
		}
		e.st.orphans.Add(1)
		e.log.Info("tier: removed orphan bucket file", "bucket", f.ID, "bytes", f.Size)
	}
	e.nextID = max(e.ix.NextBucketID(), maxFile+1, 1)
	return nil
}

// validateBucket reads the footer and trailer of bucket id and checks that
// every index entry of the bucket matches a trailer entry.
func (e *Engine) validateBucket(id uint64, size int64) error {
	ctx := context.Background()
	ops := []backend.ReadOp{{Off: size - bucket.FooterSize, Len: bucket.FooterSize}}
	if err := e.be.Read(ctx, id, ops); err != nil {
		return err
	}
	if ops[0].Err != nil {
		return ops[0].Err
	}
	f, err := bucket.DecodeFooter(ops[0].Data, size)
	if err != nil {
		return err
	}
	if f.ID != id {
		return fmt.Errorf("footer names bucket %d", f.ID)
	}
	ops = []backend.ReadOp{{Off: f.TrailerOff, Len: int(f.TrailerLen)}}
	if err := e.be.Read(ctx, id, ops); err != nil {
		return err
	}
	if ops[0].Err != nil {
		return ops[0].Err
	}
	entries, err := bucket.DecodeTrailer(ops[0].Data, f)
	if err != nil {
		return err
	}
	byKey := make(map[string]bucket.Entry, len(entries))
	for _, en := range entries {
		byKey[string(en.Key)] = en
	}
	keys, err := e.ix.BucketKeys(id)
	if err != nil {
		return err
	}
	for _, k := range keys {
		loc, ok, err := e.ix.Get(k)
		if err != nil {
			return err
		}
		if !ok || loc.Bucket != id {
			continue
		}
		en, ok := byKey[string(k)]
		if !ok || en.Offset != loc.Offset || en.CRC != loc.CRC || en.StoredLen != loc.StoredLen || en.ValueLen != loc.ValueLen {
			return fmt.Errorf("index entry %q disagrees with the bucket trailer", k)
		}
	}
	return nil
}

func (e *Engine) begin() error {
	e.life.RLock()
	defer e.life.RUnlock()
	if e.closed {
		return ErrClosed
	}
	e.ops.Add(1)
	return nil
}

func validKey(k []byte) error {
	if len(k) == 0 {
		return fmt.Errorf("%w: empty key", ErrInvalidKey)
	}
	if len(k) > MaxKeyLen {
		return fmt.Errorf("%w: key of %d bytes exceeds %d", ErrInvalidKey, len(k), MaxKeyLen)
	}
	return nil
}

func fail(err error, retryable bool) Outcome {
	return Outcome{Status: Failed, Err: err, Retryable: retryable}
}

// Offload writes tasks to SSD and returns one outcome per task, in order
// (invariant 3). Every bucket, including the partial last one, is written
// before Offload returns. notify is called once per bucket with exactly the
// keys that bucket committed (invariant 1); a nil notify accepts everything.
func (e *Engine) Offload(ctx context.Context, tasks []Task, notify NotifyFunc) []Outcome {
	out := make([]Outcome, len(tasks))
	if err := e.begin(); err != nil {
		for i := range out {
			out[i] = fail(err, true)
		}
		return fillKeys(out, tasks)
	}
	defer e.ops.Done()

	// Validate, and answer keys that are already on SSD without writing them.
	cand := make([]int, 0, len(tasks))
	for i, t := range tasks {
		if err := validKey(t.Key); err != nil {
			out[i] = fail(err, false)
			continue
		}
		cand = append(cand, i)
	}
	e.mu.Lock()
	kept := cand[:0]
	for _, i := range cand {
		if _, pending := e.pending[string(tasks[i].Key)]; !pending {
			loc, ok, err := e.ix.Get(tasks[i].Key)
			if err == nil && ok && sameObject(loc, tasks[i].Value) {
				out[i] = Outcome{Status: AlreadyPresent}
				continue
			}
		}
		kept = append(kept, i)
	}
	cand = kept
	e.mu.Unlock()

	items := make([]bucket.Item, len(cand))
	for j, i := range cand {
		items[j] = bucket.Item{Key: tasks[i].Key, Size: int64(len(tasks[i].Value))}
	}
	g, err := bucket.Group(items, e.lim)
	if err != nil { // limits were validated at Open
		for _, i := range cand {
			out[i] = fail(err, false)
		}
		return fillKeys(out, tasks)
	}
	for _, j := range g.TooLarge {
		out[cand[j]] = fail(fmt.Errorf("%w: %d bytes, bucket size limit %d", ErrTooLarge, len(tasks[cand[j]].Value), e.lim.MaxBytes), false)
	}
	// Buckets are pipelined: while one is being committed and announced (or
	// checksummed), the next one is being written. Each goroutine writes
	// only the outcomes of its own tasks.
	sem := make(chan struct{}, offloadPipeline)
	var wg sync.WaitGroup
	for _, b := range g.Buckets {
		idx := make([]int, len(b))
		for k, j := range b {
			idx[k] = cand[j]
		}
		sem <- struct{}{}
		if err := ctx.Err(); err != nil {
			<-sem
			for _, i := range idx {
				out[i] = fail(err, true)
			}
			continue
		}
		wg.Go(func() {
			defer func() { <-sem }()
			e.offloadBucket(ctx, tasks, idx, notify, out)
		})
	}
	wg.Wait()
	for dup, first := range g.Folded {
		o := out[cand[first]]
		if o.Status == Persisted {
			o.Status = AlreadyPresent
		}
		out[cand[dup]] = o
	}
	return fillKeys(out, tasks)
}

func fillKeys(out []Outcome, tasks []Task) []Outcome {
	for i := range out {
		out[i].Key = tasks[i].Key
	}
	return out
}

// offloadBucket writes tasks[idx] as one bucket and records their outcomes.
func (e *Engine) offloadBucket(ctx context.Context, tasks []Task, idx []int, notify NotifyFunc, out []Outcome) {
	failAll := func(err error, retryable bool) {
		for _, i := range idx {
			out[i] = fail(err, retryable)
		}
	}
	e.mu.Lock()
	id := e.nextID
	e.nextID++
	e.mu.Unlock()

	objs := make([]bucket.Object, len(idx))
	for k, i := range idx {
		objs[k] = bucket.Object{Key: tasks[i].Key, Value: tasks[i].Value}
	}
	created := time.Now().UnixNano()
	enc, err := bucket.Encode(objs, bucket.EncodeOptions{ID: id, Created: created, Compression: e.codec})
	if err != nil {
		failAll(err, false)
		return
	}
	if err := e.reserve(ctx, enc.Size); err != nil {
		failAll(err, !errors.Is(err, ErrTooLarge))
		return
	}
	if err := e.be.WriteBucket(ctx, id, enc.Data); err != nil {
		e.unreserve(enc.Size)
		if errors.Is(err, backend.ErrNoSpace) {
			err = fmt.Errorf("%w: %w", ErrNoSpace, err)
		}
		failAll(fmt.Errorf("tier: write bucket %d: %w", id, err), true)
		return
	}
	e.st.bucketsWritten.Add(1)
	e.st.bytesWritten.Add(enc.Size)

	// Under the engine lock: the duplicate check and the index commit.
	var commit []int // positions in idx
	type staleEntry struct {
		key    []byte
		bucket uint64
	}
	var stale []staleEntry // committed keys that replace other bytes
	var staleFiles []*bucketState
	pb := &pendingBucket{done: make(chan struct{})}
	for {
		e.mu.Lock()
		var wait []chan struct{}
		commit = commit[:0]
		stale = stale[:0]
		// One batched lookup (bloom filters on every level) for the keys
		// whose fate is not waiting on another call's notify.
		var check [][]byte
		for _, i := range idx {
			if _, ok := e.pending[string(tasks[i].Key)]; !ok {
				check = append(check, tasks[i].Key)
			}
		}
		locs, found, ixErr := e.ix.GetMany(check)
		for k, i := range idx {
			if ixErr != nil {
				break
			}
			key := tasks[i].Key
			if p, ok := e.pending[string(key)]; ok {
				wait = append(wait, p.done)
				continue
			}
			loc, ok := locs[0], found[0]
			locs, found = locs[1:], found[1:]
			if ok {
				en := enc.Entries[k]
				if loc.CRC == en.CRC && loc.ValueLen == en.ValueLen {
					out[i] = Outcome{Status: AlreadyPresent}
					continue
				}
				// Other bytes under this key (the object was removed and
				// put again): the new version replaces the stale one.
				stale = append(stale, staleEntry{key, loc.Bucket})
			}
			commit = append(commit, k)
		}
		if ixErr != nil {
			e.mu.Unlock()
			e.discardWritten(id, enc.Size)
			failAll(fmt.Errorf("tier: index lookup: %w", ixErr), true)
			return
		}
		if len(wait) > 0 {
			// Another call committed some of these keys and has not heard
			// from its notify yet: wait for its outcome, then decide again.
			e.mu.Unlock()
			if e.testHookPendingWait != nil {
				e.testHookPendingWait()
			}
			for _, w := range wait {
				select {
				case <-w:
				case <-ctx.Done():
					e.discardWritten(id, enc.Size)
					failAll(ctx.Err(), true)
					return
				}
			}
			continue
		}
		if len(commit) == 0 {
			e.mu.Unlock()
			e.discardWritten(id, enc.Size)
			return
		}
		entries := make([]index.KeyLoc, len(commit))
		for n, k := range commit {
			en := enc.Entries[k]
			entries[n] = index.KeyLoc{Key: en.Key, Loc: index.Location{
				Bucket: id, Offset: en.Offset, StoredLen: en.StoredLen,
				ValueLen: en.ValueLen, Codec: uint8(en.Codec), CRC: en.CRC,
			}}
		}
		if len(stale) > 0 {
			keys := make([][]byte, len(stale))
			for n, st := range stale {
				keys[n] = st.key
			}
			if err := e.ix.DeleteKeys(keys); err != nil {
				e.mu.Unlock()
				e.discardWritten(id, enc.Size)
				failAll(fmt.Errorf("tier: index: replacing stale versions: %w", err), true)
				return
			}
			for _, st := range stale {
				if d := e.decLive(st.bucket); d != nil {
					staleFiles = append(staleFiles, d)
				}
			}
		}
		meta := index.BucketMeta{ID: id, Size: enc.Size, Keys: len(entries), Created: created}
		if err := e.ix.CommitBucket(meta, entries); err != nil {
			e.mu.Unlock()
			e.discardWritten(id, enc.Size)
			failAll(fmt.Errorf("tier: index commit of bucket %d: %w", id, err), true)
			return
		}
		e.reserved -= enc.Size
		e.used += enc.Size
		e.buckets[id] = &bucketState{id: id, size: enc.Size, live: len(entries)}
		for _, en := range entries {
			e.pending[string(en.Key)] = pb
		}
		e.mu.Unlock()
		break
	}
	for _, d := range staleFiles {
		e.deleteFile(d)
	}

	committed := make([]Committed, len(commit))
	for n, k := range commit {
		en := enc.Entries[k]
		committed[n] = Committed{Key: en.Key, Size: int64(en.ValueLen), CRC: en.CRC, Bucket: id}
	}
	var nerr error
	if notify != nil {
		nerr = notify(ctx, committed)
	}

	e.mu.Lock()
	for _, c := range committed {
		delete(e.pending, string(c.Key))
	}
	b := e.buckets[id]
	var toDelete *bucketState
	if nerr == nil {
		b.notified = true
		if !b.dead.Load() {
			e.policy.Add(id, b.size)
		}
	} else {
		e.st.notifyFailures.Add(1)
		// Roll back: the master never heard of these keys, so the node must
		// not keep them (invariant 1).
		if _, err := e.ix.DeleteBucket(id); err != nil {
			// The entries stay and the bucket stays servable; the keys are
			// on disk, so a retry answers "already present", which is true.
			e.log.Error("tier: rollback after notify failure failed; keeping bucket", "bucket", id, "err", err)
			b.notified = true
			e.policy.Add(id, b.size)
		} else if !b.dead.Load() {
			toDelete = e.markDead(b)
		}
	}
	close(pb.done)
	e.mu.Unlock()
	e.deleteFile(toDelete)

	for _, k := range commit {
		if nerr == nil {
			out[idx[k]] = Outcome{Status: Persisted}
		} else {
			out[idx[k]] = fail(fmt.Errorf("%w: %w", ErrNotifyFailed, nerr), true)
		}
	}
}

// sameObject reports whether the object at loc holds exactly value (same
// length and CRC32C), so that offloading value again is a no-op.
func sameObject(loc index.Location, value []byte) bool {
	return int64(loc.ValueLen) == int64(len(value)) && loc.CRC == bucket.Checksum(value)
}

// discardWritten deletes a bucket file that was written but not committed
// and releases its reservation. A file that cannot be deleted is an orphan
// that the next Open removes.
func (e *Engine) discardWritten(id uint64, size int64) {
	if err := e.be.Delete(id); err != nil {
		e.log.Warn("tier: could not delete uncommitted bucket; the next Open removes it", "bucket", id, "err", err)
	}
	e.unreserve(size)
}

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

// Exists reports whether key is on this node's SSD.
func (e *Engine) Exists(key []byte) (bool, error) {
	if err := validKey(key); err != nil {
		return false, err
	}
	if err := e.begin(); err != nil {
		return false, err
	}
	defer e.ops.Done()
	_, ok, err := e.ix.Get(key)
	return ok, err
}

// Stat returns what the index records of key (size, CRC32C, bucket) without
// reading the object. ErrNotFound when absent.
func (e *Engine) Stat(key []byte) (KeyInfo, error) {
	if err := validKey(key); err != nil {
		return KeyInfo{}, err
	}
	if err := e.begin(); err != nil {
		return KeyInfo{}, err
	}
	defer e.ops.Done()
	loc, ok, err := e.ix.Get(key)
	if err != nil {
		return KeyInfo{}, err
	}
	if !ok {
		return KeyInfo{}, fmt.Errorf("%w: %q", ErrNotFound, key)
	}
	return KeyInfo{Size: int64(loc.ValueLen), CRC: loc.CRC, Bucket: loc.Bucket}, nil
}

// Remove deletes key from the tier. The bucket file goes when its last key
// goes (after its readers finish). ErrNotFound when absent.
func (e *Engine) Remove(key []byte) error {
	if err := validKey(key); err != nil {
		return err
	}
	if err := e.begin(); err != nil {
		return err
	}
	defer e.ops.Done()
	e.mu.Lock()
	loc, ok, err := e.ix.Get(key)
	if err != nil || !ok {
		e.mu.Unlock()
		if err != nil {
			return err
		}
		return fmt.Errorf("%w: %q", ErrNotFound, key)
	}
	if err := e.ix.DeleteKeys([][]byte{key}); err != nil {
		e.mu.Unlock()
		return err
	}
	del := e.decLive(loc.Bucket)
	e.mu.Unlock()
	e.deleteFile(del)
	return nil
}

// Keys calls fn for every object on SSD whose announcement is not in flight,
// in key order, until fn returns false. A node uses it to re-register its
// objects with the master.
func (e *Engine) Keys(fn func(key []byte, info KeyInfo) bool) error {
	if err := e.begin(); err != nil {
		return err
	}
	defer e.ops.Done()
	return e.ix.Keys(func(k []byte, loc index.Location) bool {
		e.mu.Lock()
		_, pending := e.pending[string(k)]
		e.mu.Unlock()
		if pending {
			return true
		}
		return fn(k, KeyInfo{Size: int64(loc.ValueLen), CRC: loc.CRC, Bucket: loc.Bucket})
	})
}

// Stats returns a snapshot of the engine's counters.
func (e *Engine) Stats() Stats {
	e.mu.Lock()
	s := Stats{
		Buckets:   int64(len(e.buckets)),
		BytesUsed: e.used,
		Capacity:  e.opts.Capacity,
	}
	e.mu.Unlock()
	s.Objects = e.ix.Count()
	s.BucketsWritten = e.st.bucketsWritten.Load()
	s.BytesWritten = e.st.bytesWritten.Load()
	s.ObjectsLoaded = e.st.objectsLoaded.Load()
	s.BytesRead = e.st.bytesRead.Load()
	s.Evictions = e.st.evictions.Load()
	s.EvictedKeys = e.st.evictedKeys.Load()
	s.ChecksumErrors = e.st.checksumErrors.Load()
	s.NotifyFailures = e.st.notifyFailures.Load()
	s.OrphanFilesRemoved = e.st.orphans.Load()
	s.EntriesDropped = e.st.dropped.Load()
	return s
}

// Backend returns the engine's backend (for its name and metrics).
func (e *Engine) Backend() backend.Backend { return e.be }

// Close waits for calls in progress, then closes the index and the backend
// (the engine owns both, including a Backend passed in Options).
func (e *Engine) Close() error {
	e.life.Lock()
	if e.closed {
		e.life.Unlock()
		return ErrClosed
	}
	e.closed = true
	e.life.Unlock()
	e.ops.Wait()
	return errors.Join(e.ix.Close(), e.be.Close())
}
