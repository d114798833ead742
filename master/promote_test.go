package master

import (
	"testing"
	"time"

	"github.com/tierstore/tierstore/admission"
	"github.com/tierstore/tierstore/masterapi"
)

// fullSSD is a report of node "a" whose SSD is full of buckets worth more
// than any candidate below frequency 9: tinylfu refuses every DRAM victim.
var fullSSD = masterapi.SSDReport{High: 1 << 20, Used: 1 << 20,
	Victims: []masterapi.SSDVictim{{FileBytes: 1 << 20, Span: 1 << 20, Worth: 9 << 20}}}

// promoteSetup: tinylfu promoting from the first access on node "a" with
// eight DRAM slots, an SSD-only object "c", and DRAM full of the DRAM-only
// objects d0..d7, all evictable (their leases over).
func promoteSetup(t *testing.T) (*Service, *ManualClock, []string) {
	t.Helper()
	s, clk := prefetchService(t, 0, 8)
	ssdOnly(t, s, clk, "c")
	dram := []string{"d0", "d1", "d2", "d3", "d4", "d5", "d6", "d7"}
	for _, k := range dram {
		put(t, s, k, pfObj, "a")
	}
	clk.Advance(time.Second)
	return s, clk, dram
}

// readable checks that every key still has a readable replica (looking
// at the metadata: a lookup would grant a lease).
func readable(t *testing.T, s *Service, keys ...string) {
	t.Helper()
	for _, k := range keys {
		sh := s.shardOf(k)
		sh.mu.Lock()
		o := s.peekObj(sh, k)
		ok := o != nil && (o.readableDRAM() || o.readableSSD())
		sh.mu.Unlock()
		if !ok {
			t.Fatalf("%s lost: no readable replica", k)
		}
	}
}

// TestPromotionNeverDropsDRAMOnly (issue 23 item 4): a promotion needs
// room in a DRAM full of objects that exist nowhere else, and the
// admission policy refuses to offload them (the SSD is full of buckets
// of more worth). The promotion brings in a copy of an object the SSD
// already holds, so it must not drop any of them: it waits instead. Once
// one DRAM object also has an SSD copy, the promotion takes that one's
// room, and every object stays readable.
func TestPromotionNeverDropsDRAMOnly(t *testing.T) {
	s, clk, dram := promoteSetup(t)
	s.ReportSSD("a", fullSSD)
	s.collectVictims(s.now(), 0) // a scan drops c's entry from the DRAM candidates: c is on SSD only
	if dramSetKeys(s)["c"] {
		t.Fatal("c, on SSD only, is among the DRAM eviction candidates after a scan")
	}
	if _, err := s.GetReplicaList(bg, "c"); err != nil { // an SSD hit: c is queued for promotion
		t.Fatal(err)
	}
	if got := s.cnt.promotionsQueued.Load(); got != 1 {
		t.Fatalf("%d promotions queued, want 1", got)
	}
	clk.Advance(time.Second)
	p := s.policy.(*admission.TinyLFU)
	for range maxPromoTries {
		before := p.Stats().Decisions["lost"]
		if ps := promos(t, s); len(ps) != 0 {
			t.Fatalf("a promotion started in a DRAM holding only DRAM-only objects: %+v", ps)
		}
		readable(t, s, dram...)
		if asked := p.Stats().Decisions["lost"] - before; asked == 0 || asked > maxPromoAsks {
			t.Fatalf("one promotion attempt put %d DRAM-only victims to the policy, want 1 to %d", asked, maxPromoAsks)
		}
	}
	if got := s.cnt.promotionsNoRoom.Load(); got != 1 {
		t.Fatalf("promotions given up for room: %d, want 1", got)
	}
	if s.cnt.promotionsSpared.Load() == 0 {
		t.Fatal("no DRAM-only victim counted as spared")
	}

	// d0 gets an SSD copy (kept in DRAM): it is the room of c's promotion.
	if err := s.Enqueue("d0"); err != nil {
		t.Fatal(err)
	}
	offloadAll(t, s, "a")
	clk.Advance(time.Second)
	if _, err := s.GetReplicaList(bg, "c"); err != nil {
		t.Fatal(err)
	}
	clk.Advance(time.Second)
	ps := promos(t, s)
	if len(ps) != 1 || ps[0].Key != "c" {
		t.Fatalf("promotions %+v, want c", ps)
	}
	if pfInDRAM(t, s, "d0") {
		t.Fatal("d0 kept its DRAM replica: where did c's room come from?")
	}
	readable(t, s, dram...)
	if errs, err := s.PromoteEnd(bg, "a", []masterapi.PromoteResult{{Key: "c", PutToken: ps[0].PutToken, Loaded: true}}); err != nil || errs[0] != nil {
		t.Fatalf("promote end: %v %v", errs, err)
	}
	if !pfInDRAM(t, s, "c") {
		t.Fatal("c not in DRAM after its promotion")
	}
	if got := s.cnt.promotionEvictions.Load(); got != 1 {
		t.Fatalf("%d promotion evictions, want 1 (d0)", got)
	}
	if !dramSetKeys(s)["c"] {
		t.Fatal("the promoted c is not among the DRAM eviction candidates: the scans would never evict it")
	}
}

// TestPromotionOffloadsAdmittedDRAMOnly: when the admission policy admits
// a DRAM-only victim to SSD, the promotion queues its offload (nothing is
// lost) and takes its room once it is on SSD.
func TestPromotionOffloadsAdmittedDRAMOnly(t *testing.T) {
	s, clk, dram := promoteSetup(t)
	s.ReportSSD("a", masterapi.SSDReport{High: 1 << 30}) // room: tinylfu admits every victim
	if _, err := s.GetReplicaList(bg, "c"); err != nil {
		t.Fatal(err)
	}
	clk.Advance(time.Second)
	var ps []masterapi.PromoteTask
	for hb := 0; len(ps) == 0; hb++ {
		if hb == maxPromoTries {
			t.Fatalf("no promotion after %d heartbeats", hb)
		}
		ps = promos(t, s) // (its offload tasks are answered: the victims reach SSD)
		readable(t, s, dram...)
	}
	if len(ps) != 1 || ps[0].Key != "c" {
		t.Fatalf("promotions %+v, want c", ps)
	}
	if s.cnt.promotionEvictions.Load() != 1 || s.cnt.promotionsSpared.Load() != 0 {
		t.Fatalf("promotion evictions %d (want 1), spared %d (want 0)", s.cnt.promotionEvictions.Load(), s.cnt.promotionsSpared.Load())
	}
}
