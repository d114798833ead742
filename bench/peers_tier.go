package main

import (
	"context"
	"fmt"
	"path/filepath"

	"github.com/tierstore/tierstore/backend/uring"
	"github.com/tierstore/tierstore/tier"
)

func init() {
	peerStores = append([]storeKind{{"tier", openTierStore}}, peerStores...)
}

// tierStore is the tier engine on the io_uring O_DIRECT backend: one Offload
// call per batch writes one bucket, fdatasyncs it and commits the index in
// one synced pebble batch.
type tierStore struct{ eng *tier.Engine }

func openTierStore(dir string, _ int64) (kvStore, error) {
	log := quietLogger()
	be, err := uring.Open(filepath.Join(dir, "buckets"), uring.Options{Direct: true, Logger: log})
	if err != nil {
		return nil, err
	}
	eng, err := tier.Open(dir, tier.Options{Backend: be, Logger: log})
	if err != nil {
		be.Close()
		return nil, err
	}
	return &tierStore{eng}, nil
}

func (s *tierStore) putBatch(ctx context.Context, keys, vals [][]byte) error {
	tasks := make([]tier.Task, len(keys))
	for i := range keys {
		tasks[i] = tier.Task{Key: keys[i], Value: vals[i]}
	}
	for _, o := range s.eng.Offload(ctx, tasks, func(context.Context, []tier.Committed) error { return nil }) {
		if o.Status != tier.Persisted {
			return fmt.Errorf("tier offload %s: %s: %w", o.Key, o.Status, o.Err)
		}
	}
	return nil
}

func (s *tierStore) get(ctx context.Context, key []byte) ([]byte, error) {
	r := s.eng.Load(ctx, [][]byte{key})[0]
	if r.Err != nil {
		return nil, fmt.Errorf("tier load: %w", r.Err)
	}
	return r.Value, nil
}

func (s *tierStore) close() error { return s.eng.Close() }
