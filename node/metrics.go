package node

import (
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// MetricsHandler serves the node's Prometheus metrics (tierstore_node_*).
// Every metric reads the node's counters at scrape time.
func (n *Node) MetricsHandler() http.Handler {
	reg := prometheus.NewRegistry()
	labels := prometheus.Labels{"node": n.name}
	counter := func(name, help string, f func() float64) {
		reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
			Namespace: "tierstore", Subsystem: "node", Name: name, Help: help, ConstLabels: labels}, f))
	}
	gauge := func(name, help string, f func() float64) {
		reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Namespace: "tierstore", Subsystem: "node", Name: name, Help: help, ConstLabels: labels}, f))
	}
	ld := func(v interface{ Load() int64 }) func() float64 { return func() float64 { return float64(v.Load()) } }
	counter("offload_rounds_total", "Offload heartbeats that returned tasks.", ld(&n.metrics.offloadRounds))
	counter("offload_persisted_total", "Offload tasks answered persisted.", ld(&n.metrics.offloadPersisted))
	counter("offload_failed_total", "Offload tasks answered failed.", ld(&n.metrics.offloadFailed))
	counter("peer_writes_total", "Segment range writes served to peers.", ld(&n.metrics.peerWrites))
	counter("peer_reads_dram_total", "Segment range reads served to peers.", ld(&n.metrics.peerReadsDRAM))
	counter("peer_reads_ssd_total", "SSD object reads served to peers.", ld(&n.metrics.peerReadsSSD))
	counter("remounts_total", "Remounts after NEED_REMOUNT.", ld(&n.metrics.remounts))
	counter("reconciles_total", "Reconciles of the SSD key list with the masterapi.", ld(&n.metrics.reconciles))
	counter("reconcile_removed_total", "SSD objects deleted because a reconcile called them unwanted.", ld(&n.metrics.reconcileRemoved))
	counter("notify_retries_total", "Offload notifies sent again after a transport error.", ld(&n.metrics.notifyRetries))
	gauge("segment_bytes", "Size of the DRAM segment.", func() float64 { return float64(n.seg.Size()) })
	n.dp.register(reg, labels)
	if n.tier != nil {
		ts := func(f func(s *Stats) int64) func() float64 {
			return func() float64 { s := n.Stats(); return float64(f(&s)) }
		}
		gauge("ssd_objects", "Objects on the SSD tier.", ts(func(s *Stats) int64 { return s.Tier.Objects }))
		gauge("ssd_buckets", "Bucket files on the SSD tier.", ts(func(s *Stats) int64 { return s.Tier.Buckets }))
		gauge("ssd_bytes_used", "Bucket file bytes on the SSD tier.", ts(func(s *Stats) int64 { return s.Tier.BytesUsed }))
		counter("ssd_bytes_written_total", "Bytes written to bucket files.", ts(func(s *Stats) int64 { return s.Tier.BytesWritten }))
		counter("ssd_bytes_read_total", "Bytes read from bucket files.", ts(func(s *Stats) int64 { return s.Tier.BytesRead }))
		counter("ssd_evictions_total", "Buckets evicted.", ts(func(s *Stats) int64 { return s.Tier.Evictions }))
		counter("ssd_checksum_errors_total", "SSD reads that failed their CRC32C.", ts(func(s *Stats) int64 { return s.Tier.ChecksumErrors }))
	}
	return promhttp.HandlerFor(reg, promhttp.HandlerOpts{})
}
