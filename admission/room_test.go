package admission

import (
	"fmt"
	"testing"

	"github.com/tierstore/tierstore/masterapi"
)

// between is a report of an SSD between its watermarks (room for ten
// objects below the high one, five above the low one) whose next victim
// has density d.
func between(d float64) masterapi.SSDReport {
	r := full(d, d)
	r.Used = 90 * obj
	return r
}

// TestTinyLFURoomBetweenWatermarks: on an SSD that has evicted, room
// between the watermarks goes only to candidates that beat the next
// victim by more than the margin (a burst of one-off keys does not fill
// it); below the low watermark, before any eviction, with FreeRoom or
// once the margin has adapted down to 0 every candidate fits.
func TestTinyLFURoomBetweenWatermarks(t *testing.T) {
	p := fixedPolicy(1)
	p.ReportSSD("n1", between(2), 0)
	if ok, why := decideOnce(t, p, "early"); !ok || why != "room" {
		t.Fatalf("before any eviction: admitted=%v (%s), want room", ok, why)
	}
	p.ObserveSSDEviction([]string{"gone"})
	p.ReportSSD("n1", between(2), 0)
	for i := 0; i < 20; i++ {
		k := fmt.Sprintf("burst%d", i)
		p.AtPutEnd(candidate(k))
		if ok, why := decideOnce(t, p, k); ok || why != "lost" {
			t.Fatalf("one-off key %s between the watermarks after an eviction: admitted=%v (%s), want lost", k, ok, why)
		}
	}
	touch(p, "hot", 6)
	if ok, why := decideOnce(t, p, "hot"); !ok || why != "won" {
		t.Fatalf("a key of estimate %d against density 2 + margin 1: admitted=%v (%s), want won", p.Estimate("hot"), ok, why)
	}
	low := between(2)
	low.Used = 70 * obj
	p.ReportSSD("n1", low, 0)
	if ok, why := decideOnce(t, p, "cold-below-low"); !ok || why != "room" {
		t.Fatalf("below the low watermark: admitted=%v (%s), want room", ok, why)
	}

	free := NewTinyLFU(TinyLFUConfig{Margin: 1, MaxMargin: 1, MarginStep: -1, FreeRoom: true})
	free.ObserveSSDEviction([]string{"gone"})
	free.ReportSSD("n1", between(2), 0)
	if ok, why := decideOnce(t, free, "burst"); !ok || why != "room" {
		t.Fatalf("FreeRoom: admitted=%v (%s), want room", ok, why)
	}

	zero := fixedPolicy(0)
	zero.ObserveSSDEviction([]string{"gone"})
	zero.ReportSSD("n1", between(2), 0)
	if ok, why := decideOnce(t, zero, "burst"); !ok || why != "room" {
		t.Fatalf("margin 0: admitted=%v (%s), want room", ok, why)
	}
}

// TestTinyLFURoomFollowsTheMargin: the room test follows the ghosts. On
// recency-driven traffic (candidates the margin turned away come back,
// pushed-out objects do not) the margin falls to 0 and the room between
// the watermarks is free again; when pushed-out objects come back it
// rises and the room is tested again.
func TestTinyLFURoomFollowsTheMargin(t *testing.T) {
	r := newMarginRig(t)
	p := r.p
	p.ObserveSSDEviction([]string{"gone"})
	p.ReportSSD("n1", between(rigDensity), 0)
	if ok, _ := decideOnce(t, p, "probe0"); ok {
		t.Fatal("a one-off candidate took the room at margin 1")
	}
	for i := 0; p.Margin() > 0; i++ {
		if i > 64*adaptEvery {
			t.Fatalf("margin stuck at %v while rejected candidates come back and pushed-out ones do not", p.Margin())
		}
		r.back(r.reject(true))
		r.push()
	}
	p.ReportSSD("n1", between(rigDensity), 0)
	if ok, why := decideOnce(t, p, "probe1"); !ok || why != "room" {
		t.Fatalf("margin 0: admitted=%v (%s), want room", ok, why)
	}
	for i := 0; p.Margin() <= 0; i++ {
		if i > 64*adaptEvery {
			t.Fatal("margin stuck at 0 while pushed-out objects come back")
		}
		r.back(r.push())
		r.offer(true, between(rigDensity)) // the band's candidates do not come back
		r.p.ObserveLookup(r.key("tick"), DRAMHit, obj)
	}
	p.ReportSSD("n1", between(rigDensity), 0)
	if ok, why := decideOnce(t, p, "probe2"); ok || why != "lost" {
		t.Fatalf("margin %v: admitted=%v (%s), want lost", p.Margin(), ok, why)
	}
}
