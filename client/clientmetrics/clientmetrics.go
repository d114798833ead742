package clientmetrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tierstore/tierstore/client"
)

// Buckets are the histograms' upper bounds in seconds: 10 µs to about
// 1.3 s, doubling (the node's histograms use the same).
var Buckets = prometheus.ExponentialBuckets(10e-6, 2, 18)

// Metrics is a client.Observer and a prometheus.Collector.
type Metrics struct {
	get, put *prometheus.HistogramVec
	// the histograms' children by client.Tier, resolved once
	getBy, putBy [client.TierRemoteSSD + 1]prometheus.Observer
}

// New returns the histograms, with constLabels (may be nil) on each, for
// example the client's name.
func New(constLabels prometheus.Labels) *Metrics {
	m := &Metrics{
		get: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "tierstore", Subsystem: "client", Name: "get_seconds",
			Help:        "Latency of successful Get/GetInto calls (batch items: from the batch's start), by the tier that served them.",
			ConstLabels: constLabels, Buckets: Buckets}, []string{"tier"}),
		put: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "tierstore", Subsystem: "client", Name: "put_seconds",
			Help:        "Latency of successful Put calls (PutStart, the bytes, PutEnd), by the tier written.",
			ConstLabels: constLabels, Buckets: Buckets}, []string{"tier"}),
	}
	for t := client.TierLocalDRAM; t <= client.TierRemoteSSD; t++ {
		m.getBy[t] = m.get.WithLabelValues(t.String())
		m.putBy[t] = m.put.WithLabelValues(t.String())
	}
	return m
}

// ObserveGet records a Get served by t (client.Observer).
func (m *Metrics) ObserveGet(t client.Tier, d time.Duration) {
	if int(t) < len(m.getBy) {
		m.getBy[t].Observe(d.Seconds())
	}
}

// ObservePut records a Put written to t (client.Observer).
func (m *Metrics) ObservePut(t client.Tier, d time.Duration) {
	if int(t) < len(m.putBy) {
		m.putBy[t].Observe(d.Seconds())
	}
}

// Describe implements prometheus.Collector.
func (m *Metrics) Describe(ch chan<- *prometheus.Desc) {
	m.get.Describe(ch)
	m.put.Describe(ch)
}

// Collect implements prometheus.Collector.
func (m *Metrics) Collect(ch chan<- prometheus.Metric) {
	m.get.Collect(ch)
	m.put.Collect(ch)
}
