package tier

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"

	"github.com/tierstore/tierstore/backend"
	"github.com/tierstore/tierstore/backend/pwrite"
	"github.com/tierstore/tierstore/bucket"
	"github.com/tierstore/tierstore/eviction"
	"github.com/tierstore/tierstore/index"
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
