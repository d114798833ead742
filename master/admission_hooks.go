package master

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tierstore/tierstore/admission"
	"github.com/tierstore/tierstore/masterapi"
)

// The master's side of admission policies that learn from more than the
// three moments of admission.Policy (package admission, tinylfu): every
// demand lookup including misses, the SSD reports of the nodes, metrics.
// Kept in this file so that the call sites elsewhere are one line each.

// lookupObserver is a policy that records every demand lookup, hit or miss.
type lookupObserver interface {
	ObserveLookup(key string, o admission.Outcome, size int64)
}

// ssdReportSink is a policy that takes the nodes' SSD reports with the
// node's outstanding tasks counted beforehand.
type ssdReportSink interface {
	ReportSSD(node string, r masterapi.SSDReport, outstanding int)
}

// countedReportSink is an ssdReportSink that counts the node's outstanding
// tasks with the function it is given, under the lock its admissions take
// (TinyLFU): no admission can fall between the count and the report.
type countedReportSink interface {
	ReportSSDCounted(node string, r masterapi.SSDReport, outstanding func() int)
}

// startAdmission connects the policy to the master: the object count (which
// sizes a frequency sketch) and the metrics registry. Called once by New.
func (s *Service) startAdmission() {
	if p, ok := s.policy.(interface{ SetPopulation(func() int64) }); ok {
		p.SetPopulation(s.cnt.objects.Load)
	}
	if c, ok := s.policy.(prometheus.Collector); ok {
		s.met.reg.MustRegister(c)
	}
}

// observeLookup tells a lookup-observing policy about one demand lookup of
// key, whose object is o (nil when absent). count is the caller's "counted
// demand lookup" (not the offload path, first occurrence in its batch);
// pre: the lookup is an ExistKey, whose SSD hit is a prefetch (a read will
// follow: prefetch.go). Caller holds the shard lock.
func (s *Service) observeLookup(key string, o *object, count, pre bool) {
	if !count {
		return
	}
	ob, ok := s.policy.(lookupObserver)
	if !ok {
		return
	}
	switch {
	case o == nil:
		ob.ObserveLookup(key, admission.Miss, 0)
	case o.readableDRAM():
		ob.ObserveLookup(key, admission.DRAMHit, o.size)
	case o.readableSSD():
		ob.ObserveLookup(key, admission.SSDHit, o.size)
		if !pre || s.cfg.PrefetchBudget > 0 { // prefetch_budget 0: a lookup does not prefetch
			s.considerPromotion(key, o, pre)
		}
	default:
		ob.ObserveLookup(key, admission.Miss, 0)
	}
}

// observeSSDEviction tells a policy that keys are leaving node's SSD (the
// node evicts their bucket).
func (s *Service) observeSSDEviction(keys []string) {
	if p, ok := s.policy.(interface{ ObserveSSDEviction([]string) }); ok {
		p.ObserveSSDEviction(keys)
	}
}

// dramNode is the id of the node holding o's DRAM replica (of several, the
// offload source: the first readable one, else the first), "" without one.
func dramNode(o *object) string {
	if m := o.dramSource(); m != nil {
		return m.seg.node.id
	}
	if o.dram.seg == nil {
		return ""
	}
	return o.dram.seg.node.id
}

// admitToSSD asks the admission policy (ask: its OnEvict or AtPutEnd)
// whether o goes to SSD and, when it does and queue is true, queues o's
// offload task. From just before the policy's decision (which counts o's
// bytes as admitted to the node) until the task is queued, o is counted in
// its node's admitting: a report of the node that arrives in between
// (ReportSSD, which resets what the policy counts as admitted to the
// outstanding tasks) still counts it, so the room estimate never loses an
// admitted object. Caller holds the shard lock.
func (s *Service) admitToSSD(key string, o *object, ask func(admission.Object) bool, queue bool) (admitted, queued bool) {
	var n *node
	if m := o.dramSource(); m != nil {
		n = m.seg.node
		n.admitting.Add(1)
		defer n.admitting.Add(-1)
	}
	if !ask(s.admissionView(key, o)) {
		return false, false
	}
	if h := s.hooks.admitted; h != nil {
		h()
	}
	return true, queue && s.enqueue(key, o)
}

// ReportSSD passes node's SSD report (fill level, value of its next
// eviction victims) to the admission policy, with the node's offload tasks
// still queued or in flight and the objects admitted whose task is being
// queued (admitted, not yet in the report's fill level), counted under the
// policy's lock so that no admission falls between the count and the
// report; policies that do not use reports ignore it. The offload
// heartbeat carries the report over RPC; the node computes it before it
// fetches the heartbeat's tasks.
func (s *Service) ReportSSD(node string, r masterapi.SSDReport) {
	p, ok := s.policy.(ssdReportSink)
	if !ok {
		return
	}
	n := s.lookupNode(node)
	count := func() int {
		if n == nil {
			return 0
		}
		// admitting first: an object that leaves it has its task queued
		// already, so it is counted once at least (twice at worst, which
		// only underrates the room).
		a := n.admitting.Load()
		q, i := n.box.counts()
		return int(a) + q + i
	}
	if c, ok := p.(countedReportSink); ok {
		c.ReportSSDCounted(node, r, count)
		return
	}
	p.ReportSSD(node, r, count())
}

// AdmissionSketch returns the admission policy's frequency sketch, encoded
// for a node that values its SSD buckets with it (admission.Sketch
// UnmarshalBinary). ErrBadConfig when the policy keeps no sketch.
func (s *Service) AdmissionSketch() ([]byte, error) {
	p, ok := s.policy.(interface{ MarshalSketch() ([]byte, error) })
	if !ok {
		return nil, fmt.Errorf("%w: admission policy %s keeps no frequency sketch", ErrBadConfig, s.policy.Name())
	}
	return p.MarshalSketch()
}
