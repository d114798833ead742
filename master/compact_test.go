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
// the others (its prefix stops one byte short of it).
func compactKey(family, i int) string {
	const vllm = "model@tp_rank:0@pcp0@dcp0@pp_rank:0@group:0@"
	switch family {
	case 1:
		return vllm + fmt.Sprintf("k%d/%s", i, strings.Repeat("x", i*37%300))
	case 2:
		return vllm + strings.Repeat("z", i)
	}
	return fmt.Sprintf("k%d/%s", i, strings.Repeat("x", i*37%300))
}

// replicaNodes renders every object as key=its SSD replicas' node ids,
// sorted, and reports whether one has a DRAM replica.
func replicaNodes(s *Service) (map[string]string, bool) {
	out := map[string]string{}
	dram := false
	s.eachObject(func(k string, o *object, ns []string) {
		out[k] = strings.Join(ns, ",")
		dram = dram || o.dram.seg != nil
	})
	return out, dram
}

// TestCompactMatchesModel (property): re-registrations in chunks (which
// make compact records), lookups (which thaw them), removals of one key
// and of all, SSD evictions, nodes leaving and coming back, nodes
// restarting and re-registering what they kept, in random
// order over random shard counts, leave the SSD replicas the model says,
// with every Check passing (the compact index finds every record, each
// block's live count is its references, the counters and digests agree).
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
		nodes := []string{"a", "b"}
		for _, n := range nodes {
			mount(t, s, n, 1<<20)
		}
		universe := rapid.IntRange(1, 400).Draw(rt, "universe")
		family := rapid.IntRange(0, 2).Draw(rt, "family")
		model := map[string]map[string]bool{} // key -> node ids with a replica
		incarnation := 0
		keysOf := func(label string) []string {
			var ks []string
			for _, i := range rapid.SliceOfN(rapid.IntRange(0, universe-1), 0, 600).Draw(rt, label) {
				ks = append(ks, compactKey(family, i))
			}
			return ks
		}
		steps := rapid.IntRange(1, 30).Draw(rt, "steps")
		for step := range steps {
			switch op := rapid.IntRange(0, 7).Draw(rt, "op"); op {
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
						}
					}
				}
			case 2: // lookups: thaw
				for _, k := range keysOf("lookups") {
					_, err := s.GetReplicaList(bg, k)
					if (err == nil) != (model[k] != nil) {
						rt.Fatalf("step %d: lookup %q: %v, model %v", step, k, err, model[k])
					}
				}
				clk.Advance(cfg.DefaultKVLeaseTTL + time.Second) // the leases end
			case 3: // removals of single keys
				for _, k := range keysOf("removes") {
					err := s.Remove(bg, k, false)
					switch {
					case err == nil && model[k] != nil:
						delete(model, k)
					case errors.Is(err, errcode.ErrObjectNotFound) && model[k] == nil:
					default:
						rt.Fatalf("step %d: remove %q: %v, model %v", step, k, err, model[k])
					}
				}
			case 4: // remove all
				n, err := s.RemoveAll(bg, false)
				if err != nil || n != int64(len(model)) {
					rt.Fatalf("step %d: remove all: %d, %v; model has %d", step, n, err, len(model))
				}
				clear(model)
			case 5: // SSD eviction reported by a node
				n := rapid.SampledFrom(nodes).Draw(rt, "evictNode")
				ks := keysOf("evicts")
				res, err := s.EvictSSDReplica(bg, n, ks)
				if err != nil || len(res.Keep) != 0 {
					rt.Fatalf("step %d: evict: %+v, %v", step, res, err)
				}
				for _, k := range ks {
					if model[k][n] {
						delete(model[k], n)
						if len(model[k]) == 0 {
							delete(model, k)
						}
					}
				}
			case 6: // a node leaves and mounts again (a new incarnation)
				n := rapid.SampledFrom(nodes).Draw(rt, "leaveNode")
				if err := s.LeaveNode(bg, n, ""); err != nil {
					rt.Fatalf("step %d: leave: %v", step, err)
				}
				for k, on := range model {
					delete(on, n)
					if len(on) == 0 {
						delete(model, k)
					}
				}
				mount(t, s, n, 1<<20)
			case 7: // a node expires, comes back and re-registers before the sweep reaches its objects
				n := rapid.SampledFrom(nodes).Draw(rt, "restartNode")
				s.nodesMu.Lock()
				s.retireLocked(s.nodes[n]) // the sweep that follows has not reached them
				s.nodesMu.Unlock()
				incarnation++
				if err := s.MountSegment(bg, masterapi.MountRequest{Node: n, Endpoint: n + ":1", Segment: "seg0", Size: 1 << 20, Incarnation: fmt.Sprint(incarnation)}); err != nil {
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
				}
				for k, on := range model {
					if on[n] && !kept[k] {
						delete(on, n)
						if len(on) == 0 {
							delete(model, k)
						}
					}
				}
			}
			if err := s.Check(); err != nil {
				rt.Fatalf("step %d: %v", step, err)
			}
			got, dram := replicaNodes(s)
			if dram {
				rt.Fatalf("step %d: a DRAM replica, none was put", step)
			}
			for k, on := range model {
				want := slices.Sorted(func(yield func(string) bool) {
					for n := range on {
						if !yield(n) {
							return
						}
					}
				})
				if got[k] != strings.Join(want, ",") {
					rt.Fatalf("step %d: key %q on %q, model %v", step, k, got[k], want)
				}
			}
			if len(got) != len(model) {
				rt.Fatalf("step %d: %d objects, model %d", step, len(got), len(model))
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
