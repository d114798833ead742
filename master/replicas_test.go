package master

import (
	"fmt"
	"testing"
	"time"

	"github.com/tierstore/tierstore/internal/errcode"
	"github.com/tierstore/tierstore/masterapi"
)

// Replicas on several nodes (PutStartRequest.Replicas, docs/master.md,
// replicas): placement, publication, and what each removal path does to
// the other replicas.

// putReplicas starts and ends a put of key with n replicas, preferred
// node first, and returns its replicas.
func putReplicas(t *testing.T, api masterapi.API, key string, size int64, node string, n int) []masterapi.Replica {
	t.Helper()
	r, err := api.PutStart(bg, masterapi.PutStartRequest{Key: key, Size: size, CRC: crcOf(key), PreferredNode: node, Replicas: n})
	if err != nil {
		t.Fatalf("PutStart(%q, %d replicas): %v", key, n, err)
	}
	if err := api.PutEnd(bg, key, r.PutToken); err != nil {
		t.Fatalf("PutEnd(%q): %v", key, err)
	}
	return r.Replicas()
}

// nodesOf lists the nodes of rs, in order.
func nodesOf(rs []masterapi.Replica) []string {
	var out []string
	for _, r := range rs {
		out = append(out, r.Node)
	}
	return out
}

// distinct reports whether rs are on pairwise different nodes.
func distinct(rs []masterapi.Replica) bool {
	seen := map[string]bool{}
	for _, r := range rs {
		if seen[r.Node] {
			return false
		}
		seen[r.Node] = true
	}
	return true
}

// segUsed returns node's SegmentUsed in Stats.
func segUsed(t *testing.T, s *Service, node string) int64 {
	t.Helper()
	st, err := s.Stats(bg)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range st.PerNode {
		if n.Node == node && n.Alive {
			return n.SegmentUsed
		}
	}
	t.Fatalf("no live node %q in stats", node)
	return 0
}

// expire lets node dead go silent past client_ttl while the others ping,
// and runs the loop's work.
func expire(t *testing.T, s *Service, clk *ManualClock, dead string, alive ...string) {
	t.Helper()
	for i := 0; i < 3; i++ {
		clk.Advance(s.cfg.ClientTTL / 2)
		for _, n := range alive {
			if _, err := s.Ping(bg, n); err != nil {
				t.Fatal(err)
			}
		}
	}
	s.Tick()
	if p, _ := s.Ping(bg, dead); p.Status != masterapi.NeedRemount {
		t.Fatalf("node %q not expired", dead)
	}
}

func TestReplicasPlacedOnDistinctNodesPreferredFirst(t *testing.T) {
	s, _ := testService(t, nil)
	for _, n := range []string{"a", "b", "c", "d"} {
		mount(t, s, n, 1<<20)
	}
	for i := 0; i < 20; i++ {
		pref := []string{"a", "b", "c", "d"}[i%4]
		reps := putReplicas(t, s, fmt.Sprint("k", i), 4096, pref, 3)
		if len(reps) != 3 || !distinct(reps) || reps[0].Node != pref {
			t.Fatalf("put %d (preferred %s): replicas on %v, want 3 distinct nodes, %s first", i, pref, nodesOf(reps), pref)
		}
		for _, r := range reps {
			if r.Kind != masterapi.DRAM || r.Status != masterapi.Processing || r.PutToken != reps[0].PutToken || r.Length != 4096 {
				t.Fatalf("put %d: replica %+v (first %+v)", i, r, reps[0])
			}
		}
		info, err := s.GetReplicaList(bg, fmt.Sprint("k", i))
		if err != nil || len(info.Replicas) != 3 || info.Replicas[0].Node != pref || !distinct(info.Replicas) {
			t.Fatalf("lookup of put %d: %s %v", i, kinds(info), err)
		}
	}
	st, _ := s.Stats(bg)
	if st.DRAMReplicas != 60 || st.Objects != 20 || st.DRAMBytes != 60*4096 {
		t.Fatalf("stats %+v, want 60 DRAM replicas of 20 objects", st)
	}
	lo, hi := int64(60), int64(0)
	for _, n := range st.PerNode { // the roomiest segment takes the others: spread
		lo, hi = min(lo, n.DRAMReplicas), max(hi, n.DRAMReplicas)
	}
	if hi-lo > 2 {
		t.Fatalf("replicas per node from %d to %d, want them spread: %+v", lo, hi, st.PerNode)
	}
}

func TestReplicasPublishedOnlyWhenAllEnd(t *testing.T) {
	s, _ := testService(t, nil)
	mount(t, s, "a", 1<<20)
	mount(t, s, "b", 1<<20)
	r, err := s.PutStart(bg, masterapi.PutStartRequest{Key: "k", Size: 100, CRC: crcOf("k"), Replicas: 2})
	if err != nil || len(r.More) != 1 {
		t.Fatalf("%+v %v", r, err)
	}
	_, err = s.GetReplicaList(bg, "k")
	mustIs(t, err, errcode.ErrReplicaNotReady)
	if ok, err := s.ExistKey(bg, "k"); ok || err != nil {
		t.Fatalf("exists during the put: %v %v", ok, err)
	}
	if err := s.PutEnd(bg, "k", r.PutToken); err != nil {
		t.Fatal(err)
	}
	info, err := s.GetReplicaList(bg, "k")
	if err != nil || kinds(info) != fmt.Sprintf("DRAM@%s DRAM@%s ", r.Node, r.More[0].Node) {
		t.Fatalf("%s %v", kinds(info), err)
	}
	for _, x := range info.Replicas {
		if x.Status != masterapi.Complete {
			t.Fatalf("published %+v", x)
		}
	}
	if err := s.PutEnd(bg, "k", r.PutToken); err != nil {
		t.Fatalf("repeated PutEnd: %v", err)
	}
}

func TestReplicasMoreThanLiveNodes(t *testing.T) {
	s, _ := testService(t, nil)
	mount(t, s, "a", 1<<20)
	mount(t, s, "b", 1<<20)
	_, err := s.PutStart(bg, masterapi.PutStartRequest{Key: "k", Size: 100, Replicas: 3})
	mustIs(t, err, errcode.ErrNoAvailableHandle)
	if st, _ := s.Stats(bg); st.Objects != 0 || st.SegmentUsed != 0 {
		t.Fatalf("a refused put left %+v", st)
	}
	r, err := s.PutStart(bg, masterapi.PutStartRequest{Key: "k", Size: 100, Replicas: 3, AllowFewer: true, PreferredNode: "b"})
	if err != nil || len(r.Replicas()) != 2 || r.Node != "b" || !distinct(r.Replicas()) {
		t.Fatalf("allow fewer: %+v %v", r, err)
	}
	for _, n := range []int{-1, masterapi.MaxReplicas + 1} {
		_, err = s.PutStart(bg, masterapi.PutStartRequest{Key: "x", Size: 100, Replicas: n})
		mustIs(t, err, errcode.ErrInvalidParams)
	}
	if err := s.PutRevoke(bg, "k", r.PutToken); err != nil {
		t.Fatal(err)
	}
	if segUsed(t, s, "a")+segUsed(t, s, "b") != 0 {
		t.Fatal("revoke left ranges allocated")
	}
}

// A node without room: strict fails and frees what it placed; AllowFewer
// places the others.
func TestReplicasNoRoomOnOneNode(t *testing.T) {
	s, _ := testService(t, nil)
	mount(t, s, "a", 1<<20)
	mount(t, s, "b", 1<<20)
	mount(t, s, "c", 64<<10)
	putWith(t, s, masterapi.PutStartRequest{Key: "fill", Size: 60 << 10, PreferredNode: "c", HardPin: true})
	usedC := segUsed(t, s, "c")
	_, err := s.PutStart(bg, masterapi.PutStartRequest{Key: "k", Size: 32 << 10, Replicas: 3})
	mustIs(t, err, errcode.ErrNoAvailableHandle)
	if segUsed(t, s, "a") != 0 || segUsed(t, s, "b") != 0 || segUsed(t, s, "c") != usedC {
		t.Fatal("a failed strict put kept ranges")
	}
	r, err := s.PutStart(bg, masterapi.PutStartRequest{Key: "k", Size: 32 << 10, Replicas: 3, AllowFewer: true})
	if err != nil || len(r.Replicas()) != 2 || !distinct(r.Replicas()) {
		t.Fatalf("%+v %v", r, err)
	}
	for _, x := range r.Replicas() {
		if x.Node == "c" {
			t.Fatalf("placed on the full node: %+v", r)
		}
	}
	if err := s.PutEnd(bg, "k", r.PutToken); err != nil {
		t.Fatal(err)
	}
}

// A node that dies between PutStart and PutEnd: nothing is published,
// also after the sweep (which keeps the dead replica of a put in
// progress), and the revoke frees the live ranges.
func TestReplicasNodeDiesDuringPut(t *testing.T) {
	s, clk := testService(t, func(c *Config) { c.PutStartDiscardTimeout = time.Hour })
	mount(t, s, "a", 1<<20)
	mount(t, s, "b", 1<<20)
	r, err := s.PutStart(bg, masterapi.PutStartRequest{Key: "k", Size: 100, PreferredNode: "a", Replicas: 2})
	if err != nil {
		t.Fatal(err)
	}
	expire(t, s, clk, "b", "a")
	s.Tick() // the sweep runs again: the dead replica stays with the put
	err = s.PutEnd(bg, "k", r.PutToken)
	mustIs(t, err, errcode.ErrReplicaGone)
	_, err = s.GetReplicaList(bg, "k")
	mustIs(t, err, errcode.ErrReplicaNotReady)
	if err := s.PutRevoke(bg, "k", r.PutToken); err != nil {
		t.Fatal(err)
	}
	if segUsed(t, s, "a") != 0 {
		t.Fatal("revoke left a's range allocated")
	}
	if _, err := s.GetReplicaList(bg, "k"); !codesIs(err, errcode.ErrObjectNotFound) {
		t.Fatalf("after revoke: %v", err)
	}
}

// The loss of a node leaves the other replicas readable, inside the lease
// and after the sweep.
func TestReplicasNodeLossLeavesOthersReadable(t *testing.T) {
	s, clk := testService(t, nil)
	for _, n := range []string{"a", "b", "c"} {
		mount(t, s, n, 1<<20)
	}
	reps := putReplicas(t, s, "k", 100, "a", 2)
	if _, err := s.GetReplicaList(bg, "k"); err != nil { // a lease
		t.Fatal(err)
	}
	alive := []string{"a", "b", "c"}
	var others []string
	for _, n := range alive {
		if n != reps[0].Node {
			others = append(others, n)
		}
	}
	expire(t, s, clk, reps[0].Node, others...)
	info, err := s.GetReplicaList(bg, "k")
	if err != nil || kinds(info) != "DRAM@"+reps[1].Node+" " {
		t.Fatalf("after %s died: %s %v", reps[0].Node, kinds(info), err)
	}
	clk.Advance(time.Minute) // past the lease: the sweep drops the dead replica
	for _, n := range others {
		s.Ping(bg, n)
	}
	s.Tick()
	st, _ := s.Stats(bg)
	if st.DRAMReplicas != 1 || st.Objects != 1 {
		t.Fatalf("after the sweep: %+v", st)
	}
	if info, err := s.GetReplicaList(bg, "k"); err != nil || kinds(info) != "DRAM@"+reps[1].Node+" " {
		t.Fatalf("after the sweep: %s %v", kinds(info), err)
	}
}

// Offload runs from one replica (the first); when its node dies first,
// the task goes to the node of another replica.
func TestReplicasOffloadFromOneThenFromASurvivor(t *testing.T) {
	s, clk := offloadService(t, func(c *Config) { c.ClientTTL = 10 * time.Second })
	mount(t, s, "a", 1<<20)
	mount(t, s, "b", 1<<20)
	putReplicas(t, s, "k", 100, "a", 2)
	if ts, _ := heartbeat(s, "b", 0); len(ts) != 0 {
		t.Fatalf("the second replica's node got tasks %v", taskKeys(ts))
	}
	if ts, _ := heartbeat(s, "a", 0); len(ts) != 1 {
		t.Fatalf("the first replica's node got tasks %v", taskKeys(ts))
	}
	expire(t, s, clk, "a", "b")
	ts, err := heartbeat(s, "b", 0)
	if err != nil || len(ts) != 1 || ts[0].Key != "k" {
		t.Fatalf("after a died: tasks %v %v", taskKeys(ts), err)
	}
	if errs, err := s.NotifyOffloadSuccess(bg, masterapi.NotifyRequest{Node: "b", Persisted: []masterapi.SSDObject{{Key: "k", Size: 100, CRC: crcOf("k")}}}); err != nil || errs[0] != nil {
		t.Fatal(err, errs)
	}
	info, err := s.GetReplicaList(bg, "k")
	if err != nil || kinds(info) != "DRAM@b SSD@b " {
		t.Fatalf("%s %v", kinds(info), err)
	}
}

// DRAM eviction takes every DRAM replica of its victim; an SSD copy keeps
// the object.
func TestReplicasEvictionDropsEveryDRAMReplica(t *testing.T) {
	s, _ := offloadService(t, nil)
	mount(t, s, "a", 1<<20)
	mount(t, s, "b", 1<<20)
	putReplicas(t, s, "k", 100, "a", 2)
	heartbeat(s, "a", 0)
	if errs, err := s.NotifyOffloadSuccess(bg, masterapi.NotifyRequest{Node: "a", Persisted: []masterapi.SSDObject{{Key: "k", Size: 100, CRC: crcOf("k")}}}); err != nil || errs[0] != nil {
		t.Fatal(err, errs)
	}
	res, err := s.EvictDRAM(bg, []string{"k"}, false)
	if err != nil || res.Dropped != 1 {
		t.Fatalf("%+v %v", res, err)
	}
	if segUsed(t, s, "a")+segUsed(t, s, "b") != 0 {
		t.Fatal("eviction left a DRAM replica")
	}
	if info, err := s.GetReplicaList(bg, "k"); err != nil || kinds(info) != "SSD@a " {
		t.Fatalf("%s %v", kinds(info), err)
	}
	// Watermark or allocation eviction: the same, object by object.
	putReplicas(t, s, "m", 100, "b", 2) // no SSD copy: eviction drops the object
	heartbeat(s, "b", 0)
	s.NotifyOffloadSuccess(bg, masterapi.NotifyRequest{Node: "b", Failed: []masterapi.OffloadFailure{{Key: "m", Reason: "test"}}})
	if n := s.EvictNow(); n != 1 {
		t.Fatalf("eviction round dropped %d", n)
	}
	if st, _ := s.Stats(bg); st.DRAMReplicas != 0 || st.Objects != 1 {
		t.Fatalf("%+v", st)
	}
}

// A bad replica report drops that replica only; a Remove frees them all.
func TestReplicasBadReportDropsOneRemoveAll(t *testing.T) {
	s, _ := testService(t, nil)
	for _, n := range []string{"a", "b", "c"} {
		mount(t, s, n, 1<<20)
	}
	reps := putReplicas(t, s, "k", 100, "a", 3)
	bad := reps[1]
	bad.Status = masterapi.Complete
	if err := s.ReportBadReplica(bg, "k", crcOf("k"), bad); err != nil {
		t.Fatal(err)
	}
	info, err := s.GetReplicaList(bg, "k")
	if err != nil || len(info.Replicas) != 2 || info.Replicas[0].Node != reps[0].Node || info.Replicas[1].Node != reps[2].Node {
		t.Fatalf("after the report: %s %v", kinds(info), err)
	}
	if err := s.ReportBadReplica(bg, "k", crcOf("k"), bad); !codesIs(err, errcode.ErrReplicaNotFound) {
		t.Fatalf("second report: %v", err)
	}
	if err := s.Remove(bg, "k", true); err != nil {
		t.Fatal(err)
	}
	if st, _ := s.Stats(bg); st.SegmentUsed != 0 || st.DRAMReplicas != 0 || st.Objects != 0 {
		t.Fatalf("after remove: %+v", st)
	}
}

// A forced Remove of a put in progress parks every replica's range until
// the writer's PutEnd (refused) frees them.
func TestReplicasForcedRemoveParksEveryRange(t *testing.T) {
	s, _ := testService(t, nil)
	mount(t, s, "a", 1<<20)
	mount(t, s, "b", 1<<20)
	r, err := s.PutStart(bg, masterapi.PutStartRequest{Key: "k", Size: 4096, Replicas: 2})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Remove(bg, "k", true); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"a", "b"} {
		if segUsed(t, s, n) == 0 {
			t.Fatalf("node %s: the range of a put in progress was freed by a forced Remove", n)
		}
	}
	mustIs(t, s.PutEnd(bg, "k", r.PutToken), masterapi.ErrStalePut)
	if segUsed(t, s, "a")+segUsed(t, s, "b") != 0 {
		t.Fatal("the stale PutEnd did not free the parked ranges")
	}
}

// A rebuild (master restart, failover) learns the replicas of one put from
// every node that holds one.
func TestReplicasReRegisteredFromEveryNode(t *testing.T) {
	s, _ := testService(t, nil)
	for _, n := range []string{"a", "b", "c"} {
		if err := s.MountSegment(bg, masterapi.MountRequest{Node: n, Endpoint: n + ":1", Segment: "seg0", Size: 1 << 20, HoldAllocation: true}); err != nil {
			t.Fatal(err)
		}
	}
	// A put of the previous master, after the removal log began.
	obj := masterapi.DRAMObject{Key: "k", Offset: 0, Length: 100, CRC: 7, PutToken: s.RemovalLog().Origin + 1<<40}
	for _, n := range []string{"a", "b", "a"} { // a's call sent twice
		if errs, err := s.ReRegisterDRAMObjects(bg, n, "seg0", []masterapi.DRAMObject{obj}, true); err != nil || errs[0] != nil {
			t.Fatalf("node %s: %v %v", n, err, errs)
		}
	}
	other := obj
	other.CRC = 8
	errs, err := s.ReRegisterDRAMObjects(bg, "c", "seg0", []masterapi.DRAMObject{other}, true)
	if err != nil {
		t.Fatal(err)
	}
	mustIs(t, errs[0], errcode.ErrChecksumConflict)
	info, err := s.GetReplicaList(bg, "k")
	if err != nil || kinds(info) != "DRAM@a DRAM@b " {
		t.Fatalf("%s %v", kinds(info), err)
	}
	newer := obj
	newer.PutToken++
	newer.Offset = 4096
	if errs, err := s.ReRegisterDRAMObjects(bg, "c", "seg0", []masterapi.DRAMObject{newer}, true); err != nil || errs[0] != nil {
		t.Fatal(err, errs)
	}
	if info, err := s.GetReplicaList(bg, "k"); err != nil || kinds(info) != "DRAM@c " {
		t.Fatalf("a newer put replaces both: %s %v", kinds(info), err)
	}
}

func TestReplicasBatchPutStart(t *testing.T) {
	s, _ := testService(t, nil)
	mount(t, s, "a", 1<<20)
	mount(t, s, "b", 1<<20)
	res, err := s.BatchPutStart(bg, []masterapi.PutStartRequest{{Key: "x", Size: 10, Replicas: 2}, {Key: "y", Size: 10, Replicas: 3}, {Key: "z", Size: 10}})
	if err != nil {
		t.Fatal(err)
	}
	if res[0].Err != nil || len(res[0].Replicas()) != 2 || !distinct(res[0].Replicas()) {
		t.Fatalf("x: %+v", res[0])
	}
	mustIs(t, res[1].Err, errcode.ErrNoAvailableHandle)
	if res[2].Err != nil || len(res[2].More) != 0 {
		t.Fatalf("z: %+v", res[2])
	}
	for _, i := range []int{0, 2} {
		if err := s.PutEnd(bg, []string{"x", "y", "z"}[i], res[i].PutToken); err != nil {
			t.Fatal(err)
		}
	}
}

// An object whose SSD copy dies with its node, and that keeps a DRAM
// replica on another node, is offloaded again from there: DRAM eviction
// would otherwise drop it for want of an SSD copy.
func TestReplicasSSDCopyRestoredFromAnotherNode(t *testing.T) {
	s, clk := offloadService(t, func(c *Config) { c.ClientTTL = 10 * time.Second })
	mount(t, s, "a", 1<<20)
	mount(t, s, "b", 1<<20)
	putReplicas(t, s, "k", 100, "a", 2)
	put(t, s, "one", 100, "a") // one replica: lost with a, nothing to restore
	if ts, _ := heartbeat(s, "a", 0); len(ts) != 2 {
		t.Fatalf("tasks of a: %v", taskKeys(ts))
	}
	persisted := []masterapi.SSDObject{{Key: "k", Size: 100, CRC: crcOf("k")}, {Key: "one", Size: 100, CRC: crcOf("one")}}
	if _, err := s.NotifyOffloadSuccess(bg, masterapi.NotifyRequest{Node: "a", Persisted: persisted}); err != nil {
		t.Fatal(err)
	}
	if ts, _ := heartbeat(s, "b", 0); len(ts) != 0 {
		t.Fatalf("b got tasks %v while a's SSD copy is readable", taskKeys(ts))
	}
	expire(t, s, clk, "a", "b")
	ts, err := heartbeat(s, "b", 0)
	if err != nil || len(ts) != 1 || ts[0].Key != "k" {
		t.Fatalf("after a died: tasks of b %v %v", taskKeys(ts), err)
	}
	if _, err := s.NotifyOffloadSuccess(bg, masterapi.NotifyRequest{Node: "b", Persisted: persisted[:1]}); err != nil {
		t.Fatal(err)
	}
	if res, err := s.EvictDRAM(bg, []string{"k"}, false); err != nil || res.Dropped != 1 {
		t.Fatalf("%+v %v", res, err)
	}
	if info, err := s.GetReplicaList(bg, "k"); err != nil || kinds(info) != "SSD@b " {
		t.Fatalf("%s %v", kinds(info), err)
	}
}
