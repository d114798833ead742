package node

import (
	"fmt"
	"log/slog"
	"path/filepath"

	"github.com/tierstore/tierstore/backend"
	"github.com/tierstore/tierstore/backend/pwrite"
	"github.com/tierstore/tierstore/backend/uring"
	"github.com/tierstore/tierstore/tier"
)

// openTier opens the SSD tier engine configured by cfg in cfg.SSDDir: the
// bucket files in SSDDir/buckets through the chosen backend, the index
// beside them. It returns the engine and the backend's name.
func openTier(cfg Config, onEvict tier.EvictFunc, log *slog.Logger) (SSDTier, string, error) {
	bdir := filepath.Join(cfg.SSDDir, "buckets")
	var (
		be  backend.Backend
		err error
	)
	switch cfg.Backend {
	case "uring":
		be, err = uring.Open(bdir, uring.Options{Direct: cfg.DirectIO, Logger: log})
	default:
		be, err = pwrite.Open(bdir, pwrite.Options{Direct: cfg.DirectIO, Logger: log})
	}
	if err != nil {
		return nil, "", fmt.Errorf("node: --backend %s in %s: %w", cfg.Backend, bdir, err)
	}
	eng, err := tier.Open(cfg.SSDDir, tier.Options{
		Backend:          be,
		Capacity:         cfg.SSDCapacity,
		Eviction:         cfg.BucketEviction,
		EvictToFit:       EvictToFit(cfg.BucketEviction),
		Compression:      cfg.Compression,
		BucketKeysLimit:  cfg.BucketKeysLimit,
		BucketBytesLimit: BucketFileLimit(cfg.BucketSizeLimit), // an object of BucketSizeLimit bytes fits
		OnEvict:          onEvict,
		Logger:           log,
	})
	if err != nil {
		be.Close()
		return nil, "", fmt.Errorf("node: opening the SSD tier in --ssd_dir %s: %w", cfg.SSDDir, err)
	}
	return eng, be.Name(), nil
}

// EvictToFit says whether a tier with bucket eviction policy evicts only
// what a write needs (tier.Options.EvictToFit): with "worth", the policy
// whose victims the node reports to the master's SSD admission, so that
// an admitted candidate displaces the buckets it was compared with and no
// others (docs/benchmarks.md, churn stop 40). The other policies keep the
// low watermark's batch.
func EvictToFit(policy string) bool { return policy == "worth" }
