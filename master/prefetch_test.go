package master

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/tierstore/tierstore/admission"
	"github.com/tierstore/tierstore/internal/errcode"
	"github.com/tierstore/tierstore/masterapi"
)

const pfObj = 64 << 10

// prefetchService: tinylfu promoting from the first access (the put), the
// given prefetch budget in MB/s, node "a" with slots objects of pfObj.
func prefetchService(t *testing.T, budget float64, slots int64) (*Service, *ManualClock) {
	t.Helper()
	s, clk := offloadService(t, func(c *Config) {
		c.AdmissionFlags.Policy = admission.PolicyTinyLFU
		c.AdmissionFlags.PromoteMinFreq = 1
		c.PrefetchBudget = budget
		c.DefaultKVLeaseTTL = time.Millisecond
	})
	mount(t, s, "a", slots*pfObj)
	return s, clk
}

// onSSD puts keys on "a" and offloads them (each keeps its DRAM replica).
func onSSD(t *testing.T, s *Service, keys ...string) {
	t.Helper()
	for _, k := range keys {
		put(t, s, k, pfObj, "a")
		if err := s.Enqueue(k); err != nil {
			t.Fatal(err)
		}
	}
	offloadAll(t, s, "a")
}

// ssdOnly leaves keys readable from SSD only.
func ssdOnly(t *testing.T, s *Service, clk *ManualClock, keys ...string) {
	t.Helper()
	onSSD(t, s, keys...)
	clk.Advance(time.Second) // past the put's lease
	if res, err := s.EvictDRAM(bg, keys, false); err != nil || res.Dropped != int64(len(keys)) {
		t.Fatalf("evict DRAM of %v: %+v %v", keys, res, err)
	}
}

// promos runs a heartbeat of "a" and returns its promotion tasks.
func promos(t *testing.T, s *Service) []masterapi.PromoteTask {
	t.Helper()
	rep, err := s.Heartbeat(bg, masterapi.HeartbeatRequest{Node: "a"})
	if err != nil {
		t.Fatal(err)
	}
	offloadAllTasks(t, s, rep.Tasks)
	return rep.Promotions
}

func offloadAllTasks(t *testing.T, s *Service, ts []masterapi.OffloadTask) {
	t.Helper()
	req := masterapi.NotifyRequest{Node: "a"}
	for _, task := range ts {
		req.Persisted = append(req.Persisted, masterapi.SSDObject{Key: task.Key, Size: task.Size, CRC: task.CRC})
	}
	if len(ts) > 0 {
		if _, err := s.NotifyOffloadSuccess(bg, req); err != nil {
			t.Fatal(err)
		}
	}
}

func pfInDRAM(t *testing.T, s *Service, key string) bool {
	t.Helper()
	info, err := s.GetReplicaList(masterapi.WithOffloadPath(bg), key)
	if err != nil {
		t.Fatalf("lookup %s: %v", key, err)
	}
	return info.Replicas[0].Kind == masterapi.DRAM
}

// TestPrefetchNeverEvictsHotter: a prefetch into a full DRAM evicts only
// objects colder than the one it brings in (and only ones that stay
// readable from SSD): with every DRAM object hotter, it evicts nothing and
// starts no promotion; once one DRAM object is colder, it evicts that one
// alone and the prefetched object is published in its place.
func TestPrefetchNeverEvictsHotter(t *testing.T) {
	s, clk := prefetchService(t, 512, 4)
	est := s.policy.(estimator)
	ssdOnly(t, s, clk, "c")
	hot := []string{"h0", "h1", "h2", "h3"}
	onSSD(t, s, hot...)
	for range 4 {
		for _, k := range hot {
			if _, err := s.ExistKey(bg, k); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, k := range hot {
		if est.Estimate(k) <= est.Estimate("c") {
			t.Fatalf("setup: %s estimate %d, c %d", k, est.Estimate(k), est.Estimate("c"))
		}
	}
	clk.Advance(time.Second) // the lookups' leases end: every h is evictable
	if n, err := s.Prefetch(bg, []string{"c"}); err != nil || n != 1 {
		t.Fatalf("prefetch c: %d queued, %v", n, err)
	}
	if ps := promos(t, s); len(ps) != 0 {
		t.Fatalf("a promotion started by evicting hotter objects: %+v", ps)
	}
	for _, k := range hot {
		if !pfInDRAM(t, s, k) {
			t.Fatalf("%s, hotter than c, left DRAM for its prefetch", k)
		}
	}
	if got := s.cnt.prefetchEvictions.Load(); got != 0 {
		t.Fatalf("%d prefetch evictions", got)
	}

	// h3 goes; a colder object w takes its place; c gets hotter than w.
	if err := s.Remove(bg, "h3", true); err != nil {
		t.Fatal(err)
	}
	onSSD(t, s, "w")
	for range 3 {
		if _, err := s.ExistKey(bg, "c"); err != nil {
			t.Fatal(err)
		}
	}
	if est.Estimate("w") >= est.Estimate("c") || est.Estimate("c") >= est.Estimate("h0") {
		t.Fatalf("setup: w %d, c %d, h0 %d", est.Estimate("w"), est.Estimate("c"), est.Estimate("h0"))
	}
	clk.Advance(time.Second)
	ps := promos(t, s) // c is still queued (it found no room once)
	if len(ps) != 1 || ps[0].Key != "c" {
		t.Fatalf("promotions %+v, want c", ps)
	}
	if pfInDRAM(t, s, "w") {
		t.Fatal("w, colder than c, kept its DRAM replica")
	}
	for _, k := range hot[:3] {
		if !pfInDRAM(t, s, k) {
			t.Fatalf("%s, hotter than c, left DRAM for its prefetch", k)
		}
	}
	if errs, err := s.PromoteEnd(bg, "a", []masterapi.PromoteResult{{Key: "c", PutToken: ps[0].PutToken, Loaded: true}}); err != nil || errs[0] != nil {
		t.Fatalf("promote end: %v %v", errs, err)
	}
	if !pfInDRAM(t, s, "c") {
		t.Fatal("c not in DRAM after its prefetch")
	}
	if got := s.cnt.prefetchEvictions.Load(); got != 1 {
		t.Fatalf("%d prefetch evictions, want 1 (w)", got)
	}
}

// TestPrefetchStopsAtBudget: the budget is a second's worth of its rate;
// prefetches beyond it are refused (nothing queued) until time refills it.
func TestPrefetchStopsAtBudget(t *testing.T) {
	budget := 2.5 * pfObj / 1e6 // MB/s: two objects and a half per second
	s, clk := prefetchService(t, budget, 16)
	keys := []string{"k0", "k1", "k2", "k3"}
	ssdOnly(t, s, clk, keys...)
	if n, err := s.Prefetch(bg, keys); err != nil || n != 2 {
		t.Fatalf("prefetch of 4 with a budget of 2.5: %d queued, %v", n, err)
	}
	if got := s.cnt.prefetchOverBudget.Load(); got != 2 {
		t.Fatalf("%d refused by the budget, want 2", got)
	}
	if ps := promos(t, s); len(ps) != 2 {
		t.Fatalf("%d promotions, want 2", len(ps))
	}
	if n, _ := s.Prefetch(bg, keys[2:]); n != 0 {
		t.Fatalf("%d queued with the budget spent", n)
	}
	clk.Advance(time.Second)
	if n, err := s.Prefetch(bg, keys[2:]); err != nil || n != 2 {
		t.Fatalf("prefetch after a second: %d queued, %v", n, err)
	}
}

// TestPrefetchMissingKeyIsNoOp: a prefetch of a key that does not exist
// (or is in DRAM already) queues nothing, creates nothing, spends no budget
// and wakes no node; a malformed key is an error.
func TestPrefetchMissingKeyIsNoOp(t *testing.T) {
	budget := 1.5 * pfObj / 1e6
	s, clk := prefetchService(t, budget, 16)
	put(t, s, "dram", pfObj, "a")
	ssdOnly(t, s, clk, "disk")
	before, _ := s.Stats(bg)
	if n, err := s.Prefetch(bg, []string{"missing", "dram"}); err != nil || n != 0 {
		t.Fatalf("prefetch of a missing key and a DRAM one: %d queued, %v", n, err)
	}
	after, _ := s.Stats(bg)
	if after.Objects != before.Objects {
		t.Fatalf("objects %d -> %d", before.Objects, after.Objects)
	}
	if pressed, err := s.WaitOffload(bg, "a", 0); err != nil || pressed {
		t.Fatalf("node woken by a no-op prefetch: %v %v", pressed, err)
	}
	if n, err := s.Prefetch(bg, []string{"disk"}); err != nil || n != 1 {
		t.Fatalf("the budget of one object was spent by the no-ops: %d, %v", n, err)
	}
	if _, err := s.Prefetch(bg, []string{""}); !errors.Is(err, errcode.ErrInvalidKey) {
		t.Fatalf("prefetch of an empty key: %v", err)
	}
}

// TestRemovalDuringPrefetch: a forced Remove while the prefetch is queued,
// or while the node loads it, leaves nothing: no object, no DRAM range, no
// queued promotion (the node's late answer is refused as a stale put).
func TestRemovalDuringPrefetch(t *testing.T) {
	for _, when := range []string{"queued", "loading"} {
		t.Run(when, func(t *testing.T) {
			s, clk := prefetchService(t, 512, 4)
			ssdOnly(t, s, clk, "p")
			if n, err := s.Prefetch(bg, []string{"p"}); err != nil || n != 1 {
				t.Fatalf("prefetch: %d, %v", n, err)
			}
			var ps []masterapi.PromoteTask
			if when == "loading" {
				if ps = promos(t, s); len(ps) != 1 {
					t.Fatalf("%d promotions", len(ps))
				}
			}
			if err := s.Remove(bg, "p", true); err != nil {
				t.Fatal(err)
			}
			if when == "loading" {
				errs, err := s.PromoteEnd(bg, "a", []masterapi.PromoteResult{{Key: "p", PutToken: ps[0].PutToken, Loaded: true}})
				if err != nil || !errors.Is(errs[0], masterapi.ErrStalePut) {
					t.Fatalf("late answer of the removed prefetch: %v %v", errs, err)
				}
			} else if ps := promos(t, s); len(ps) != 0 {
				t.Fatalf("a removed key was promoted: %+v", ps)
			}
			if ok, err := s.ExistKey(bg, "p"); ok || err != nil {
				t.Fatalf("exists after the removal: %v %v", ok, err)
			}
			if st, _ := s.Stats(bg); st.SegmentUsed != 0 || st.Objects != 0 {
				t.Fatalf("left behind: %d bytes of DRAM, %d objects", st.SegmentUsed, st.Objects)
			}
			if s.lookupNode("a").promo.has("p") {
				t.Fatal("the promotion is still queued")
			}
		})
	}
}

// TestExistKeyHitOnSSDPrefetches: a lookup that hits an SSD-only object
// queues its prefetch and wakes its node at once.
func TestExistKeyHitOnSSDPrefetches(t *testing.T) {
	s, clk := prefetchService(t, 512, 4)
	ssdOnly(t, s, clk, "x")
	res, err := s.BatchExistKey(bg, []string{"x", "nope"})
	if err != nil || !res[0].Exists || res[1].Exists {
		t.Fatalf("batch exists: %+v %v", res, err)
	}
	if pressed, err := s.WaitOffload(bg, "a", time.Hour); err != nil || !pressed {
		t.Fatalf("node not woken by the prefetch of a lookup: %v %v", pressed, err)
	}
	if ps := promos(t, s); len(ps) != 1 || ps[0].Key != "x" {
		t.Fatalf("promotions %+v, want x", ps)
	}
	if got := s.cnt.prefetchQueued.Load(); got != 1 {
		t.Fatalf("%d prefetches queued, want 1", got)
	}
}

// TestPrefetchWaitsForItsVictimsOffload: a prefetch that finds DRAM full
// of colder objects not yet on SSD queues the victim's offload, which goes
// out in the same heartbeat reply; it does not press its node again while
// that offload is in flight (a try then would find no room and queue yet
// another victim), and is started at the first heartbeat after the victim
// is on SSD.
func TestPrefetchWaitsForItsVictimsOffload(t *testing.T) {
	s, clk := prefetchService(t, 512, 2)
	ssdOnly(t, s, clk, "c")
	put(t, s, "d0", pfObj, "a") // DRAM only, put once: colder than c
	clk.Advance(time.Millisecond)
	put(t, s, "d1", pfObj, "a") // used after d0
	clk.Advance(time.Second)    // past the puts' leases
	if res, err := s.BatchExistKey(bg, []string{"c"}); err != nil || !res[0].Exists {
		t.Fatalf("exists c: %+v %v", res, err)
	}
	rep, err := s.Heartbeat(bg, masterapi.HeartbeatRequest{Node: "a"})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Promotions) != 0 || len(rep.Tasks) != 1 || rep.Tasks[0].Key != "d0" {
		t.Fatalf("first heartbeat: promotions %+v, tasks %+v; want none and the victim d0's offload", rep.Promotions, rep.Tasks)
	}
	if pressed, err := s.WaitOffload(bg, "a", 0); err != nil || pressed {
		t.Fatalf("node pressed while the victim's offload is in flight: %v %v", pressed, err)
	}
	offloadAllTasks(t, s, rep.Tasks)
	if pressed, err := s.WaitOffload(bg, "a", 0); err != nil || !pressed {
		t.Fatalf("node not pressed once the victim is on SSD: %v %v", pressed, err)
	}
	ps := promos(t, s)
	if len(ps) != 1 || ps[0].Key != "c" {
		t.Fatalf("promotions %+v, want c", ps)
	}
	if pfInDRAM(t, s, "d0") || !pfInDRAM(t, s, "d1") {
		t.Fatal("the prefetch evicted another object than its one victim d0")
	}
}

// TestPromotionVictimScanVisitsDRAMObjectsOnly: a promotion into a full
// DRAM looks for victims among the objects with a DRAM replica only, not
// among every object (most of a large master's objects are on SSD only,
// and each promotion without free room would scan them all).
func TestPromotionVictimScanVisitsDRAMObjectsOnly(t *testing.T) {
	s, clk := prefetchService(t, 512, 4)
	var cold []string
	for i := range 200 {
		cold = append(cold, fmt.Sprint("ssd", i))
	}
	for i := 0; i < len(cold); i += 4 {
		ssdOnly(t, s, clk, cold[i:i+4]...)
	}
	onSSD(t, s, "d0", "d1", "d2", "d3") // DRAM full, every one evictable
	before := s.scanVisits.Load()
	for range 3 { // lookups that hit an SSD-only object prefetch it
		if _, err := s.ExistKey(bg, "ssd7"); err != nil {
			t.Fatal(err)
		}
	}
	clk.Advance(time.Second)
	ps := promos(t, s)
	if len(ps) != 1 || ps[0].Key != "ssd7" {
		t.Fatalf("promotions %+v, want ssd7", ps)
	}
	if visits := s.scanVisits.Load() - before; visits == 0 || visits > 4 {
		t.Fatalf("the victim scan visited %d objects; want the 4 with a DRAM replica (of 204)", visits)
	}
}
