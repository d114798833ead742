package master

import (
	"errors"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/tierstore/tierstore/admission"
	"github.com/tierstore/tierstore/internal/errcode"
	"github.com/tierstore/tierstore/internal/keyspec"
	"github.com/tierstore/tierstore/masterapi"
)

func TestPutLookupBasics(t *testing.T) {
	s, _ := testService(t, nil)
	mount(t, s, "a", 1<<20)
	r, err := s.PutStart(bg, masterapi.PutStartRequest{Key: "k", Size: 1000, CRC: 42})
	if err == nil && r.PutToken == 0 {
		t.Fatal("PutStart answered no put token")
	}
	if err != nil || r.Kind != masterapi.DRAM || r.Status != masterapi.Processing || r.Node != "a" || r.Length != 1000 {
		t.Fatalf("PutStart = %+v, %v", r, err)
	}
	if ok, _ := s.ExistKey(bg, "k"); ok {
		t.Fatal("processing object must not exist for readers")
	}
	_, err = s.GetReplicaList(bg, "k")
	mustIs(t, err, errcode.ErrReplicaNotReady)
	_, err = s.PutStart(bg, masterapi.PutStartRequest{Key: "k", Size: 1000})
	mustIs(t, err, errcode.ErrObjectExists)
	if err := s.PutEnd(bg, "k", r.PutToken); err != nil {
		t.Fatal(err)
	}
	info, err := s.GetReplicaList(bg, "k")
	if err != nil || info.Size != 1000 || info.CRC != 42 || len(info.Replicas) != 1 || info.Replicas[0].Status != masterapi.Complete {
		t.Fatalf("GetReplicaList = %+v, %v", info, err)
	}
	_, err = s.PutStart(bg, masterapi.PutStartRequest{Key: "k", Size: 1000})
	mustIs(t, err, errcode.ErrObjectExists)
	_, err = s.GetReplicaList(bg, "missing")
	mustIs(t, err, errcode.ErrObjectNotFound)
	_, err = s.PutStart(bg, masterapi.PutStartRequest{Key: "", Size: 1})
	mustIs(t, err, errcode.ErrInvalidKey)
	_, err = s.PutStart(bg, masterapi.PutStartRequest{Key: string(make([]byte, keyspec.MaxLen+1)), Size: 1})
	mustIs(t, err, errcode.ErrInvalidKey)
	_, err = s.PutStart(bg, masterapi.PutStartRequest{Key: "z", Size: 0})
	mustIs(t, err, errcode.ErrInvalidParams)

	// Revoke frees the space.
	rr, err := s.PutStart(bg, masterapi.PutStartRequest{Key: "r", Size: 4096})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.PutRevoke(bg, "r", rr.PutToken); err != nil {
		t.Fatal(err)
	}
	_, err = s.GetReplicaList(bg, "r")
	mustIs(t, err, errcode.ErrObjectNotFound)
	st, _ := s.Stats(bg)
	if st.Objects != 1 || st.SegmentUsed != alignUp(1000) {
		t.Fatalf("stats %+v", st)
	}
}

func TestAbandonedPutReclaimed(t *testing.T) {
	s, clk := testService(t, func(c *Config) { c.PutStartDiscardTimeout = 30 * time.Second; c.ClientTTL = time.Hour })
	mount(t, s, "a", 1<<20)
	if _, err := s.PutStart(bg, masterapi.PutStartRequest{Key: "k", Size: 1000}); err != nil {
		t.Fatal(err)
	}
	clk.Advance(29 * time.Second)
	s.Tick()
	_, err := s.GetReplicaList(bg, "k")
	mustIs(t, err, errcode.ErrReplicaNotReady)
	// Reclaimed by a sweep within a quarter timeout after the deadline.
	clk.Advance(30*time.Second/4 + time.Second)
	s.Tick()
	_, err = s.GetReplicaList(bg, "k")
	mustIs(t, err, errcode.ErrObjectNotFound)
	if st, _ := s.Stats(bg); st.SegmentUsed != 0 || st.Objects != 0 {
		t.Fatalf("space not reclaimed: %+v", st)
	}
}

// TestAbandonedPutReclaimVisitsDRAMObjectsOnly: with no dead replica, the
// reclaim of abandoned puts visits the objects that have a DRAM replica,
// not the SSD-only ones (at tens of millions of objects, most of them on
// SSD only, a scan of every object every quarter of
// put_start_discard_timeout costs seconds of CPU under steady puts); the
// abandoned put is reclaimed and the others are untouched.
func TestAbandonedPutReclaimVisitsDRAMObjectsOnly(t *testing.T) {
	s, clk := offloadService(t, func(c *Config) {
		c.PutStartDiscardTimeout = 30 * time.Second
		c.DefaultKVLeaseTTL = time.Millisecond
	})
	mount(t, s, "a", 64<<20)
	var cold []string
	for i := range 200 {
		cold = append(cold, fmt.Sprint("ssd", i))
	}
	ssdOnly(t, s, clk, cold...)
	for i := range 3 {
		put(t, s, fmt.Sprint("dram", i), 1000, "")
	}
	if _, err := s.PutStart(bg, masterapi.PutStartRequest{Key: "abandoned", Size: 1000}); err != nil {
		t.Fatal(err)
	}
	clk.Advance(31 * time.Second)
	before := s.scanVisits.Load()
	s.Tick()
	if visits := s.scanVisits.Load() - before; visits > 4 {
		t.Fatalf("the reclaim visited %d objects; want at most the 4 with a DRAM replica (of 204)", visits)
	}
	_, err := s.GetReplicaList(bg, "abandoned")
	mustIs(t, err, errcode.ErrObjectNotFound)
	for _, k := range append(cold, "dram0", "dram1", "dram2") {
		if _, err := s.GetReplicaList(bg, k); err != nil {
			t.Fatalf("%s after the reclaim: %v", k, err)
		}
	}
	if err := s.Check(); err != nil {
		t.Fatal(err)
	}
}

// TestLeaseBlocksRemoveAndEviction: an object under lease survives eviction
// and non-forced Remove; forced Remove succeeds; after the lease it goes.
func TestLeaseBlocksRemoveAndEviction(t *testing.T) {
	s, clk := testService(t, func(c *Config) { c.EvictionRatio = 1 })
	mount(t, s, "a", 1<<20)
	put(t, s, "leased", 100, "")
	put(t, s, "free", 100, "")
	if ok, _ := s.ExistKey(bg, "leased"); !ok {
		t.Fatal("lookup miss")
	}
	err := s.Remove(bg, "leased", false)
	mustIs(t, err, errcode.ErrObjectHasLease)
	if n := s.EvictNow(); n != 1 {
		t.Fatalf("evicted %d, want only the unleased one", n)
	}
	if _, err := s.GetReplicaList(bg, "leased"); err != nil { // renews the lease
		t.Fatalf("leased object evicted: %v", err)
	}
	_, err = s.GetReplicaList(bg, "free")
	mustIs(t, err, errcode.ErrObjectNotFound)
	if err := s.Remove(bg, "leased", true); err != nil {
		t.Fatalf("forced remove: %v", err)
	}
	_, err = s.GetReplicaList(bg, "leased")
	mustIs(t, err, errcode.ErrObjectNotFound)

	put(t, s, "x", 100, "")
	s.ExistKey(bg, "x")
	mustIs(t, s.Remove(bg, "x", false), errcode.ErrObjectHasLease)
	clk.Advance(s.cfg.DefaultKVLeaseTTL + time.Millisecond)
	if err := s.Remove(bg, "x", false); err != nil {
		t.Fatalf("remove after lease expiry: %v", err)
	}
}

// TestPinsOrderEviction: soft-pinned objects go after unpinned ones; hard
// pinned objects never go.
func TestPinsOrderEviction(t *testing.T) {
	s, _ := testService(t, func(c *Config) { c.EvictionRatio = 0.34 })
	mount(t, s, "a", 1<<20)
	for i := 0; i < 3; i++ {
		for _, kind := range []string{"soft", "plain", "hard"} {
			k := fmt.Sprintf("%s%d", kind, i)
			putWith(t, s, masterapi.PutStartRequest{Key: k, Size: 64, SoftPin: kind == "soft", HardPin: kind == "hard"})
		}
	}
	alive := func(k string) bool { _, err := s.GetReplicaList(masterapi.WithOffloadPath(bg), k); return err == nil }
	// 6 evictable (3 plain, 3 soft): ratio 0.34 -> 3 per round.
	if n := s.EvictNow(); n != 3 {
		t.Fatalf("round 1 evicted %d", n)
	}
	for i := 0; i < 3; i++ {
		if alive(fmt.Sprintf("plain%d", i)) {
			t.Fatalf("plain%d survived while soft-pinned objects remain", i)
		}
		if !alive(fmt.Sprintf("soft%d", i)) {
			t.Fatalf("soft%d evicted before unpinned objects", i)
		}
	}
}

func TestHardPinNeverEvicted(t *testing.T) {
	s, clk := testService(t, func(c *Config) { c.EvictionRatio = 1 })
	mount(t, s, "a", 1<<20)
	for i := 0; i < 5; i++ {
		k := fmt.Sprintf("hard%d", i)
		putWith(t, s, masterapi.PutStartRequest{Key: k, Size: 64, HardPin: true})
	}
	for r := 0; r < 3; r++ {
		clk.Advance(time.Hour)
		if n := s.EvictNow(); n != 0 {
			t.Fatalf("evicted %d hard-pinned objects", n)
		}
	}
}

// TestOldestLeaseFirst: among unpinned objects, the oldest lease goes first.
func TestOldestLeaseFirst(t *testing.T) {
	s, clk := testService(t, func(c *Config) { c.EvictionRatio = 0.5 })
	mount(t, s, "a", 1<<20)
	for i := 0; i < 4; i++ {
		put(t, s, fmt.Sprint(i), 64, "")
	}
	// Leases granted in order 3,2,1,0; all expired by the time we evict.
	for i := 3; i >= 0; i-- {
		s.ExistKey(bg, fmt.Sprint(i))
		clk.Advance(time.Second)
	}
	clk.Advance(time.Hour)
	if n := s.EvictNow(); n != 2 {
		t.Fatalf("evicted %d", n)
	}
	for _, k := range []string{"3", "2"} {
		if _, err := s.GetReplicaList(bg, k); err == nil {
			t.Fatalf("%s (oldest lease) survived", k)
		}
	}
	for _, k := range []string{"1", "0"} {
		if _, err := s.GetReplicaList(bg, k); err != nil {
			t.Fatalf("%s (newest lease) evicted: %v", k, err)
		}
	}
}

// TestPutsBeyondSegmentEvict: puts totalling far more than the segment
// succeed by evicting older objects.
func TestPutsBeyondSegmentEvict(t *testing.T) {
	s, _ := testService(t, nil)
	const seg, obj = 64 << 10, 4 << 10
	mount(t, s, "a", seg)
	for i := 0; i < 10*seg/obj; i++ {
		put(t, s, fmt.Sprint("k", i), obj, "")
	}
	st, _ := s.Stats(bg)
	if st.Evictions == 0 || st.SegmentUsed > seg {
		t.Fatalf("stats %+v", st)
	}
	if _, err := s.GetReplicaList(bg, fmt.Sprint("k", 10*seg/obj-1)); err != nil {
		t.Fatalf("newest object missing: %v", err)
	}
	// Everything leased: the next put cannot evict and fails cleanly.
	s.BatchExistKey(bg, allKeys(s))
	_, err := s.PutStart(bg, masterapi.PutStartRequest{Key: "big", Size: seg})
	mustIs(t, err, errcode.ErrNoAvailableHandle)
}

func allKeys(s *Service) []string {
	var out []string
	for i := range s.shards {
		s.shards[i].mu.Lock()
		for k := range s.everyObject(&s.shards[i]) {
			out = append(out, k)
		}
		s.shards[i].mu.Unlock()
	}
	return out
}

// TestMooncake4508Replay replays Mooncake #4508: lookup hit, the node holding
// the only replica expires and the stale-handle sweep runs, then load. Within
// the lease the load answers REPLICA_IS_GONE (-712), not OBJECT_NOT_FOUND
// (-704); with a SSD replica on a live node it succeeds from it; after
// the lease the metadata goes.
func TestMooncake4508Replay(t *testing.T) {
	s, clk := testService(t, func(c *Config) {
		c.EnableOffload = true
		c.ClientTTL = 2 * time.Second
		c.DefaultKVLeaseTTL = 5 * time.Second
	})
	mount(t, s, "a", 1<<20)
	mount(t, s, "b", 1<<20)
	put(t, s, "only-dram", 1000, "a")
	put(t, s, "also-ssd", 1000, "a")
	// Node b holds "also-ssd" on its SSD too.
	if errs, err := s.ReRegisterSSDObjects(bg, "b", []masterapi.SSDObject{{Key: "also-ssd", Size: 1000, CRC: crcOf("also-ssd")}}); err != nil || errs[0] != nil {
		t.Fatal(err, errs)
	}

	for _, k := range []string{"only-dram", "also-ssd"} { // lookup hit
		if ok, err := s.ExistKey(bg, k); !ok || err != nil {
			t.Fatalf("lookup %s: %v %v", k, ok, err)
		}
	}
	// Node a goes silent; b keeps pinging.
	clk.Advance(s.cfg.ClientTTL/2 + time.Millisecond)
	s.Ping(bg, "b")
	clk.Advance(s.cfg.ClientTTL/2 + time.Millisecond)
	s.Tick() // expires a, runs the sweep
	if st, _ := s.Stats(bg); st.ExpiredNodes != 1 {
		t.Fatalf("node a not expired: %+v", st)
	}
	_, err := s.GetReplicaList(bg, "only-dram") // load
	if errors.Is(err, errcode.ErrObjectNotFound) || !errors.Is(err, errcode.ErrReplicaGone) {
		t.Fatalf("load after hit and node death: %v, want REPLICA_IS_GONE", err)
	}
	if errcode.Of(err) != -712 {
		t.Fatalf("code %d", errcode.Of(err))
	}
	info, err := s.GetReplicaList(bg, "also-ssd")
	if err != nil || len(info.Replicas) != 1 || info.Replicas[0].Kind != masterapi.SSD || info.Replicas[0].Node != "b" {
		t.Fatalf("load with a live SSD replica: %s %v", kinds(info), err)
	}
	// Once the lease expires the sweep clears the dead replica and the
	// metadata of the object that has nothing else.
	clk.Advance(s.cfg.DefaultKVLeaseTTL + time.Millisecond)
	s.Ping(bg, "b")
	s.Tick()
	_, err = s.GetReplicaList(bg, "only-dram")
	mustIs(t, err, errcode.ErrObjectNotFound)
	if _, err := s.GetReplicaList(bg, "also-ssd"); err != nil {
		t.Fatalf("object with a live SSD replica lost: %v", err)
	}
	// Node a comes back: told to remount.
	if p, _ := s.Ping(bg, "a"); p.Status != masterapi.NeedRemount {
		t.Fatalf("ping from expired node: %v", p.Status)
	}
}

// TestMooncake4508Interleavings replaces a goroutine stress test with every
// interleaving, deterministically (manual clock, one goroutine): a lookup
// hit, then every sequence of up to three operations among node expiries,
// remounts, sweeps, re-puts, removes, DRAM and SSD evictions, reconciles,
// bad-replica reports, offload failures and time passing inside the lease,
// then the load. Within the lease the load never answers OBJECT_NOT_FOUND
// (Mooncake #4508, invariant 4); it succeeds unless an operation really lost
// bytes (a node died or restarted, a replica was reported bad or missing),
// in which case REPLICA_IS_GONE is allowed. Each run ends with Check. It
// guards issue 9 item 7 as a whole.
func TestMooncake4508Interleavings(t *testing.T) {
	ops := lease4508Ops()
	var seqs [][]int
	var gen func(prefix []int)
	gen = func(prefix []int) {
		seqs = append(seqs, append([]int(nil), prefix...))
		if len(prefix) == 3 {
			return
		}
		for i := range ops {
			gen(append(prefix, i))
		}
	}
	gen(nil)
	runs, gone := 0, 0
	for _, onDisk := range []bool{false, true} {
		for _, seq := range seqs {
			g, err := run4508(t, ops, seq, onDisk)
			runs++
			if g {
				gone++
			}
			if err != nil {
				names := make([]string, len(seq))
				for i, o := range seq {
					names[i] = ops[o].name
				}
				t.Fatalf("SSD copy %v, after lookup hit then %v: %v", onDisk, names, err)
			}
		}
	}
	t.Logf("%d interleavings, %d answered REPLICA_IS_GONE", runs, gone)
	if gone == 0 {
		t.Fatal("no interleaving lost bytes: the test does not exercise REPLICA_IS_GONE")
	}
}

// op4508 is one operation between a lookup hit and its load; loses says
// that it may really lose the object's bytes.
type op4508 struct {
	name  string
	loses bool
	do    func(e *env4508)
}

// env4508 is one interleaving's world: master, clock, the hit's replica list.
type env4508 struct {
	s    *Service
	clk  *ManualClock
	list masterapi.ObjectInfo
	inc  int
}

func lease4508Ops() []op4508 {
	return []op4508{
		{"expire n0 (DRAM holder)", true, func(e *env4508) { e.s.ExpireNode("n0") }},
		{"expire n1 (SSD holder)", true, func(e *env4508) { e.s.ExpireNode("n1") }},
		{"sweep", false, func(e *env4508) { e.s.Tick() }},
		{"n0 restarts and remounts", true, func(e *env4508) {
			e.inc++
			e.s.MountSegment(bg, masterapi.MountRequest{Node: "n0", Endpoint: "n0:1", Segment: "seg0", Size: 1 << 20, Incarnation: fmt.Sprint("inc", e.inc)})
		}},
		{"re-put", false, func(e *env4508) {
			if r, err := e.s.PutStart(bg, masterapi.PutStartRequest{Key: "k", Size: 256, CRC: crcOf("k"), PreferredNode: "n0"}); err == nil {
				e.s.PutEnd(bg, "k", r.PutToken)
			}
		}},
		{"remove", false, func(e *env4508) { e.s.Remove(bg, "k", false) }},
		{"remove all", false, func(e *env4508) { e.s.RemoveAll(bg, false) }},
		{"DRAM eviction", false, func(e *env4508) { e.s.EvictNow() }},
		{"EvictDRAM", false, func(e *env4508) { e.s.EvictDRAM(bg, nil, true) }},
		{"SSD eviction on n1", false, func(e *env4508) { e.s.EvictSSDReplica(bg, "n1", []string{"k"}) }},
		{"reconcile n1 (holds nothing)", true, func(e *env4508) { reconcileAll(e.s, "n1", nil) }},
		{"bad-replica reports", true, func(e *env4508) {
			for _, r := range e.list.Replicas {
				e.s.ReportBadReplica(bg, "k", e.list.CRC, r)
			}
		}},
		{"offload failure from n1", true, func(e *env4508) {
			e.s.NotifyOffloadSuccess(bg, masterapi.NotifyRequest{Node: "n1", Failed: []masterapi.OffloadFailure{{Key: "k", Reason: "not on SSD"}}})
		}},
		{"1s passes", false, func(e *env4508) { e.clk.Advance(time.Second) }},
	}
}

// run4508 runs one interleaving and returns whether the load answered
// REPLICA_IS_GONE, or what went wrong.
func run4508(t *testing.T, ops []op4508, seq []int, onDisk bool) (gone bool, _ error) {
	clk := NewManualClock(t0)
	cfg := DefaultConfig()
	cfg.Clock, cfg.MonitorInterval, cfg.Shards = clk, 0, 1
	cfg.Logger = slog.New(slog.DiscardHandler)
	cfg.Admission, cfg.EvictionRatio, cfg.PutStartMaxWait = admission.None{}, 1, 0
	cfg.DefaultKVLeaseTTL, cfg.ClientTTL = 5*time.Second, time.Hour
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	mount(t, s, "n0", 1<<20)
	mount(t, s, "n1", 1<<20)
	put(t, s, "k", 256, "n0")
	if onDisk {
		s.ReRegisterSSDObjects(bg, "n1", []masterapi.SSDObject{{Key: "k", Size: 256, CRC: crcOf("k")}})
	}
	e := &env4508{s: s, clk: clk}
	if e.list, err = s.GetReplicaList(bg, "k"); err != nil { // the lookup hit
		t.Fatal(err)
	}
	loses := false
	for _, o := range seq {
		ops[o].do(e)
		loses = loses || ops[o].loses
	}
	_, err = s.GetReplicaList(bg, "k") // the load, inside the lease
	switch {
	case errors.Is(err, errcode.ErrReplicaGone) && loses:
		gone = true
	case err != nil:
		return false, fmt.Errorf("load answered %v", err)
	}
	return gone, s.Check()
}

// TestExpiryLeavesOtherNodesAlone: a node's expiry removes only its own
// replicas.
func TestExpiryLeavesOtherNodesAlone(t *testing.T) {
	s, clk := testService(t, nil)
	mount(t, s, "a", 1<<20)
	mount(t, s, "b", 1<<20)
	put(t, s, "ka", 100, "a")
	put(t, s, "kb", 100, "b")
	s.ReRegisterSSDObjects(bg, "b", []masterapi.SSDObject{{Key: "ka", Size: 100, CRC: crcOf("ka")}})
	s.ReRegisterSSDObjects(bg, "a", []masterapi.SSDObject{{Key: "kb", Size: 100, CRC: crcOf("kb")}})
	clk.Advance(s.cfg.ClientTTL / 2)
	s.Ping(bg, "b")
	clk.Advance(s.cfg.ClientTTL/2 + time.Second)
	s.Tick()
	ia, err := s.GetReplicaList(bg, "ka")
	if err != nil || kinds(ia) != "SSD@b " {
		t.Fatalf("ka: %s %v", kinds(ia), err)
	}
	ib, err := s.GetReplicaList(bg, "kb")
	if err != nil || kinds(ib) != "DRAM@b " {
		t.Fatalf("kb: %s %v", kinds(ib), err)
	}
	st, _ := s.Stats(bg)
	if st.DRAMReplicas != 1 || st.SSDReplicas != 1 || st.Nodes != 1 {
		t.Fatalf("stats %+v", st)
	}
}

// TestSoftPinNotEvictedWhenDisallowed: allow_evict_soft_pinned_objects=false
// keeps soft-pinned objects until the pin expires.
func TestSoftPinNotEvictedWhenDisallowed(t *testing.T) {
	s, clk := testService(t, func(c *Config) { c.EvictionRatio = 1; c.AllowEvictSoftPinned = false; c.ClientTTL = 100 * time.Hour })
	mount(t, s, "a", 1<<20)
	putWith(t, s, masterapi.PutStartRequest{Key: "soft", Size: 64, SoftPin: true})
	put(t, s, "plain", 64, "")
	if n := s.EvictNow(); n != 1 {
		t.Fatalf("evicted %d", n)
	}
	if n := s.EvictNow(); n != 0 {
		t.Fatal("soft-pinned object evicted")
	}
	clk.Advance(s.cfg.DefaultKVSoftPinTTL + time.Second)
	if n := s.EvictNow(); n != 1 {
		t.Fatal("expired soft pin still protects")
	}
}
