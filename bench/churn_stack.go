package main

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"time"

	"github.com/tierstore/tierstore/admission"
	"github.com/tierstore/tierstore/backend/pwrite"
	"github.com/tierstore/tierstore/client"
	"github.com/tierstore/tierstore/embedded"
	"github.com/tierstore/tierstore/eviction"
	"github.com/tierstore/tierstore/master"
	"github.com/tierstore/tierstore/masterapi"
	"github.com/tierstore/tierstore/node"
	"github.com/tierstore/tierstore/tier"
)

// churnStack is one replay's system: a real master, a real SSD tier engine
// (pwrite backend), a real node using that tier and a client, in one
// process, as embedded.New builds them, except that the tier is
// opened here so that the node's side of SSD admission can be run: with
// every offload heartbeat the SSD report (fill level and value of the next
// eviction victims, valued with the master's frequency sketch) goes to the
// master (heartbeatReporter), which is what the offload heartbeat will
// carry once the RPC fields exist (docs/bench/bench.md, churn).
type churnStack struct {
	m    *master.Service
	eng  *tier.Engine
	node *node.Node
	c    *client.Client

	// reportErr is the first error of a report (guarded by mu).
	mu        sync.Mutex
	reportErr error
}

// churnNodeName is the node id of every replay.
const churnNodeName = "churn-node"

// churnReinsert, when not nil, makes the node re-insert the hot objects
// of its SSD eviction victims (CacheLib Navy's reinsertion): objSize is
// the size the decision assumes for every object (the replay's block).
type churnReinsert struct {
	rule    eviction.Reinsertion
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
	eng := s.eng
	// The node does not use BucketEviction with a tier of its own, and
	// does not accept "value" for its flag yet.
	nc.BucketEviction = node.DefaultBucketEviction
	var nm masterapi.NodeAPI = s.m
	if est, ok := s.m.Policy().(interface{ EstimateBytes([]byte) uint32 }); ok {
		// The node's side of admission: victims valued with the master's
		// sketch, the SSD report sent with every offload heartbeat (both
		// what the RPC is to carry).
		eng.SetValueFreq(est.EstimateBytes)
		nm = &heartbeatReporter{Service: s.m, s: s, freq: est.EstimateBytes}
	}
	if s.node, err = node.Start(ctx, nc, nm, node.WithTier(eng), node.WithName(churnNodeName)); err != nil {
		s.eng = nil // the node closed it
		return nil, err
	}
	if s.c, err = client.New(ctx, client.Config{Master: s.m, LocalNode: s.node, Logger: nc.Logger}); err != nil {
		return nil, err
	}
	return s, nil
}

// churnEvictFunc is the tier's eviction callback: node.EvictFunc, and
// with ri the hot objects of the victim (ri.rule.Keep, valued with the
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
		hot := ri.rule.Keep(keys, sizes, est.EstimateBytes, -1)
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

// reportRefresh is the longest a node goes without a new report while its
// tier does not change (the values drift with the sketch meanwhile).
const reportRefresh = 20 * time.Millisecond

// heartbeatReporter is the master as the churn node sees it: every offload
// heartbeat first hands the master the node's SSD report, as the
// heartbeat request is to carry it, when the tier changed since the last
// one (a bucket written or evicted, an object loaded or removed) or
// reportRefresh passed. The node's offload round answers every task it
// fetched before its next heartbeat, so the report's Used holds every
// bucket the master saw persisted, and the master's outstanding tasks
// (counted when the report arrives) are exactly those still queued: no
// task is counted twice or not at all. (An earlier report loop of its own
// let a task answered between the tier's snapshot and the report's
// arrival be counted nowhere: one bucket of room too many, and the loop
// trace fell to 0.86 of MIN in one run of five.)
type heartbeatReporter struct {
	*master.Service
	s    *churnStack
	freq func([]byte) uint32

	mu   sync.Mutex // protects last and at
	last tier.Stats
	at   time.Time
}

// OffloadHeartbeat sends the report if due, then asks for tasks.
func (h *heartbeatReporter) OffloadHeartbeat(ctx context.Context, node string, max int) ([]master.OffloadTask, error) {
	if err := h.maybeReport(); err != nil {
		h.s.mu.Lock()
		if h.s.reportErr == nil && !errors.Is(err, tier.ErrClosed) {
			h.s.reportErr = err
		}
		h.s.mu.Unlock()
	}
	return h.Service.OffloadHeartbeat(ctx, node, max)
}

// maybeReport computes the node's SSD report and hands it to the master
// when the tier changed or reportRefresh passed.
func (h *heartbeatReporter) maybeReport() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	st := h.s.eng.Stats()
	changed := st.BucketsWritten != h.last.BucketsWritten || st.Evictions != h.last.Evictions ||
		st.ObjectsLoaded != h.last.ObjectsLoaded || st.Objects != h.last.Objects
	if !changed && time.Since(h.at) < reportRefresh {
		return nil
	}
	ol, err := h.s.eng.Outlook(ssdReportCover(h.s.eng))
	if err != nil {
		return err
	}
	h.last, h.at = st, time.Now()
	h.Service.ReportSSD(churnNodeName, ssdReport(ol, h.freq))
	return nil
}

// ssdReportCover is how many bytes of next victims a report describes:
// what one eviction round frees, plus a bucket.
func ssdReportCover(e *tier.Engine) int64 {
	st := e.Stats()
	return st.Capacity/5 + 1
}

// ssdReport turns a tier outlook into the report admission takes, valuing
// every object of a victim bucket with freq.
func ssdReport(ol tier.Outlook, freq func([]byte) uint32) admission.SSDReport {
	r := admission.SSDReport{High: ol.High, Low: ol.Low, Used: ol.Used}
	for _, v := range ol.Victims {
		w := eviction.Value(v.Size, v.Keys, v.Sizes, freq)
		r.Victims = append(r.Victims, admission.VictimValue{Bytes: w.FileBytes, Span: w.LiveBytes + w.DeadBytes, Value: w.Value})
	}
	return r
}

// err returns the first report error, if any.
func (s *churnStack) err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.reportErr
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
