package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/tierstore/tierstore/backend/pwrite"
	"github.com/tierstore/tierstore/client"
	"github.com/tierstore/tierstore/embedded"
	"github.com/tierstore/tierstore/master"
	"github.com/tierstore/tierstore/node"
	"github.com/tierstore/tierstore/tier"
)

// churnStack is one replay's system: a real master, a real SSD tier engine
// (pwrite backend), a real node using that tier and a client, in one
// process, as embedded.New builds them, except that the tier is opened
// here so that its eviction callback can re-insert (churnReinsert). The
// node's side of SSD admission is the node's own: every offload heartbeat
// carries its SSD report (fill level and worth of the next eviction
// victims, weighed with the node's copy of the master's sketch), the reply
// the sketch when the node's copy is behind, and promotions run through
// the master's promotion tasks (node/admission.go; docs/bench/bench.md,
// churn).
type churnStack struct {
	m    *master.Service
	eng  *tier.Engine
	node *node.Node
	c    *client.Client
}

// churnNodeName is the node id of every replay.
const churnNodeName = "churn-node"

// churnReinsert, when not nil, makes the node re-insert the hot objects
// of its SSD eviction victims (CacheLib Navy's reinsertion): objSize is
// the size the decision assumes for every object (the replay's block).
type churnReinsert struct {
	rule    reinsertRule
	objSize int64
}

// startChurnStack starts the master, tier, node and client of cfg, with
// reinsertion when ri is not nil (and the policy has a sketch).
func startChurnStack(ctx context.Context, cfg embedded.Config, ri *churnReinsert) (_ *churnStack, err error) {
	s := &churnStack{}
	defer func() {
		if err != nil {
			s.Close()
		}
	}()
	if s.m, err = master.New(cfg.Master); err != nil {
		return nil, err
	}
	nc := cfg.Node
	be, err := pwrite.Open(filepath.Join(nc.SSDDir, "buckets"), pwrite.Options{Direct: nc.DirectIO, Logger: nc.Logger})
	if err != nil {
		return nil, err
	}
	m := s.m
	s.eng, err = tier.Open(nc.SSDDir, tier.Options{
		Backend:          be,
		Capacity:         nc.SSDCapacity,
		HighWatermark:    envFloat("TIERSTORE_CHURN_SSD_HIGH"),
		LowWatermark:     envFloat("TIERSTORE_CHURN_SSD_LOW"),
		Eviction:         nc.BucketEviction,
		EvictToFit:       node.EvictToFit(nc.BucketEviction) && os.Getenv("TIERSTORE_CHURN_NOFIT") == "",
		Compression:      nc.Compression,
		BucketKeysLimit:  nc.BucketKeysLimit,
		BucketBytesLimit: nc.BucketSizeLimit,
		// The node's own eviction callback: tell the master before the
		// bytes go (invariant 7), re-insert the keys it keeps.
		OnEvict: churnEvictFunc(m, ri),
		Logger:  nc.Logger,
	})
	if err != nil {
		be.Close()
		if errors.Is(err, tier.ErrBadOptions) {
			return nil, fmt.Errorf("%w: %v", node.ErrBadConfig, err)
		}
		return nil, err
	}
	if s.node, err = node.Start(ctx, nc, s.m, node.WithTier(s.eng), node.WithName(churnNodeName)); err != nil {
		s.eng = nil // the node closed it
		return nil, err
	}
	// No replica-location cache: a cached get reaches the master's sketch
	// and recency only by a Touch sent 100 ms of wall time later in the
	// background (client/touch.go), thousands of requests late at the
	// replay's pace and at a point the scheduler picks.
	if s.c, err = client.New(ctx, client.Config{Master: s.m, LocalNode: s.node, Logger: nc.Logger,
		LocationCacheEntries: -1}); err != nil {
		return nil, err
	}
	return s, nil
}

// churnEvictFunc is the tier's eviction callback: node.EvictFunc, and
// with ri the hot objects of the victim (ri.rule.keep, weighed with the
// master's sketch) are kept too: the master is told only of the others,
// and the tier re-inserts the kept ones with those the master keeps.
func churnEvictFunc(m *master.Service, ri *churnReinsert) tier.EvictFunc {
	evict := node.EvictFunc(m, churnNodeName)
	est, ok := m.Policy().(interface{ EstimateBytes([]byte) uint32 })
	if ri == nil || !ok {
		return evict
	}
	return func(ctx context.Context, keys [][]byte) ([][]byte, error) {
		sizes := make([]int64, len(keys))
		for i := range sizes {
			sizes[i] = ri.objSize
		}
		hot := ri.rule.keep(keys, sizes, est.EstimateBytes, -1)
		var gone, keep [][]byte
		for i, k := range keys {
			if hot[i] {
				keep = append(keep, k)
			} else {
				gone = append(gone, k)
			}
		}
		if len(gone) == 0 {
			return keep, nil
		}
		kept, err := evict(ctx, gone)
		if err != nil {
			return nil, err
		}
		return append(keep, kept...), nil
	}
}

// Close stops the client, the node (which closes the tier) and the
// master.
func (s *churnStack) Close() error {
	var errs []error
	if s.c != nil {
		errs = append(errs, s.c.Close())
	}
	if s.node != nil {
		errs = append(errs, s.node.Close())
	} else if s.eng != nil {
		errs = append(errs, s.eng.Close())
	}
	if s.m != nil {
		errs = append(errs, s.m.Close())
	}
	return errors.Join(errs...)
}
