package master

import (
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tierstore/tierstore/internal/errcode"
	"github.com/tierstore/tierstore/masterapi"
	"pgregory.net/rapid"
)

// compactKey is key i of the model tests in one of three families: 0,
// lengths from 2 to ~300 bytes, so that blocks run out of key bytes
// before records (no common prefix to keep once); 1, the same after
// vLLM's 44-byte prefix (every chunk's blocks keep it once); 2, that
// prefix and i z's, so that a chunk's shortest key is the start of all
// the others (its prefix stops one byte short of it); 3, the three by
// turns (i%3), so that keys with and without a prefix meet in a block.
func compactKey(family, i int) string {
	const vllm = "model@tp_rank:0@pcp0@dcp0@pp_rank:0@group:0@"
	switch family {
	case 3: // the three mixed: blocks of keys with and without a prefix
		return compactKey(i%3, i)
	case 1:
		return vllm + fmt.Sprintf("k%d/%s", i, strings.Repeat("x", i*37%300))
	case 2:
		return vllm + strings.Repeat("z", i)
	}
	return fmt.Sprintf("k%d/%s", i, strings.Repeat("x", i*37%300))
}

// TestCompactMatchesModel (property): re-registrations in chunks (which
// make compact records), puts through DRAM and SSD copies of them,
// lookups (which grant leases on records in place), DRAM evictions (which
// freeze what became SSD-only back into records), removals of one key
// and of all, SSD evictions, nodes leaving and coming back, nodes
// restarting and re-registering what they kept, with or without leases
// in force, in random order over random shard counts, leave the
// replicas, leases and records the model says, with every Check passing
// (the compact index finds every record, each block's live count is its
// references, the counters and digests agree) and the counters equal to
// the model's.
func TestCompactMatchesModel(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		cfg := DefaultConfig()
		clk := NewManualClock(t0)
		cfg.Clock = clk
		cfg.MonitorInterval = 0
		cfg.Shards = 1 << rapid.IntRange(0, 4).Draw(rt, "shardsLog")
		cfg.ClientTTL = time.Hour
		cfg.Logger = slog.New(slog.DiscardHandler)
		s, err := New(cfg)
		if err != nil {
			rt.Fatal(err)
		}
		defer s.Close()
		s.cst.frozenRecs = rapid.IntRange(1, 64).Draw(rt, "frozenRecs") // blocks that fill, and learn a prefix
		nodes := []string{"a", "b"}
		const segSize = 64 << 20
		for _, n := range nodes {
			mount(t, s, n, segSize)
		}
		universe := rapid.IntRange(1, 400).Draw(rt, "universe")
		family := rapid.IntRange(0, 3).Draw(rt, "family")
		model := map[string]map[string]bool{} // key -> node ids with an SSD replica (empty: gone, held for its lease)
		dram := map[string]string{}           // key -> the node of its DRAM replica
		leased := map[string]bool{}           // keys with a read lease in force
		dramLeased := map[string]bool{}       // leased keys whose lease needs the DRAM replica (leaseNeedsDRAM)
		// pinned are the keys with an offload task: a DRAM replica whose
		// every SSD copy died with its node is queued for offload again
		// from it (restoreSSDCopy).
		pinned := map[string]bool{}
		incarnation := 0
		keysOf := func(label string) []string {
			var ks []string
			for _, i := range rapid.SliceOfN(rapid.IntRange(0, universe-1), 0, 600).Draw(rt, label) {
				ks = append(ks, compactKey(family, i))
			}
			return ks
		}
		// settle deletes the model's keys left without a replica and
		// not leased (settleEmpty).
		settle := func() {
			for k, on := range model {
				if len(on) == 0 && dram[k] == "" && !leased[k] {
					delete(model, k)
				}
			}
		}
		endLeases := func() {
			clk.Advance(cfg.DefaultKVLeaseTTL + time.Second)
			s.Tick()
			clear(leased)
			clear(dramLeased)
			settle()
		}
		// lostNode is the model of node n's DRAM replicas going (and the
		// tasks that had them as their source); had are the keys' SSD
		// nodes before n's went.
		lostNode := func(n string, had map[string]int) {
			for k, on := range dram {
				if on == n {
					delete(dram, k)
					delete(pinned, k)
				} else if had[k] > 0 && len(model[k]) == 0 {
					pinned[k] = true
				}
			}
			settle()
		}
		ssdCounts := func() map[string]int {
			had := map[string]int{}
			for k, on := range model {
				had[k] = len(on)
			}
			return had
		}
		steps := rapid.IntRange(1, 30).Draw(rt, "steps")
		for step := range steps {
			frozen := s.cnt.frozen.Load()
			wantFrozen := int64(0)
			var frozenKeys []string
			switch op := rapid.IntRange(0, 9).Draw(rt, "op"); op {
			case 0, 1: // a re-registration, in chunks
				n := rapid.SampledFrom(nodes).Draw(rt, "node")
				ks := keysOf("reregKeys")
				chunk := rapid.IntRange(1, 300).Draw(rt, "chunk")
				for lo := 0; lo < len(ks); lo += chunk {
					var objs []masterapi.SSDObject
					for _, k := range ks[lo:min(lo+chunk, len(ks))] {
						objs = append(objs, masterapi.SSDObject{Key: k, Size: int64(10 + len(k)), CRC: crcOf(k)})
					}
					c := masterapi.ColumnsOf(objs)
					if rapid.Bool().Draw(rt, "hint") {
						c.Expected = int64(len(ks))
					}
					errs, err := s.ReRegisterSSDColumns(bg, n, c)
					if err != nil {
						rt.Fatalf("step %d: re-register: %v", step, err)
					}
					for i, e := range errs {
						if e == nil {
							if model[objs[i].Key] == nil {
								model[objs[i].Key] = map[string]bool{}
							}
							model[objs[i].Key][n] = true
							if dram[objs[i].Key] == n {
								delete(pinned, objs[i].Key) // the task's answer
							}
						}
					}
				}
			case 2: // lookups: each grants a read lease; records stay records
				exist := rapid.Bool().Draw(rt, "exist")
				thawed := s.cnt.thawed.Load()
				for _, k := range keysOf("lookups") {
					var err error
					if exist {
						var ok bool
						ok, err = s.ExistKey(bg, k)
						if err == nil && !ok {
							err = errcode.ErrObjectNotFound
						}
					} else {
						_, err = s.GetReplicaList(bg, k)
					}
					switch {
					case model[k] == nil:
						if !errors.Is(err, errcode.ErrObjectNotFound) {
							rt.Fatalf("step %d: lookup %q: %v, not in the model", step, k, err)
						}
					case len(model[k]) == 0 && dram[k] == "":
						if !errors.Is(err, errcode.ErrReplicaGone) {
							rt.Fatalf("step %d: lookup %q: %v, gone in the model", step, k, err)
						}
					case err != nil:
						rt.Fatalf("step %d: lookup %q: %v, model %v dram %q", step, k, err, model[k], dram[k])
					default:
						leased[k] = true
						if !exist && len(model[k]) == 0 {
							dramLeased[k] = true // its reader has only the DRAM replica
						}
					}
				}
				if th := s.cnt.thawed.Load(); th != thawed {
					rt.Fatalf("step %d: lookups thawed %d records", step, th-thawed)
				}
				if !rapid.Bool().Draw(rt, "keepLeases") {
					endLeases()
				}
			case 3: // removals of single keys, not forced
				for _, k := range keysOf("removes") {
					err := s.Remove(bg, k, false)
					switch {
					case model[k] == nil:
						if !errors.Is(err, errcode.ErrObjectNotFound) {
							rt.Fatalf("step %d: remove %q: %v, not in the model", step, k, err)
						}
					case leased[k] || pinned[k]:
						if !errors.Is(err, errcode.ErrObjectHasLease) {
							rt.Fatalf("step %d: remove %q: %v, leased in the model", step, k, err)
						}
					case err != nil:
						rt.Fatalf("step %d: remove %q: %v, model %v", step, k, err, model[k])
					default:
						delete(model, k)
						delete(dram, k)
					}
				}
			case 4: // remove all, not forced: the leased keys stay
				want := int64(0)
				for k := range model {
					if !leased[k] && !pinned[k] {
						want++
						delete(model, k)
						delete(dram, k)
					}
				}
				n, err := s.RemoveAll(bg, false)
				if err != nil || n != want {
					rt.Fatalf("step %d: remove all: %d, %v; model has %d unleased", step, n, err, want)
				}
			case 5: // SSD eviction reported by a node: a leased key whose only readable replica it is stays
				n := rapid.SampledFrom(nodes).Draw(rt, "evictNode")
				ks := keysOf("evicts")
				keep := map[string]bool{}
				for _, k := range ks {
					if !model[k][n] {
						continue
					}
					if leased[k] && len(model[k]) == 1 && dram[k] == "" {
						keep[k] = true
						continue
					}
					delete(model[k], n)
					if leased[k] {
						dramLeased[k] = true // dropSSD inside the lease
					}
				}
				settle()
				res, err := s.EvictSSDReplica(bg, n, ks)
				if err != nil || len(res.Keep) != len(keep) {
					rt.Fatalf("step %d: evict: %+v, %v; model keeps %v", step, res, err, keep)
				}
			case 6: // a node leaves and mounts again (a new incarnation)
				endLeases()
				n := rapid.SampledFrom(nodes).Draw(rt, "leaveNode")
				if err := s.LeaveNode(bg, n, ""); err != nil {
					rt.Fatalf("step %d: leave: %v", step, err)
				}
				had := ssdCounts()
				for _, on := range model {
					delete(on, n)
				}
				lostNode(n, had)
				mount(t, s, n, segSize)
			case 7: // a node expires, comes back and re-registers before the sweep reaches its objects
				endLeases()
				n := rapid.SampledFrom(nodes).Draw(rt, "restartNode")
				s.nodesMu.Lock()
				s.retireLocked(s.nodes[n]) // the sweep that follows has not reached them
				s.nodesMu.Unlock()
				incarnation++
				if err := s.MountSegment(bg, masterapi.MountRequest{Node: n, Endpoint: n + ":1", Segment: "seg0", Size: segSize, Incarnation: fmt.Sprint(incarnation)}); err != nil {
					rt.Fatal(err)
				}
				ks := keysOf("restartKeys")
				var objs []masterapi.SSDObject
				for _, k := range ks {
					objs = append(objs, masterapi.SSDObject{Key: k, Size: int64(10 + len(k)), CRC: crcOf(k)})
				}
				errs, err := s.ReRegisterSSDColumns(bg, n, masterapi.ColumnsOf(objs))
				if err != nil {
					rt.Fatalf("step %d: re-register after restart: %v", step, err)
				}
				kept := map[string]bool{}
				for i, e := range errs {
					if e == nil {
						kept[objs[i].Key] = true
					}
				}
				s.sweep(s.now())
				for k := range kept {
					if model[k] == nil {
						model[k] = map[string]bool{}
					}
					model[k][n] = true
					if dram[k] == n {
						delete(pinned, k) // the task's answer: the copy is there
					}
				}
				had := ssdCounts()
				for k, on := range model {
					if on[n] && !kept[k] {
						delete(on, n)
					}
				}
				lostNode(n, had)
			case 8: // puts through DRAM of keys the master does not hold
				n := rapid.SampledFrom(nodes).Draw(rt, "putNode")
				for _, k := range keysOf("puts") {
					if model[k] != nil {
						continue
					}
					rep, err := s.PutStart(bg, masterapi.PutStartRequest{Key: k, Size: int64(10 + len(k)), CRC: crcOf(k), PreferredNode: n})
					if err != nil {
						rt.Fatalf("step %d: put start %q: %v", step, k, err)
					}
					if err := s.PutEnd(bg, k, rep.PutToken); err != nil {
						rt.Fatalf("step %d: put end %q: %v", step, k, err)
					}
					model[k] = map[string]bool{}
					dram[k] = n
				}
			case 9: // DRAM eviction: what is left with one SSD replica and nothing else is frozen back into a record
				if rapid.Bool().Draw(rt, "endLeases") {
					endLeases()
				}
				all := rapid.Bool().Draw(rt, "evictAll")
				var ks []string
				if all {
					for k := range dram {
						ks = append(ks, k)
					}
				} else {
					ks = keysOf("dramEvicts")
				}
				dropped := int64(0)
				for _, k := range ks {
					if dram[k] == "" || len(model[k]) == 0 || pinned[k] || leased[k] && dramLeased[k] {
						continue
					}
					delete(dram, k)
					dropped++
					if len(model[k]) == 1 {
						wantFrozen++
						frozenKeys = append(frozenKeys, k)
					}
				}
				var res masterapi.EvictDRAMResult
				if all {
					res, err = s.EvictDRAM(bg, nil, true)
				} else {
					res, err = s.EvictDRAM(bg, ks, false)
				}
				if err != nil || res.Dropped != dropped {
					rt.Fatalf("step %d: evict DRAM (all %v): %+v %v, model drops %d", step, all, res, err, dropped)
				}
			}
			if got := s.cnt.frozen.Load() - frozen; got != wantFrozen {
				rt.Fatalf("step %d: %d objects frozen, model %d", step, got, wantFrozen)
			}
			for _, k := range frozenKeys {
				sh := s.shardOf(k)
				sh.mu.Lock()
				rec := s.compactHas(sh, k)
				sh.mu.Unlock()
				if !rec {
					rt.Fatalf("step %d: %q frozen, not a record", step, k)
				}
			}
			if err := s.Check(); err != nil {
				rt.Fatalf("step %d: %v", step, err)
			}
			got := map[string]string{}
			gotDRAM := map[string]string{}
			s.eachObject(func(k string, o *object, ns []string) {
				got[k] = strings.Join(ns, ",")
				if o.dram.seg != nil {
					gotDRAM[k] = o.dram.seg.node.id
				}
			})
			replicas := 0
			for k, on := range model {
				want := slices.Sorted(func(yield func(string) bool) {
					for n := range on {
						if !yield(n) {
							return
						}
					}
				})
				replicas += len(want)
				if g, ok := got[k]; !ok || g != strings.Join(want, ",") {
					rt.Fatalf("step %d: key %q on %q (held %v), model %v", step, k, g, ok, want)
				}
				if gotDRAM[k] != dram[k] {
					rt.Fatalf("step %d: key %q in DRAM on %q, model %q", step, k, gotDRAM[k], dram[k])
				}
			}
			if len(got) != len(model) || len(gotDRAM) != len(dram) {
				rt.Fatalf("step %d: %d objects (%d in DRAM), model %d (%d)", step, len(got), len(gotDRAM), len(model), len(dram))
			}
			st, err := s.Stats(bg)
			if err != nil || st.Objects != int64(len(model)) || st.SSDReplicas != int64(replicas) || st.DRAMReplicas != int64(len(dram)) {
				rt.Fatalf("step %d: Stats %+v %v; model %d objects, %d SSD and %d DRAM replicas", step, st, err, len(model), replicas, len(dram))
			}
		}
	})
}

// TestCompactRebuiltLease: SSD objects re-registered inside an HA
// rebuild window are compact records and leased as rebuilt objects are
// (until the window's end and a lease after it): a removal without force
// is refused, a node's death keeps them (REPLICA_IS_GONE, not a miss),
// RemoveAll spares them; once the lease is over they go. An object
// re-registered after the window has no lease.
func TestCompactRebuiltLease(t *testing.T) {
	s, clk, _ := haService(t, nil)
	mount(t, s, "a", 1<<20)
	mount(t, s, "b", 1<<20)
	reg := func(node string, keys ...string) { // on s
		t.Helper()
		var objs []masterapi.SSDObject
		for _, k := range keys {
			objs = append(objs, masterapi.SSDObject{Key: k, Size: 10, CRC: crcOf(k)})
		}
		errs, err := s.ReRegisterSSDColumns(bg, node, masterapi.ColumnsOf(objs))
		if err != nil {
			t.Fatal(err)
		}
		for i, e := range errs {
			if e != nil {
				t.Fatalf("%s: %v", keys[i], e)
			}
		}
	}
	reg("a", "r1", "r2", "r3")
	reg("b", "s1")
	if got := s.cnt.compact.Load(); got != 4 {
		t.Fatalf("%d compact records after re-registering 4 keys", got)
	}
	if err := s.LeaveNode(bg, "b", ""); err != nil {
		t.Fatal(err)
	}
	_, err := s.GetReplicaList(bg, "s1")
	mustIs(t, err, errcode.ErrReplicaGone)
	mustIs(t, s.Remove(bg, "r1", false), errcode.ErrObjectHasLease)
	if n, err := s.RemoveAll(bg, false); err != nil || n != 0 {
		t.Fatalf("RemoveAll inside the rebuild lease removed %d (%v)", n, err)
	}

	clk.Advance(2*time.Second + s.cfg.DefaultKVLeaseTTL + time.Second) // the window and its lease end
	s.Tick()
	if n, err := s.RemoveAll(bg, false); err != nil || n != 3 {
		t.Fatalf("RemoveAll after the rebuild lease removed %d (%v)", n, err)
	}
	for _, k := range []string{"s1"} {
		_, err := s.GetReplicaList(bg, k)
		mustIs(t, err, errcode.ErrObjectNotFound)
	}

	late, lclk, _ := haService(t, nil)
	mount(t, late, "a", 1<<20)
	lclk.Advance(3 * time.Second)
	errs, err := late.ReRegisterSSDColumns(bg, "a", masterapi.ColumnsOf([]masterapi.SSDObject{{Key: "late", Size: 10, CRC: 1}}))
	if err != nil || errs[0] != nil {
		t.Fatal(err, errs)
	}
	if err := late.Remove(bg, "late", false); err != nil {
		t.Fatalf("an object re-registered after the window: %v", err)
	}
}

// TestCompactLookupsStayRecords: a re-registered object is a compact
// record until a change turns it into an *object; EvictDRAM of it answers
// "not in DRAM" and lookups (which grant a read lease, written into the
// record) answer as an *object would, all without turning it into one.
func TestCompactLookupsStayRecords(t *testing.T) {
	s, _ := testService(t, nil)
	mount(t, s, "a", 1<<20)
	errs, err := s.ReRegisterSSDColumns(bg, "a", masterapi.ColumnsOf([]masterapi.SSDObject{{Key: "c1", Size: 10, CRC: 5}, {Key: "c2", Size: 20, CRC: 6}}))
	if err != nil || errs[0] != nil || errs[1] != nil {
		t.Fatal(err, errs)
	}
	res, err := s.EvictDRAM(bg, []string{"c1", "nope"}, false)
	if err != nil || res.NotInDRAM != 1 || res.NotFound != 1 {
		t.Fatalf("EvictDRAM: %+v %v", res, err)
	}
	if c, th := s.cnt.compact.Load(), s.cnt.thawed.Load(); c != 2 || th != 0 {
		t.Fatalf("compact %d thawed %d, want 2 and 0", c, th)
	}
	info, err := s.GetReplicaList(bg, "c2")
	if err != nil || info.Size != 20 || info.CRC != 6 || len(info.Replicas) != 1 || info.Replicas[0].Kind != masterapi.SSD || info.Replicas[0].Node != "a" {
		t.Fatalf("GetReplicaList: %+v %v", info, err)
	}
	if ok, err := s.ExistKey(bg, "c1"); !ok || err != nil {
		t.Fatalf("ExistKey: %v %v", ok, err)
	}
	if res, err := s.BatchExistKey(bg, []string{"c1", "c2", "nope"}); err != nil || !res[0].Exists || !res[1].Exists || res[2].Exists {
		t.Fatalf("BatchExistKey: %+v %v", res, err)
	}
	if res, err := s.BatchGetReplicaList(bg, []string{"c1", "c2"}); err != nil || res[0].Err != nil || res[1].Info.Size != 20 {
		t.Fatalf("BatchGetReplicaList: %+v %v", res, err)
	}
	if c, th := s.cnt.compact.Load(), s.cnt.thawed.Load(); c != 2 || th != 0 {
		t.Fatalf("after lookups: compact %d thawed %d, want 2 and 0", c, th)
	}
	if err := s.Check(); err != nil {
		t.Fatal(err)
	}
	if st, err := s.Stats(bg); err != nil || st.Objects != 2 || st.SSDReplicas != 2 {
		t.Fatalf("Stats: %+v %v", st, err)
	}
}

// reRegisterRecords re-registers keys on node as compact records (size
// 100, crc 1) and checks that they are.
func reRegisterRecords(t *testing.T, s *Service, node string, keys ...string) {
	t.Helper()
	objs := make([]masterapi.SSDObject, len(keys))
	for i, k := range keys {
		objs[i] = masterapi.SSDObject{Key: k, Size: 100, CRC: 1}
	}
	before := s.cnt.compact.Load()
	errs, err := s.ReRegisterSSDColumns(bg, node, masterapi.ColumnsOf(objs))
	if err != nil {
		t.Fatal(err)
	}
	for i, e := range errs {
		if e != nil {
			t.Fatal(keys[i], e)
		}
	}
	if got := s.cnt.compact.Load() - before; got != int64(len(keys)) {
		t.Fatalf("%d compact records made of %d keys", got, len(keys))
	}
}

// TestCompactRecordLease: a lookup of a compact record grants its read
// lease in the record (no thaw), and every removal path that respects
// leases honours it (invariant 4): a non-forced Remove, a non-forced
// RemoveAll, an SSD eviction of its only replica, a reconcile that drops
// it (held, answered REPLICA_IS_GONE), the sweep after its node died;
// once the lease ends they remove it, and a forced removal never waits.
func TestCompactRecordLease(t *testing.T) {
	s, clk := leaseService(t, nil)
	mount(t, s, "a", 1<<20)
	mount(t, s, "b", 1<<20)
	reRegisterRecords(t, s, "a", "k1", "k2", "k3", "k4", "k5", "f1")
	reRegisterRecords(t, s, "b", "d1")
	if ok, err := s.ExistKey(bg, "k1"); !ok || err != nil {
		t.Fatal(ok, err)
	}
	if _, err := s.GetReplicaList(bg, "k2"); err != nil {
		t.Fatal(err)
	}
	if res, err := s.BatchExistKey(bg, []string{"k3", "f1", "d1"}); err != nil || !res[0].Exists || !res[1].Exists || !res[2].Exists {
		t.Fatal(res, err)
	}
	if th := s.cnt.thawed.Load(); th != 0 {
		t.Fatalf("lookups thawed %d records", th)
	}
	clk.Advance(s.cfg.DefaultKVLeaseTTL - time.Millisecond) // inside every lease
	if err := s.Remove(bg, "k1", false); !errors.Is(err, errcode.ErrObjectHasLease) {
		t.Fatalf("non-forced Remove of a leased record: %v", err)
	}
	if th := s.cnt.thawed.Load(); th != 0 {
		t.Fatalf("a refused Remove thawed %d records", th)
	}
	if n, err := s.RemoveAll(bg, false); err != nil || n != 2 {
		t.Fatalf("non-forced RemoveAll removed %d (%v), want the 2 unleased", n, err)
	}
	if res, err := s.EvictSSDReplica(bg, "a", []string{"k2"}); err != nil || res.Dropped != 0 || len(res.Keep) != 1 {
		t.Fatalf("SSD eviction of a leased record's only replica: %+v %v", res, err)
	}
	if res, err := reconcileAll(s, "a", []string{"k1", "k2", "f1"}); err != nil || res.Dropped != 1 {
		t.Fatal(res, err)
	}
	mustBeGone(t, s, "k3")
	s.ExpireNode("b")
	mustBeGone(t, s, "d1")
	if err := s.Check(); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"k1", "k2", "f1"} {
		if ok, err := s.ExistKey(bg, k); !ok || err != nil {
			t.Fatalf("%s after the removals inside its lease: %v %v", k, ok, err)
		}
	}
	if err := s.Remove(bg, "f1", true); err != nil {
		t.Fatalf("forced Remove of a leased record: %v", err)
	}
	clk.Advance(s.cfg.DefaultKVLeaseTTL + leaseDuration(leaseUnit)) // every lease over
	s.Tick()
	if err := s.Remove(bg, "k1", false); err != nil {
		t.Fatalf("non-forced Remove after the lease: %v", err)
	}
	if res, err := s.EvictSSDReplica(bg, "a", []string{"k2"}); err != nil || res.Dropped != 1 {
		t.Fatalf("SSD eviction after the lease: %+v %v", res, err)
	}
	for _, k := range []string{"k3", "d1"} {
		if _, err := s.GetReplicaList(bg, k); !errors.Is(err, errcode.ErrObjectNotFound) {
			t.Fatalf("%s after its lease: %v, want OBJECT_NOT_FOUND", k, err)
		}
	}
	if st, err := s.Stats(bg); err != nil || st.Objects != 0 {
		t.Fatalf("Stats: %+v %v", st, err)
	}
	if err := s.Check(); err != nil {
		t.Fatal(err)
	}
}

func leaseDuration(ns int64) time.Duration { return time.Duration(ns) }

// TestCompactRecordLeaseEnd: a record's lease ends when an *object's
// would, rounded up to leaseUnit at most, and a later lookup extends it.
func TestCompactRecordLeaseEnd(t *testing.T) {
	s, clk := leaseService(t, nil)
	mount(t, s, "a", 1<<20)
	reRegisterRecords(t, s, "a", "k")
	info, err := s.GetReplicaList(bg, "k")
	if err != nil {
		t.Fatal(err)
	}
	want := clk.Now().Add(s.cfg.DefaultKVLeaseTTL)
	if d := info.LeaseDeadline.Sub(want); d < 0 || d >= leaseDuration(leaseUnit) {
		t.Fatalf("lease deadline %v, want %v rounded up to %v", info.LeaseDeadline, want, leaseDuration(leaseUnit))
	}
	clk.Advance(s.cfg.DefaultKVLeaseTTL / 2)
	if ok, err := s.ExistKey(bg, "k"); !ok || err != nil {
		t.Fatal(ok, err)
	}
	clk.Advance(s.cfg.DefaultKVLeaseTTL/2 + time.Millisecond) // past the first lease, inside the second
	if err := s.Remove(bg, "k", false); !errors.Is(err, errcode.ErrObjectHasLease) {
		t.Fatalf("Remove inside the extended lease: %v", err)
	}
	clk.Advance(s.cfg.DefaultKVLeaseTTL/2 + leaseDuration(leaseUnit))
	if err := s.Remove(bg, "k", false); err != nil {
		t.Fatalf("Remove after the lease: %v", err)
	}
	if th := s.cnt.thawed.Load(); th != 1 {
		t.Fatalf("thawed %d, want 1 (the removal's)", th)
	}
}

// TestCompactFailureAnswer: a node's failure answer for a key held as a
// compact record (the key is not on its SSD) drops the record's replica,
// as it drops an *object's.
func TestCompactFailureAnswer(t *testing.T) {
	s, _ := testService(t, nil)
	mount(t, s, "a", 1<<20)
	reRegisterRecords(t, s, "a", "k")
	if _, err := s.NotifyOffloadSuccess(bg, masterapi.NotifyRequest{Node: "a", Failed: []masterapi.OffloadFailure{{Key: "k", Reason: "corrupt entry dropped"}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.GetReplicaList(bg, "k"); !errors.Is(err, errcode.ErrObjectNotFound) {
		t.Fatalf("GetReplicaList after the node said it has no copy: %v", err)
	}
	if err := s.Check(); err != nil {
		t.Fatal(err)
	}
}
