package tier

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"time"

	"github.com/tierstore/tierstore/backend"
	"github.com/tierstore/tierstore/backend/pwrite"
	"github.com/tierstore/tierstore/bucket"
	"github.com/tierstore/tierstore/eviction"
	"github.com/tierstore/tierstore/index"
	"github.com/tierstore/tierstore/internal/crc32c"
)

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
	t0 := time.Now()
	ix, err := index.Open(filepath.Join(dir, "index"), index.Options{FS: o.IndexFS, CacheSize: o.IndexCacheSize, Logger: o.Logger})
	if err != nil {
		if o.Backend == nil {
			be.Close()
		}
		return nil, fmt.Errorf("tier: open index: %w", err)
	}
	e := &Engine{
		dir: dir, opts: o, be: be, ix: ix, lim: lim, codec: codec, log: o.Logger,
		buckets: map[uint64]*bucketState{}, dying: map[uint64]*bucketState{}, policy: policy, pending: map[string]*pendingBucket{},
	}
	e.indexOpenTime = time.Since(t0)
	if err := e.reconcile(); err != nil {
		ix.Close()
		be.Close()
		return nil, fmt.Errorf("tier: reconcile: %w", err)
	}
	e.openTime = time.Since(t0)
	e.log.Info("tier: opened", "dir", dir, "objects", ix.Count(), "buckets", len(e.buckets),
		"took", e.openTime, "index", e.indexOpenTime)
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

// validateBatch is how many buckets' trailers Open reads per backend Read.
const validateBatch = 256

// reconcile brings the index and the bucket files into agreement at Open
// (invariant 6), with work per bucket, not per object: the index's bucket
// records carry each bucket's size, live count and trailer checksum, so a
// bucket is checked with one read of its trailer and footer. A bucket whose
// file is missing, has another size, or whose trailer or footer disagrees
// with its record loses its index entries; a file the index does not know
// is an orphan and is deleted.
//
// Only the buckets the session record (index.Session, format 3) does not
// cover are read: none after a clean close, those the crashed session
// wrote after a crash. Every bucket is still checked against the directory
// listing (present, of the recorded size), and every value against its
// CRC32C when it is loaded (invariant 5).
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
	if err := e.completeEvictions(); err != nil {
		return err
	}
	metas, err := e.ix.Buckets()
	if err != nil {
		return err
	}
	// Buckets below the session record's mark were proven by an earlier
	// Open or are covered by a clean close: they are not read.
	sess, _, err := e.ix.Session()
	if err != nil {
		return err
	}
	e.lastSession = sess
	known := make(map[uint64]bool, len(metas))
	var check []index.BucketMeta
	for _, m := range metas {
		known[m.ID] = true
		size, present := sizes[m.ID]
		switch {
		case !present:
			err = e.dropBucket(m.ID, false, "bucket file missing")
		case size != m.Size:
			err = e.dropBucket(m.ID, true, fmt.Sprintf("bucket file has %d bytes, index says %d", size, m.Size))
		case m.Live == 0:
			err = e.dropBucket(m.ID, true, "")
		case m.ID < sess.ProvenBelow:
			err = e.admit(m, m.Written, "")
		default:
			check = append(check, m)
		}
		if err != nil {
			return err
		}
	}
	for len(check) > 0 {
		n := min(len(check), validateBatch)
		if err := e.validateBuckets(check[:n]); err != nil {
			return err
		}
		check = check[n:]
	}
	if err := e.removeOrphans(files, known); err != nil {
		return err
	}
	e.nextID = max(e.ix.NextBucketID(), maxFile+1, 1)
	// Every bucket below nextID is now proven (or gone); the buckets this
	// session writes are above it, and the record is synced before the
	// first of them, so a crash leaves only those to read at the next Open.
	return e.ix.SetSession(index.Session{ProvenBelow: e.nextID})
}

// completeEvictions ends the evictions a crash interrupted: a bucket
// still marked evicting (index.MarkEvicting) may have been given up by
// its owner (OnEvict answered, the master dropped its replicas) before
// the process died, so its keys must not come back (docs/design.md,
// invariant 10): the bucket leaves the index (its file is then an orphan)
// with every key it held, those the owner might have kept included.
func (e *Engine) completeEvictions() error {
	ids, err := e.ix.Evicting()
	if err != nil {
		return err
	}
	for _, id := range ids {
		removed, err := e.ix.DeleteBucket(id)
		if err == nil {
			err = e.ix.UnmarkEvicting(id) // a bucket already gone leaves the record alone
		}
		if err != nil {
			return fmt.Errorf("completing the eviction of bucket %d: %w", id, err)
		}
		e.st.evictions.Add(1)
		e.st.evictedKeys.Add(int64(len(removed)))
		e.log.Warn("tier: completed an eviction a crash interrupted", "bucket", id, "keys", len(removed))
	}
	return nil
}

// dropBucket removes bucket id from the index and, when present, its file.
// reason "" is a bucket without live objects (not a repair).
func (e *Engine) dropBucket(id uint64, present bool, reason string) error {
	removed, err := e.ix.DeleteBucket(id)
	if err != nil {
		return err
	}
	if reason == "" {
		e.log.Info("tier: removing empty bucket at open", "bucket", id)
	} else {
		e.st.dropped.Add(int64(len(removed)))
		e.log.Warn("tier: dropping bucket at open", "bucket", id, "reason", reason, "entries", len(removed))
	}
	if present {
		if err := e.be.Delete(id); err != nil && !errors.Is(err, backend.ErrNotFound) {
			return err
		}
	}
	return nil
}

// removeOrphans deletes the bucket files the index does not know: written
// but never committed (a crash before the index commit), rolled back or
// evicted without their file being removed.
func (e *Engine) removeOrphans(files []backend.FileInfo, known map[uint64]bool) error {
	for _, f := range files {
		if known[f.ID] {
			continue
		}
		if err := e.be.Delete(f.ID); err != nil && !errors.Is(err, backend.ErrNotFound) {
			return err
		}
		e.st.orphans.Add(1)
		e.log.Info("tier: removed orphan bucket file", "bucket", f.ID, "bytes", f.Size)
	}
	return nil
}

// validateBuckets checks the files of metas, all present with the recorded
// size, with one backend Read: for each, the range from its trailer to the
// end of the file (trailer and footer). The footer must name the bucket and
// its trailer as the record does, and the trailer must match its CRC32C,
// which the record holds too: the file is then the one committed. Valid
// buckets join the engine's table; the others are dropped.
func (e *Engine) validateBuckets(metas []index.BucketMeta) error {
	ops := make([]backend.ReadOp, 0, len(metas))
	var withOps []index.BucketMeta
	for _, m := range metas {
		n := int(m.Size - m.TrailerOff)
		if m.TrailerOff <= 0 || n < bucket.FooterSize || int64(n) < m.TrailerLen+bucket.FooterSize {
			if err := e.dropBucket(m.ID, true, fmt.Sprintf("index records a trailer at %d+%d in a file of %d bytes", m.TrailerOff, m.TrailerLen, m.Size)); err != nil {
				return err
			}
			continue
		}
		ops = append(ops, backend.ReadOp{ID: m.ID, Off: m.TrailerOff, Len: n, Buf: backend.AlignedBuffer(n)})
		withOps = append(withOps, m)
	}
	if len(ops) > 0 {
		e.st.openReads.Add(int64(len(ops)))
		if err := e.be.Read(context.Background(), ops); err != nil {
			return err
		}
	}
	for n, m := range withOps {
		reason := ""
		var written int64
		if ops[n].Err != nil {
			reason = ops[n].Err.Error()
		} else {
			reason, written = checkTail(m, ops[n].Data)
		}
		if err := e.admit(m, written, reason); err != nil {
			return err
		}
	}
	return nil
}

// checkTail checks the bytes from a bucket's trailer to the end of its file
// against its index record; it returns why they disagree, or "", and the
// stored bytes of every object the trailer lists (the bucket's written
// bytes: its dead bytes are those the index no longer counts live).
func checkTail(m index.BucketMeta, tail []byte) (reason string, written int64) {
	f, err := bucket.DecodeFooter(tail[len(tail)-bucket.FooterSize:], m.Size)
	switch {
	case err != nil:
		return err.Error(), 0
	case f.ID != m.ID:
		return fmt.Sprintf("footer names bucket %d", f.ID), 0
	case f.TrailerOff != m.TrailerOff || f.TrailerLen != m.TrailerLen || f.TrailerCRC != m.TrailerCRC || int(f.Count) != m.Keys:
		return fmt.Sprintf("footer (trailer %d+%d crc %08x, %d objects) disagrees with the index (trailer %d+%d crc %08x, %d objects)",
			f.TrailerOff, f.TrailerLen, f.TrailerCRC, f.Count, m.TrailerOff, m.TrailerLen, m.TrailerCRC, m.Keys), 0
	case crc32c.Checksum(tail[:f.TrailerLen]) != f.TrailerCRC:
		return "trailer fails its checksum", 0
	}
	entries, err := bucket.DecodeTrailer(tail[:f.TrailerLen], f)
	if err != nil {
		return err.Error(), 0
	}
	for _, en := range entries {
		written += int64(en.StoredLen)
	}
	return "", written
}

// admit adds a validated bucket to the engine's table (reason "") or drops
// it.
func (e *Engine) admit(m index.BucketMeta, written int64, reason string) error {
	if reason != "" {
		return e.dropBucket(m.ID, true, reason)
	}
	b := &bucketState{id: m.ID, size: m.Size, notified: true, written: max(written, m.LiveBytes), live: m.LiveBytes}
	e.buckets[m.ID] = b
	e.track(b)
	e.used += m.Size
	e.policy.Add(m.ID, m.Size)
	return nil
}
