package node

import (
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// metricDef is one tierstore_node_* metric read from a Stats snapshot.
type metricDef struct {
	name, help string
	kind       prometheus.ValueType
	tier       bool // only with an SSD tier
	get        func(*Stats) int64
}

var metricDefs = []metricDef{
	{"offload_rounds_total", "Offload heartbeats that returned tasks.", prometheus.CounterValue, false, func(s *Stats) int64 { return s.OffloadRounds }},
	{"offload_wakes_total", "Heartbeats run at once because the master said the offload was pressing (a put waited for DRAM room, queued offload bytes passed a quarter of the DRAM, promotions were queued).", prometheus.CounterValue, false, func(s *Stats) int64 { return s.OffloadWakes }},
	{"offload_persisted_total", "Offload tasks answered persisted.", prometheus.CounterValue, false, func(s *Stats) int64 { return s.OffloadPersisted }},
	{"offload_failed_total", "Offload tasks answered failed.", prometheus.CounterValue, false, func(s *Stats) int64 { return s.OffloadFailed }},
	{"peer_writes_total", "Segment range writes served to peers.", prometheus.CounterValue, false, func(s *Stats) int64 { return s.PeerWrites }},
	{"peer_reads_dram_total", "Segment range reads served to peers.", prometheus.CounterValue, false, func(s *Stats) int64 { return s.PeerReadsDRAM }},
	{"peer_reads_ssd_total", "SSD object reads served to peers.", prometheus.CounterValue, false, func(s *Stats) int64 { return s.PeerReadsSSD }},
	{"read_grants_refused_missing_total", "Data-plane reads refused for carrying no read grant (--grant_secret_file).", prometheus.CounterValue, false, func(s *Stats) int64 { return s.GrantsMissing }},
	{"read_grants_refused_forged_total", "Data-plane reads refused for a read grant made for another read or with another secret.", prometheus.CounterValue, false, func(s *Stats) int64 { return s.GrantsForged }},
	{"read_grants_refused_expired_total", "Data-plane reads refused for a read grant past its expiry.", prometheus.CounterValue, false, func(s *Stats) int64 { return s.GrantsExpired }},
	{"write_grants_refused_missing_total", "Data-plane writes refused for carrying no write grant (--grant_secret_file).", prometheus.CounterValue, false, func(s *Stats) int64 { return s.WriteGrantsMissing }},
	{"write_grants_refused_forged_total", "Data-plane writes refused for a write grant made for another range, put token, key or node, for a read, or with another secret.", prometheus.CounterValue, false, func(s *Stats) int64 { return s.WriteGrantsForged }},
	{"write_grants_refused_expired_total", "Data-plane writes refused for a write grant past its expiry (the put's discard deadline).", prometheus.CounterValue, false, func(s *Stats) int64 { return s.WriteGrantsExpired }},
	{"remounts_total", "Remounts after NEED_REMOUNT.", prometheus.CounterValue, false, func(s *Stats) int64 { return s.Remounts }},
	{"reconciles_total", "Reconciles of the SSD key list with the master.", prometheus.CounterValue, false, func(s *Stats) int64 { return s.Reconciles }},
	{"reconcile_removed_total", "SSD objects deleted because a reconcile called them unwanted.", prometheus.CounterValue, false, func(s *Stats) int64 { return s.ReconcileRemoved }},
	{"reconcile_keys_sent_total", "SSD keys sent by reconciles (the keys of hash slots whose digests differ).", prometheus.CounterValue, false, func(s *Stats) int64 { return s.ReconcileKeysSent }},
	{"removal_log_removed_total", "SSD objects deleted by entries of the master's removal log.", prometheus.CounterValue, true, func(s *Stats) int64 { return s.RemovalLogRemoved }},
	{"notify_retries_total", "Offload notifies sent again after a transport error.", prometheus.CounterValue, false, func(s *Stats) int64 { return s.NotifyRetries }},
	{"ssd_reports_total", "SSD reports sent to the master's admission policy.", prometheus.CounterValue, true, func(s *Stats) int64 { return s.SSDReports }},
	{"admission_sketches_received_total", "Admission sketches received from the master (transfers completed).", prometheus.CounterValue, true, func(s *Stats) int64 { return s.SketchesReceived }},
	{"admission_sketch_chunks_received_total", "Admission sketch chunks received from the master.", prometheus.CounterValue, true, func(s *Stats) int64 { return s.SketchChunksReceived }},
	{"admission_sketch_restarts_total", "Admission sketch transfers started again: the master's sketch halved or was resized during the transfer.", prometheus.CounterValue, true, func(s *Stats) int64 { return s.SketchRestarts }},
	{"promotions_total", "Objects copied from SSD into DRAM and published by the master.", prometheus.CounterValue, true, func(s *Stats) int64 { return s.Promotions }},
	{"promotions_failed_total", "Promotions the node could not load (SSD copy gone or different, range refused).", prometheus.CounterValue, true, func(s *Stats) int64 { return s.PromotionsFailed }},
	{"promotion_reads_joined_total", "SSD reads served from a promotion's load under way instead of a second read of the SSD.", prometheus.CounterValue, true, func(s *Stats) int64 { return s.PromotionReadsJoined }},
	{"promotions_refused_total", "Promotions loaded but refused by the master (object removed or put again meanwhile).", prometheus.CounterValue, true, func(s *Stats) int64 { return s.PromotionsRefused }},
	{"dram_records", "DRAM objects recorded for re-registration at a new master.", prometheus.GaugeValue, false, func(s *Stats) int64 { return s.DRAMRecords }},
	{"segment_bytes", "Size of the DRAM segment.", prometheus.GaugeValue, false, func(s *Stats) int64 { return s.SegmentSize }},
	{"ssd_objects", "Objects on the SSD tier.", prometheus.GaugeValue, true, func(s *Stats) int64 { return s.Tier.Objects }},
	{"ssd_buckets", "Bucket files on the SSD tier.", prometheus.GaugeValue, true, func(s *Stats) int64 { return s.Tier.Buckets }},
	{"ssd_bytes_used", "Bucket file bytes on the SSD tier.", prometheus.GaugeValue, true, func(s *Stats) int64 { return s.Tier.BytesUsed }},
	{"ssd_bytes_live", "Stored bytes of the objects on the SSD tier.", prometheus.GaugeValue, true, func(s *Stats) int64 { return s.Tier.LiveBytes }},
	{"ssd_bytes_dead", "Stored bytes of removed or superseded objects whose bucket file is still on the SSD tier.", prometheus.GaugeValue, true, func(s *Stats) int64 { return s.Tier.DeadBytes }},
	{"ssd_buckets_mostly_dead", "Bucket files at least half dead (evicted before buckets of live data).", prometheus.GaugeValue, true, func(s *Stats) int64 { return s.Tier.MostlyDeadBuckets }},
	{"ssd_evicted_live_bytes_total", "Stored bytes of live objects evicted with their bucket (not re-inserted).", prometheus.CounterValue, true, func(s *Stats) int64 { return s.Tier.EvictedLiveBytes }},
	{"ssd_evicted_dead_bytes_total", "Stored bytes of dead objects reclaimed by bucket evictions.", prometheus.CounterValue, true, func(s *Stats) int64 { return s.Tier.EvictedDeadBytes }},
	{"ssd_bytes_written_total", "Bytes written to bucket files.", prometheus.CounterValue, true, func(s *Stats) int64 { return s.Tier.BytesWritten }},
	{"ssd_bytes_read_total", "Bytes read from bucket files.", prometheus.CounterValue, true, func(s *Stats) int64 { return s.Tier.BytesRead }},
	{"ssd_evictions_total", "Buckets evicted.", prometheus.CounterValue, true, func(s *Stats) int64 { return s.Tier.Evictions }},
	{"ssd_checksum_errors_total", "SSD reads that failed their CRC32C.", prometheus.CounterValue, true, func(s *Stats) int64 { return s.Tier.ChecksumErrors }},
}

// collector is the node's prometheus.Collector: every scrape takes one
// Stats snapshot and reads every metric from it, so the figures of one
// scrape are consistent with each other and the tier is asked once.
type collector struct {
	n        *Node
	defs     []metricDef
	descs    []*prometheus.Desc
	failedBy *prometheus.Desc // offload failures by reason
}

func newCollector(n *Node) *collector {
	c := &collector{n: n}
	labels := prometheus.Labels{"node": n.name}
	for _, d := range metricDefs {
		if d.tier && n.tier == nil {
			continue
		}
		c.defs = append(c.defs, d)
		c.descs = append(c.descs, prometheus.NewDesc(prometheus.BuildFQName("tierstore", "node", d.name), d.help, nil, labels))
	}
	c.failedBy = prometheus.NewDesc("tierstore_node_offload_failures_total",
		"Offload tasks answered failed, by reason (too_large and no_space are permanent).", []string{"reason"}, labels)
	return c
}

// Describe implements prometheus.Collector.
func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range c.descs {
		ch <- d
	}
	ch <- c.failedBy
}

// Collect implements prometheus.Collector: one Stats snapshot per scrape.
func (c *collector) Collect(ch chan<- prometheus.Metric) {
	st := c.n.Stats()
	for i, d := range c.defs {
		ch <- prometheus.MustNewConstMetric(c.descs[i], d.kind, float64(d.get(&st)))
	}
	for reason, v := range st.OffloadFailedBy {
		ch <- prometheus.MustNewConstMetric(c.failedBy, prometheus.CounterValue, float64(v), reason)
	}
}

// MetricsHandler serves the node's Prometheus metrics (tierstore_node_*),
// read from one Stats snapshot per scrape.
func (n *Node) MetricsHandler() http.Handler {
	reg := prometheus.NewRegistry()
	reg.MustRegister(newCollector(n))
	n.dp.register(reg, prometheus.Labels{"node": n.name})
	if n.guard != nil {
		prometheus.WrapRegistererWith(prometheus.Labels{"node": n.name}, reg).MustRegister(n.guard.Collector())
	}
	return promhttp.HandlerFor(reg, promhttp.HandlerOpts{})
}
