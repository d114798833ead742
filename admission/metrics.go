package admission

import (
	"github.com/prometheus/client_golang/prometheus"
)

// TinyLFUStats is a snapshot of the policy's counters.
type TinyLFUStats struct {
	// Decisions counts admission decisions by reason (Reason.String()).
	Decisions map[string]int64
	Accepted  int64
	Rejected  int64
	// Lookups by outcome.
	Lookups, DRAMHits, SSDHits, Misses int64
	// AdmittedBytes is the bytes of objects admitted to SSD (queued);
	// SSDHitBytes the bytes of lookups answered by SSD only.
	AdmittedBytes, SSDHitBytes int64
	Promotions                 int64
	// ColdPuts counts the puts placed first in DRAM's eviction order
	// (ColdPut answered true); ColdNewPuts those of them of new keys (the
	// new-key window's).
	ColdPuts, ColdNewPuts int64
	// NewKeysReturn, NewKeysAgainReturn and PushedReturn are the new-key
	// window's return rates (new keys at their first put, new keys cached
	// before, objects the SSD pushed out) within WindowHorizon lookups
	// (window.go).
	NewKeysReturn, NewKeysAgainReturn, PushedReturn, WindowHorizon float64
	// Margin is the adaptive margin now; RegretRejected and RegretPushed
	// count the returns that move it: lookups, within the horizon, of
	// (sampled) candidates the margin alone turned away and of objects
	// the SSD pushed out (ghost.go).
	Margin                       float64
	RegretRejected, RegretPushed int64
	// Halvings of the sketch, sketch resizes, SSD reports received.
	Halvings, Resizes, Reports int64
	// SketchWidth is the counters per row; Period the accesses between
	// halvings.
	SketchWidth, Period int64
}

// SSDHitRatio is SSDHits / Lookups (0 without lookups).
func (s TinyLFUStats) SSDHitRatio() float64 {
	if s.Lookups == 0 {
		return 0
	}
	return float64(s.SSDHits) / float64(s.Lookups)
}

// WrittenPerRead is AdmittedBytes / SSDHitBytes: bytes written to SSD per
// byte read back (0 when nothing was read).
func (s TinyLFUStats) WrittenPerRead() float64 {
	if s.SSDHitBytes == 0 {
		return 0
	}
	return float64(s.AdmittedBytes) / float64(s.SSDHitBytes)
}

// Stats returns the policy's counters.
func (p *TinyLFU) Stats() TinyLFUStats {
	s := TinyLFUStats{Decisions: map[string]int64{}}
	for r := Reason(0); r < numReasons; r++ {
		n := p.st.decisions[r].Load()
		s.Decisions[r.String()] = n
		if r.Accepted() {
			s.Accepted += n
		} else {
			s.Rejected += n
		}
	}
	s.Misses = p.st.lookups[Miss].Load()
	s.DRAMHits = p.st.lookups[DRAMHit].Load()
	s.SSDHits = p.st.lookups[SSDHit].Load()
	s.Lookups = s.Misses + s.DRAMHits + s.SSDHits
	s.AdmittedBytes = p.st.admittedBytes.Load()
	s.SSDHitBytes = p.st.ssdHitBytes.Load()
	s.Promotions = p.st.promotions.Load()
	s.ColdPuts = p.st.coldPuts.Load()
	s.ColdNewPuts = p.st.coldNewPuts.Load()
	s.Resizes = p.st.resizes.Load()
	s.Reports = p.st.reports.Load()
	p.mu.Lock()
	s.Halvings = p.sk.Resets()
	s.SketchWidth = p.sk.Width()
	s.Period = p.sk.Period()
	s.Margin = p.margin
	s.NewKeysReturn, s.NewKeysAgainReturn, s.PushedReturn, s.WindowHorizon = p.win.rates()
	s.RegretRejected, s.RegretPushed = p.win.rejected.returns, p.win.pushed.returns
	p.mu.Unlock()
	return s
}

var (
	descDecisions = prometheus.NewDesc("tierstore_admission_decisions_total",
		"SSD admission decisions of the tinylfu policy, by result and reason.", []string{"result", "reason"}, nil)
	descLookups = prometheus.NewDesc("tierstore_admission_lookups_total",
		"Demand lookups seen by the tinylfu policy, by outcome.", []string{"outcome"}, nil)
	descSSDHitRatio = prometheus.NewDesc("tierstore_admission_ssd_hit_ratio",
		"Demand lookups answered by SSD only, over all demand lookups.", nil, nil)
	descAdmitted = prometheus.NewDesc("tierstore_admission_admitted_bytes_total",
		"Bytes of objects admitted to SSD.", nil, nil)
	descSSDHitBytes = prometheus.NewDesc("tierstore_admission_ssd_hit_bytes_total",
		"Bytes of demand lookups answered by SSD only.", nil, nil)
	descWPR = prometheus.NewDesc("tierstore_admission_written_per_read_bytes",
		"Bytes admitted to SSD per byte of SSD hits (0 before the first SSD hit).", nil, nil)
	descPromotions = prometheus.NewDesc("tierstore_admission_promotions_total",
		"SSD hits judged worth a DRAM copy.", nil, nil)
	descColdPuts = prometheus.NewDesc("tierstore_admission_cold_puts_total",
		"Puts of keys coming back after they left DRAM and SSD, placed first in DRAM's eviction order.", nil, nil)
	descHalvings = prometheus.NewDesc("tierstore_admission_sketch_halvings_total",
		"Ageing steps of the frequency sketch.", nil, nil)
)

// Describe implements prometheus.Collector.
func (p *TinyLFU) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descDecisions, descLookups, descSSDHitRatio, descAdmitted,
		descSSDHitBytes, descWPR, descPromotions, descColdPuts, descHalvings} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (p *TinyLFU) Collect(ch chan<- prometheus.Metric) {
	s := p.Stats()
	c := prometheus.CounterValue
	for r := Reason(0); r < numReasons; r++ {
		res := "rejected"
		if r.Accepted() {
			res = "accepted"
		}
		ch <- prometheus.MustNewConstMetric(descDecisions, c, float64(s.Decisions[r.String()]), res, r.String())
	}
	ch <- prometheus.MustNewConstMetric(descLookups, c, float64(s.DRAMHits), "dram_hit")
	ch <- prometheus.MustNewConstMetric(descLookups, c, float64(s.SSDHits), "ssd_hit")
	ch <- prometheus.MustNewConstMetric(descLookups, c, float64(s.Misses), "miss")
	ch <- prometheus.MustNewConstMetric(descSSDHitRatio, prometheus.GaugeValue, s.SSDHitRatio())
	ch <- prometheus.MustNewConstMetric(descAdmitted, c, float64(s.AdmittedBytes))
	ch <- prometheus.MustNewConstMetric(descSSDHitBytes, c, float64(s.SSDHitBytes))
	ch <- prometheus.MustNewConstMetric(descWPR, prometheus.GaugeValue, s.WrittenPerRead())
	ch <- prometheus.MustNewConstMetric(descPromotions, c, float64(s.Promotions))
	ch <- prometheus.MustNewConstMetric(descColdPuts, c, float64(s.ColdPuts))
	ch <- prometheus.MustNewConstMetric(descHalvings, c, float64(s.Halvings))
}
