package master

import (
	"context"
	"errors"
	"net/http"
	"sort"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/tierstore/tierstore/internal/errcode"
	"github.com/tierstore/tierstore/masterapi"
)

// metrics are the master's Prometheus collectors, in a registry of their own
// (never the global one).
type metrics struct {
	reg              *prometheus.Registry
	evictions        prometheus.Counter
	offloadPersisted prometheus.Counter
	offloadFailed    prometheus.Counter
	errs             *prometheus.CounterVec
	byCode           map[errcode.Code]prometheus.Counter // pre-resolved children of errs
}

func newMetrics(s *Service) *metrics {
	m := &metrics{reg: prometheus.NewRegistry()}
	f := prometheus.NewGaugeFunc
	m.reg.MustRegister(
		f(prometheus.GaugeOpts{Name: "tierstore_master_objects", Help: "Objects in the master's metadata."},
			func() float64 { return float64(s.cnt.objects.Load()) }),
		tierGauge("tierstore_master_bytes", "Object bytes per tier (one count per replica).", "dram", &s.cnt.dramBytes),
		tierGauge("tierstore_master_bytes", "Object bytes per tier (one count per replica).", "ssd", &s.cnt.ssdBytes),
		tierGauge("tierstore_master_replicas", "Replicas per tier.", "dram", &s.cnt.dramReplicas),
		tierGauge("tierstore_master_replicas", "Replicas per tier.", "ssd", &s.cnt.ssdReplicas),
		f(prometheus.GaugeOpts{Name: "tierstore_master_offload_queue_depth", Help: "Offload tasks queued or in flight, all nodes."},
			func() float64 { q, i := s.queueDepth(); return float64(q + i) }),
		f(prometheus.GaugeOpts{Name: "tierstore_master_nodes", Help: "Live store nodes."},
			func() float64 { s.nodesMu.RLock(); defer s.nodesMu.RUnlock(); return float64(len(s.nodes)) }),
		counter("tierstore_master_expired_nodes_total", "Nodes expired for silence (client_ttl).", &s.cnt.expiredNodes),
		counter("tierstore_master_offload_queued_total", "Offload tasks queued.", &s.cnt.offloadQueued),
		counter("tierstore_master_offload_retried_total", "Offload tasks queued again after a retryable failure or a timeout.", &s.cnt.offloadRetried),
		counter("tierstore_master_offload_abandoned_total", "Offload tasks dropped after their last retryable attempt failed.", &s.cnt.offloadAbandoned),
		counter("tierstore_master_offload_dropped_victims_total", "DRAM eviction victims dropped without an SSD copy because their offload failed for good (offload_on_evict would have queued them).", &s.cnt.offloadDroppedVictims),
		counter("tierstore_master_put_start_waits_total", "PutStarts that waited for DRAM room (eviction could not make room at once).", &s.cnt.putWaits),
		counter("tierstore_master_put_start_wait_failures_total", "PutStarts that waited for DRAM room and gave up (context or put_start_max_wait).", &s.cnt.putWaitsFailed),
		counter("tierstore_master_removal_waits_total", "Forced removals of leased objects that answered once every node holding a copy had applied them (clients may hold the object's replica locations until the lease ends).", &s.cnt.removalWaits),
		counter("tierstore_master_removal_waits_timed_out_total", "Forced removals of leased objects that answered at the lease's end because a holder had not applied them.", &s.cnt.removalWaitsTimedOut),
		counter("tierstore_master_offload_wakes_total", "WaitOffload calls answered pressed: a node fetched its tasks before its heartbeat tick (a put waited for room, queued offload bytes passed a quarter of its DRAM, or promotions were queued).", &s.cnt.offloadWakes),
		counter("tierstore_master_touched_keys_total", "Keys clients read from their replica-location cache and reported (Touch), counted as lookups for recency and admission.", &s.cnt.touched),
		counter("tierstore_master_prefetch_queued_total", "Prefetches queued for promotion (ExistKey/BatchExistKey hits on SSD-only objects, Prefetch).", &s.cnt.prefetchQueued),
		counter("tierstore_master_prefetch_over_budget_total", "Prefetches the frequency test admitted and the prefetch budget refused.", &s.cnt.prefetchOverBudget),
		counter("tierstore_master_prefetch_evictions_total", "DRAM replicas of colder objects with an SSD copy dropped to make room for a prefetch.", &s.cnt.prefetchEvictions),
		promotionCounter("queued", &s.cnt.promotionsQueued),       // SSD hits the admission policy found worth a DRAM copy, queued for their node.
		promotionCounter("started", &s.cnt.promotionsStarted),     // Promotions handed to a node (a DRAM range allocated).
		promotionCounter("published", &s.cnt.promotions),          // Promotions the node loaded: DRAM replica published.
		promotionCounter("abandoned", &s.cnt.promotionsAbandoned), // Promotions given up: SSD copy gone, object removed or put again, node failed to load.
		promotionCounter("no_room", &s.cnt.promotionsNoRoom),      // Promotion candidates dropped: no DRAM room on their node even after eviction.
		counter("tierstore_master_promotion_evictions_total", "DRAM replicas of objects readable from SSD dropped to make room for a promotion (prefetches included).", &s.cnt.promotionEvictions),
		counter("tierstore_master_promotion_spared_victims_total", "DRAM-only objects a promotion needing room left in DRAM: the admission policy refused their offload, and a promotion never drops an object it would lose.", &s.cnt.promotionsSpared),
		counter("tierstore_master_admission_sketches_sent_total", "Admission sketch transfers whose last chunk was sent to a node in a heartbeat reply.", &s.cnt.sketchesSent),
		counter("tierstore_master_admission_sketch_chunks_sent_total", "Admission sketch chunks sent to nodes in heartbeat replies.", &s.cnt.sketchChunksSent),
		counter("tierstore_master_admission_sketch_bytes_sent_total", "Bytes of admission sketch chunks sent to nodes.", &s.cnt.sketchBytesSent),
		counter("tierstore_master_bad_replicas_total", "Replicas dropped because a reader reported a size or CRC32C mismatch.", &s.cnt.badReplicas),
	)
	m.evictions = prometheus.NewCounter(prometheus.CounterOpts{Name: "tierstore_master_evictions_total", Help: "DRAM replicas evicted."})
	m.offloadPersisted = prometheus.NewCounter(prometheus.CounterOpts{Name: "tierstore_master_offload_persisted_total", Help: "Offload tasks answered as persisted."})
	m.offloadFailed = prometheus.NewCounter(prometheus.CounterOpts{Name: "tierstore_master_offload_failed_total", Help: "Offload tasks answered as failed."})
	m.errs = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "tierstore_master_errors_total", Help: "Errors returned, by Mooncake error code name."}, []string{"code"})
	m.reg.MustRegister(m.evictions, m.offloadPersisted, m.offloadFailed, m.errs)
	m.byCode = map[errcode.Code]prometheus.Counter{}
	for _, c := range errcode.All() {
		m.byCode[c] = m.errs.WithLabelValues(c.String())
	}
	return m
}

// counter is a counter metric that reads v.
func counter(name, help string, v *atomic.Int64) prometheus.Collector {
	return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help}, func() float64 { return float64(v.Load()) })
}

// tierGauge is the gauge name{tier} that reads v (one help text for both
// tiers, as the registry requires).
func tierGauge(name, help, tier string, v *atomic.Int64) prometheus.Collector {
	return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help, ConstLabels: prometheus.Labels{"tier": tier}},
		func() float64 { return float64(v.Load()) })
}

// promotionCounter is tierstore_master_promotions_total{result} (one help
// text for every label value, as the registry requires).
func promotionCounter(result string, v *atomic.Int64) prometheus.Collector {
	return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "tierstore_master_promotions_total",
		Help:        "Promotions of SSD objects into DRAM by result: queued (SSD hit worth a DRAM copy), started (range allocated), published, abandoned, no_room.",
		ConstLabels: prometheus.Labels{"result": result}}, func() float64 { return float64(v.Load()) })
}

func (m *metrics) countErr(err error) {
	if errors.Is(err, ErrClosed) {
		return
	}
	if c, ok := m.byCode[errcode.Of(err)]; ok {
		c.Inc()
	}
}

// Registry returns the Prometheus registry holding the master's metrics.
func (s *Service) Registry() *prometheus.Registry { return s.met.reg }

// MetricsHandler serves the master's metrics in the Prometheus text format.
func (s *Service) MetricsHandler() http.Handler {
	return promhttp.HandlerFor(s.met.reg, promhttp.HandlerOpts{})
}

func (s *Service) queueDepth() (queued, inflight int) {
	s.nodesMu.RLock()
	defer s.nodesMu.RUnlock()
	for _, n := range s.nodes {
		q, i := n.box.counts()
		queued += q
		inflight += i
	}
	return
}

// Stats implements API.
func (s *Service) Stats(ctx context.Context) (masterapi.Stats, error) {
	if err := s.gate(ctx); err != nil {
		return masterapi.Stats{}, err
	}
	st := masterapi.Stats{
		Objects:             s.cnt.objects.Load(),
		DRAMReplicas:        s.cnt.dramReplicas.Load(),
		SSDReplicas:         s.cnt.ssdReplicas.Load(),
		DRAMBytes:           s.cnt.dramBytes.Load(),
		SSDBytes:            s.cnt.ssdBytes.Load(),
		Evictions:           s.cnt.evictions.Load(),
		OffloadQueuedTot:    s.cnt.offloadQueued.Load(),
		OffloadPersisted:    s.cnt.offloadPersisted.Load(),
		OffloadFailed:       s.cnt.offloadFailed.Load(),
		ExpiredNodes:        s.cnt.expiredNodes.Load(),
		Promotions:          s.cnt.promotions.Load(),
		PromotionsAbandoned: s.cnt.promotionsAbandoned.Load(),
	}
	s.nodesMu.RLock()
	st.Nodes = int64(len(s.nodes))
	st.PerNode = make([]masterapi.NodeStats, 0, len(s.nodes))
	for _, n := range s.nodes {
		row := n.stats(true)
		for _, g := range n.segments {
			row.Segments++
			row.SegmentSize += g.size
			row.SegmentUsed += g.used()
		}
		st.Segments += row.Segments
		st.SegmentCapacity += row.SegmentSize
		st.SegmentUsed += row.SegmentUsed
		st.OffloadQueued += row.OffloadQueued
		st.OffloadInFlight += row.OffloadInFlight
		st.PerNode = append(st.PerNode, row)
	}
	var dead []masterapi.NodeStats
	for _, n := range s.retired {
		if row := n.stats(false); row.DRAMReplicas+row.SSDReplicas > 0 {
			dead = append(dead, row)
			// The totals count live incarnations' replicas only: these
			// are unreadable, kept for a lease (their rows say so).
			st.DRAMReplicas -= row.DRAMReplicas
			st.DRAMBytes -= row.DRAMBytes
			st.SSDReplicas -= row.SSDReplicas
			st.SSDBytes -= row.SSDBytes
		}
	}
	s.nodesMu.RUnlock()
	byID := func(a []masterapi.NodeStats) {
		sort.Slice(a, func(i, j int) bool { return a[i].Node < a[j].Node })
	}
	byID(st.PerNode)
	byID(dead)
	st.PerNode = append(st.PerNode, dead...)
	return st, nil
}

// pruneRetiredLocked forgets the retired incarnations no replica points at
// any more. Their counters only fall, except for a call that looked the
// node up just before it was retired and records a replica just after (the
// sweep clears such a replica; Stats may then miss its row, a display
// matter only). Called at every retirement, so the list stays short
// without Stats calls. Caller holds nodesMu for writing.
func (s *Service) pruneRetiredLocked() {
	kept := s.retired[:0]
	for _, n := range s.retired {
		if n.dramReplicas.Load()+n.ssdReplicas.Load() > 0 {
			kept = append(kept, n)
		}
	}
	clear(s.retired[len(kept):])
	s.retired = kept
}

// stats returns n's row of Stats without its segment figures.
func (n *node) stats(alive bool) masterapi.NodeStats {
	r := masterapi.NodeStats{Node: n.id, Endpoint: n.endpoint, Incarnation: n.incarnation, Alive: alive,
		DRAMReplicas: n.dramReplicas.Load(), DRAMBytes: n.dramBytes.Load(),
		SSDReplicas: n.ssdReplicas.Load(), SSDBytes: n.ssdBytes.Load()}
	if alive {
		q, i := n.box.counts()
		r.OffloadQueued, r.OffloadInFlight = int64(q), int64(i)
	}
	return r
}
