package master

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tierstore/tierstore/admission"
	"github.com/tierstore/tierstore/internal/errcode"
	"github.com/tierstore/tierstore/masterapi"
)

// putOnSSD puts key (100 bytes) through node a's DRAM and gives it an SSD
// replica on node ssd, as an offload would.
func putOnSSD(t *testing.T, s *Service, key, ssd string) {
	t.Helper()
	put(t, s, key, 100, "a")
	errs, err := s.ReRegisterSSDColumns(bg, ssd, masterapi.ColumnsOf([]masterapi.SSDObject{{Key: key, Size: 100, CRC: crcOf(key)}}))
	if err != nil || errs[0] != nil {
		t.Fatal(errs, err)
	}
}

// isRecord reports whether key is held as a compact record.
func isRecord(s *Service, key string) bool {
	sh := s.shardOf(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	return s.compactHas(sh, key)
}

// TestFreezeAfterDRAMEviction: an object put through DRAM and copied to
// SSD becomes a compact record again once its DRAM replica goes (by
// EvictDRAM of it or of all, or by an eviction round), with the same
// counters, replicas and lookups; one that still holds something a record
// cannot (a second SSD replica, a soft pin) stays an *object.
func TestFreezeAfterDRAMEviction(t *testing.T) {
	s, _ := testService(t, func(c *Config) { c.EvictionRatio = 1 })
	mount(t, s, "a", 1<<20)
	mount(t, s, "b", 1<<20)
	for _, k := range []string{"k1", "k2", "k3", "two", "k4"} {
		putOnSSD(t, s, k, "b")
	}
	if errs, err := s.ReRegisterSSDColumns(bg, "a", masterapi.ColumnsOf([]masterapi.SSDObject{{Key: "two", Size: 100, CRC: crcOf("two")}})); err != nil || errs[0] != nil {
		t.Fatal(errs, err)
	}
	before, _ := s.Stats(bg)
	if res, err := s.EvictDRAM(bg, []string{"k1", "two"}, false); err != nil || res.Dropped != 2 {
		t.Fatalf("EvictDRAM: %+v %v", res, err)
	}
	if !isRecord(s, "k1") || isRecord(s, "two") || s.cnt.frozen.Load() != 1 {
		t.Fatalf("k1 record %v, two record %v, frozen %d: want true, false, 1", isRecord(s, "k1"), isRecord(s, "two"), s.cnt.frozen.Load())
	}
	if n := s.EvictNow(); n == 0 {
		t.Fatal("eviction round dropped nothing")
	}
	if !isRecord(s, "k2") || !isRecord(s, "k3") || !isRecord(s, "k4") {
		t.Fatal("an eviction round's victims were not frozen")
	}
	after, _ := s.Stats(bg)
	if after.Objects != before.Objects || after.SSDReplicas != before.SSDReplicas || after.SSDBytes != before.SSDBytes {
		t.Fatalf("Stats before %+v after %+v", before, after)
	}
	if err := s.Check(); err != nil {
		t.Fatal(err)
	}
	info, err := s.GetReplicaList(bg, "k1")
	if err != nil || info.Size != 100 || info.CRC != crcOf("k1") || len(info.Replicas) != 1 || info.Replicas[0].Node != "b" {
		t.Fatalf("GetReplicaList of a frozen object: %+v %v", info, err)
	}
	if !isRecord(s, "k1") {
		t.Fatal("lookup thawed a frozen object")
	}
	// A soft-pinned object (evictable: allow_evict_soft_pinned) stays an
	// *object: a record has no pin.
	putWith(t, s, masterapi.PutStartRequest{Key: "pinned", Size: 100, CRC: crcOf("pinned"), PreferredNode: "a", SoftPin: true})
	if errs, err := s.ReRegisterSSDColumns(bg, "b", masterapi.ColumnsOf([]masterapi.SSDObject{{Key: "pinned", Size: 100, CRC: crcOf("pinned")}})); err != nil || errs[0] != nil {
		t.Fatal(errs, err)
	}
	if res, err := s.EvictDRAM(bg, nil, true); err != nil || res.Dropped != 1 {
		t.Fatalf("EvictDRAM all: %+v %v", res, err)
	}
	if isRecord(s, "pinned") {
		t.Fatal("a soft-pinned object was frozen")
	}
	if err := s.Check(); err != nil {
		t.Fatal(err)
	}
}

// TestFreezeKeepsLease: an object frozen inside its read lease keeps the
// lease in its record (invariant 4): a non-forced Remove and RemoveAll
// refuse it, an SSD eviction of its only replica keeps it, until the
// lease ends.
func TestFreezeKeepsLease(t *testing.T) {
	s, clk := leaseService(t, nil)
	mount(t, s, "a", 1<<20)
	mount(t, s, "b", 1<<20)
	putOnSSD(t, s, "k", "b")
	putOnSSD(t, s, "free", "b")
	if _, err := s.GetReplicaList(bg, "k"); err != nil { // lists the SSD replica: the DRAM replica may go
		t.Fatal(err)
	}
	if res, err := s.EvictDRAM(bg, []string{"k", "free"}, false); err != nil || res.Dropped != 2 {
		t.Fatalf("EvictDRAM: %+v %v", res, err)
	}
	if !isRecord(s, "k") || !isRecord(s, "free") {
		t.Fatal("not frozen")
	}
	clk.Advance(s.cfg.DefaultKVLeaseTTL - time.Millisecond)
	if n, err := s.RemoveAll(bg, false); err != nil || n != 1 {
		t.Fatalf("RemoveAll: %d %v, want the unleased one", n, err)
	}
	if res, err := s.EvictSSDReplica(bg, "b", []string{"k"}); err != nil || len(res.Keep) != 1 {
		t.Fatalf("EvictSSDReplica: %+v %v", res, err)
	}
	if err := s.Remove(bg, "k", false); !errors.Is(err, errcode.ErrObjectHasLease) {
		t.Fatalf("Remove of a frozen leased object: %v", err)
	}
	clk.Advance(2*time.Millisecond + time.Duration(leaseUnit))
	if err := s.Remove(bg, "k", false); err != nil {
		t.Fatalf("Remove after the lease: %v", err)
	}
	if err := s.Check(); err != nil {
		t.Fatal(err)
	}
}

// TestCompactLookupsKeepMemory: looking up every record of a pool once
// (ExistKey, GetReplicaList, their batches) leaves them records: no
// thaw, and the heap does not grow by what *objects would cost (~300 B
// each; a thawed pool grew back to the put-filled cost before).
func TestCompactLookupsKeepMemory(t *testing.T) {
	s, _ := testService(t, func(c *Config) { c.Shards = 1024 })
	mount(t, s, "a", 1<<20)
	const n = 40000
	keys := make([]string, n)
	objs := make([]masterapi.SSDObject, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("model@tp_rank:0@pcp0@dcp0@pp_rank:0@group:0@%064x", i*7919)
		objs[i] = masterapi.SSDObject{Key: keys[i], Size: 100, CRC: 1}
	}
	for lo := 0; lo < n; lo += 4096 {
		if _, err := s.ReRegisterSSDColumns(bg, "a", masterapi.ColumnsOf(objs[lo:min(lo+4096, n)])); err != nil {
			t.Fatal(err)
		}
	}
	heap := func() int64 {
		var ms runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&ms)
		return int64(ms.HeapAlloc)
	}
	h0 := heap()
	for i, k := range keys {
		switch i % 4 {
		case 0:
			if ok, err := s.ExistKey(bg, k); !ok || err != nil {
				t.Fatal(k, ok, err)
			}
		case 1:
			if _, err := s.GetReplicaList(bg, k); err != nil {
				t.Fatal(k, err)
			}
		case 2:
			if res, err := s.BatchExistKey(bg, []string{k}); err != nil || !res[0].Exists {
				t.Fatal(k, res, err)
			}
		case 3:
			if res, err := s.BatchGetReplicaList(bg, []string{k}); err != nil || res[0].Err != nil {
				t.Fatal(k, res, err)
			}
		}
	}
	grew := heap() - h0
	runtime.KeepAlive(keys)
	if th := s.cnt.thawed.Load(); th != 0 {
		t.Fatalf("lookups thawed %d records", th)
	}
	if c := s.cnt.compact.Load(); c != n {
		t.Fatalf("%d records, want %d", c, n)
	}
	if per := grew / n; per > 16 {
		t.Fatalf("the heap grew by %d B per looked-up record", per)
	}
}

// TestFreezeConcurrent: lookups, DRAM evictions (which freeze), puts
// copied to SSD, second SSD replicas added and evicted, prefetches and
// removals of other keys, on many goroutines: a key that is never
// removed is found by every lookup throughout (a freeze or a lookup on a
// record never loses it), and Check holds at the end.
func TestFreezeConcurrent(t *testing.T) {
	s, clk := testService(t, func(c *Config) {
		c.EvictionRatio = 0.5
		c.ClientTTL = time.Hour
	})
	mount(t, s, "a", 1<<20)
	mount(t, s, "b", 1<<20)
	const stay = 40
	for i := range stay {
		putOnSSD(t, s, fmt.Sprint("s", i), "a")
	}
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	fail := func(err error) {
		select {
		case errs <- err:
		default:
		}
	}
	for g := range 6 {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(g), 7))
			for range 300 {
				k := fmt.Sprint("s", r.IntN(stay))
				o := fmt.Sprint("o", r.IntN(40))
				switch r.IntN(8) {
				case 0:
					if ok, err := s.ExistKey(bg, k); !ok || err != nil {
						fail(fmt.Errorf("ExistKey(%s): %v %v", k, ok, err))
					}
				case 1:
					if info, err := s.GetReplicaList(bg, k); err != nil || len(info.Replicas) == 0 {
						fail(fmt.Errorf("GetReplicaList(%s): %+v %v", k, info, err))
					}
				case 2:
					if _, err := s.EvictDRAM(bg, []string{k, o}, false); err != nil {
						fail(err)
					}
				case 3:
					s.EvictNow()
				case 4: // a second SSD replica of k comes and goes
					if _, err := s.ReRegisterSSDColumns(bg, "b", masterapi.ColumnsOf([]masterapi.SSDObject{{Key: k, Size: 100, CRC: crcOf(k)}})); err != nil {
						fail(err)
					}
					if _, err := s.EvictSSDReplica(bg, "b", []string{k}); err != nil {
						fail(err)
					}
				case 5: // another key put, copied to SSD, removed
					if rep, err := s.PutStart(bg, masterapi.PutStartRequest{Key: o, Size: 100, CRC: crcOf(o), PreferredNode: "a"}); err == nil {
						_ = s.PutEnd(bg, o, rep.PutToken)
						_, _ = s.ReRegisterSSDColumns(bg, "a", masterapi.ColumnsOf([]masterapi.SSDObject{{Key: o, Size: 100, CRC: crcOf(o)}}))
					}
					_ = s.Remove(bg, o, r.IntN(2) == 0)
				case 6:
					if _, err := s.Prefetch(bg, []string{k}); err != nil {
						fail(err)
					}
					if _, err := s.BatchExistKey(bg, []string{k, o}); err != nil {
						fail(err)
					}
				case 7:
					if g == 0 {
						clk.Advance(time.Second)
						s.Tick()
					}
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if err := s.Check(); err != nil {
		t.Fatal(err)
	}
	for i := range stay {
		if ok, err := s.ExistKey(bg, fmt.Sprint("s", i)); !ok || err != nil {
			t.Fatalf("s%d: %v %v", i, ok, err)
		}
	}
	if s.cnt.frozen.Load() == 0 {
		t.Error("nothing was frozen")
	}
}

// TestFreezePrefix: a block of frozen objects keeps once the prefix the
// keys of the block before it shared; a key without it, or no longer
// than it, goes into a block of its own, and every key stays found.
func TestFreezePrefix(t *testing.T) {
	s, _ := testService(t, nil)
	s.cst.frozenRecs = 4
	mount(t, s, "a", 1<<20)
	mount(t, s, "b", 1<<20)
	const vllm = "model@tp_rank:0@pcp0@dcp0@pp_rank:0@group:0@"
	var keys []string
	for i := range 10 {
		keys = append(keys, fmt.Sprintf("%s%d/%s", vllm, i, strings.Repeat("x", 60)))
	}
	keys = append(keys, strings.Repeat("q", 100), "short", vllm[:len(vllm)-1], vllm, vllm+"x", "other-"+vllm)
	for _, k := range keys {
		putOnSSD(t, s, k, "b")
		if res, err := s.EvictDRAM(bg, []string{k}, false); err != nil || res.Dropped != 1 {
			t.Fatalf("EvictDRAM(%s): %+v %v", k, res, err)
		}
		if !isRecord(s, k) {
			t.Fatalf("%s not frozen", k)
		}
		if k == keys[9] {
			if pfx := s.cst.frozen.pfx; len(pfx) < len(vllm) || pfx[:len(vllm)] != vllm {
				t.Fatalf("the third frozen block keeps %q, want the keys' common prefix", pfx)
			}
		}
	}
	if err := s.Check(); err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		if info, err := s.GetReplicaList(bg, k); err != nil || info.Size != 100 || info.CRC != crcOf(k) {
			t.Fatalf("%s: %+v %v", k, info, err)
		}
	}
}

// TestCompactCountedLookupsStayRecords: with a policy that counts demand
// lookups (tinylfu, which also queues promotions; read-threshold) a
// lookup of a record is counted and leaves it a record: the policies of
// package admission neither count a read of an object that is not in
// DRAM nor queue it for offload; a promotion queued by a lookup is
// queued by key, and the record is thawed only when it starts.
func TestCompactCountedLookupsStayRecords(t *testing.T) {
	for _, policy := range []string{admission.PolicyTinyLFU, admission.PolicyReadThreshold} {
		t.Run(policy, func(t *testing.T) {
			s, _ := testService(t, func(c *Config) {
				c.EnableOffload = true
				c.AdmissionFlags.Policy = policy
				if policy == admission.PolicyReadThreshold {
					c.OffloadReadAdmissionThreshold = 1
				}
			})
			if !s.countLookups {
				t.Fatalf("policy %s does not count lookups", s.Policy().Name())
			}
			mount(t, s, "a", 1<<20)
			keys := []string{"k1", "k2", "k3"}
			reRegisterRecords(t, s, "a", keys...)
			for range 3 {
				for _, k := range keys {
					if ok, err := s.ExistKey(bg, k); !ok || err != nil {
						t.Fatal(k, ok, err)
					}
					if _, err := s.GetReplicaList(bg, k); err != nil {
						t.Fatal(k, err)
					}
				}
				if _, err := s.BatchGetReplicaList(bg, keys); err != nil {
					t.Fatal(err)
				}
			}
			if c, th := s.cnt.compact.Load(), s.cnt.thawed.Load(); c != 3 || th != 0 {
				t.Fatalf("compact %d thawed %d, want 3 and 0", c, th)
			}
			if err := s.Check(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestFreezeAfterFailedPromotion: a record thawed by its promotion is
// frozen back when the node answers that it did not load it.
func TestFreezeAfterFailedPromotion(t *testing.T) {
	s, _ := prefetchService(t, 1000, 8)
	reRegisterRecords(t, s, "a", "p")
	for range 3 {
		// Counted: the sketch learns p, and a lookup queues its
		// promotion (a prefetch: the budget allows it).
		if ok, err := s.ExistKey(bg, "p"); !ok || err != nil {
			t.Fatal(ok, err)
		}
	}
	if !isRecord(s, "p") {
		t.Fatal("queuing a promotion thawed the record")
	}
	ps := promos(t, s)
	if len(ps) != 1 || ps[0].Key != "p" || isRecord(s, "p") {
		t.Fatalf("promotions %+v, record %v: want p's, started on an *object", ps, isRecord(s, "p"))
	}
	if errs, err := s.PromoteEnd(bg, "a", []masterapi.PromoteResult{{Key: "p", PutToken: ps[0].PutToken, Loaded: false, Reason: "test"}}); err != nil || errs[0] != nil {
		t.Fatalf("PromoteEnd: %v %v", errs, err)
	}
	if !isRecord(s, "p") {
		t.Fatal("a failed promotion left its object thawed")
	}
	if err := s.Check(); err != nil {
		t.Fatal(err)
	}
	if ok, err := s.ExistKey(bg, "p"); !ok || err != nil {
		t.Fatal(ok, err)
	}
}
