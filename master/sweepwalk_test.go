package master

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/tierstore/tierstore/internal/errcode"
)

// objectsOn is how many objects of s hold a DRAM replica on node, dead or
// alive.
func objectsOn(s *Service, node string) int {
	n := 0
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		for _, o := range s.everyObject(sh) {
			for _, m := range o.drams() {
				if m.seg.node.id == node {
					n++
				}
			}
		}
		sh.mu.Unlock()
	}
	return n
}

// shardReleased reports whether shard 0's lock is free while walk (a walk
// over every object of it) has yielded, failing the test if not.
func shardReleased(t *testing.T, s *Service, walk string) bool {
	t.Helper()
	if !s.shards[0].mu.TryLock() {
		t.Errorf("the shard lock is held while the %s has yielded", walk)
		return false
	}
	s.shards[0].mu.Unlock()
	return true
}

// settledAfterLease ends key's lease (node n1 keeps pinging), ticks, and
// fails the test unless key is gone and the ticks since visits was read
// visited at most 2 of the master's n objects.
func settledAfterLease(t *testing.T, s *Service, clk *ManualClock, key string, visits int64, n int) {
	t.Helper()
	clk.Advance(s.cfg.DefaultKVLeaseTTL + time.Second)
	if _, err := s.Ping(bg, "n1"); err != nil {
		t.Fatal(err)
	}
	s.Tick() // the lease has ended: the object goes
	if _, err := s.GetReplicaList(bg, key); !errors.Is(err, errcode.ErrObjectNotFound) {
		t.Fatalf("lookup of %s after the lease: %v, want OBJECT_NOT_FOUND", key, err)
	}
	if v := s.scanVisits.Load() - visits; v > 2 {
		t.Fatalf("the ticks visited %d objects to settle one (the master holds %d)", v, n)
	}
}

// The sweep after a node died releases the shard's lock every scanHold
// objects: lookups and puts go through in between, and what is put then
// is kept; the dead node's objects are gone after it.
func TestSweepReleasesShardLock(t *testing.T) {
	s, _ := testService(t, func(c *Config) { c.Shards = 1 })
	const n = 2*scanHold + 100
	mount(t, s, "n1", 64*(n+10))
	mount(t, s, "n2", 64*(n+10))
	for i := range n {
		put(t, s, fmt.Sprintf("k%d", i), 64, []string{"n1", "n2"}[i%2])
	}
	var during []string
	s.hooks.scanYielded = func() {
		if !shardReleased(t, s, "sweep") {
			return // (a put or lookup here would wait for it for ever)
		}
		if _, err := s.ExistKey(bg, "k0"); err != nil {
			t.Fatal(err)
		}
		k := fmt.Sprintf("other%d", len(during))
		put(t, s, k, 64, "n1")
		during = append(during, k)
	}
	if !s.ExpireNode("n2") {
		t.Fatal("n2 unknown")
	}
	if len(during) != n/scanHold {
		t.Fatalf("the sweep yielded %d times, want %d", len(during), n/scanHold)
	}
	if left := objectsOn(s, "n2"); left != 0 {
		t.Fatalf("%d objects still hold a replica on the dead node n2", left)
	}
	for _, k := range append(during, "k0") {
		if ok, err := s.ExistKey(bg, k); err != nil || !ok {
			t.Fatalf("%s, on the live node, is gone after the sweep (%v, %v)", k, ok, err)
		}
	}
}

// A node that dies while a sweep walks (its lock released between two
// steps) leaves objects the walk had already passed: sweepDirty stays set,
// and the next tick's sweep drops their replicas.
func TestSweepAgainForDeathDuringWalk(t *testing.T) {
	s, _ := testService(t, func(c *Config) { c.Shards = 1 })
	const n = 2*scanHold + 100
	for _, node := range []string{"n1", "n2", "n3"} {
		mount(t, s, node, 64*(n+10))
	}
	for i := range n {
		put(t, s, fmt.Sprintf("k%d", i), 64, []string{"n1", "n3"}[i%2])
	}
	died := false
	s.hooks.scanYielded = func() {
		if died {
			return
		}
		died = true
		// n3 dies now; the tick's sweep is to follow (as expireNodes
		// would, without its own sweep).
		s.nodesMu.Lock()
		s.retireLocked(s.nodes["n3"])
		s.nodesMu.Unlock()
		s.sweepDirty.Store(true)
	}
	if !s.ExpireNode("n2") { // n2 holds nothing: the sweep walks for it
		t.Fatal("n2 unknown")
	}
	if !died {
		t.Fatal("the sweep never yielded")
	}
	s.hooks.scanYielded = nil
	if !s.sweepDirty.Load() {
		t.Fatal("sweepDirty cleared by a sweep that had passed objects of a node that died during it")
	}
	s.Tick()
	if left := objectsOn(s, "n3"); left != 0 {
		t.Fatalf("after the next tick %d objects still hold a replica on n3, dead since the previous sweep", left)
	}
	if got := objectsOn(s, "n1"); got != n/2 {
		t.Fatalf("%d objects on n1, want %d", got, n/2)
	}
}

// An object a removal leaves without a replica inside its lease is kept
// (lookups answer REPLICA_IS_GONE) and deleted by the first tick after its
// lease, without a walk of every object: only the objects so kept are
// visited, whatever the master holds.
func TestEmptyLeasedObjectSettledWithoutWalk(t *testing.T) {
	s, clk := testService(t, func(c *Config) { c.Shards = 1 })
	const n = 3000
	mount(t, s, "n1", 64*(n+10))
	for i := range n {
		put(t, s, fmt.Sprintf("k%d", i), 64, "n1")
	}
	info, err := s.GetReplicaList(bg, "k0") // leases k0
	if err != nil {
		t.Fatal(err)
	}
	if err := s.ReportBadReplica(bg, "k0", info.CRC, info.Replicas[0]); err != nil {
		t.Fatal(err)
	}
	if _, err := s.GetReplicaList(bg, "k0"); !errors.Is(err, errcode.ErrReplicaGone) {
		t.Fatalf("lookup inside the lease of an object without replicas: %v, want REPLICA_IS_GONE", err)
	}
	if s.sweepDirty.Load() {
		t.Fatal("a leased object left empty asks for a sweep of every object")
	}
	visits := s.scanVisits.Load()
	s.Tick() // inside the lease: kept
	if _, err := s.GetReplicaList(bg, "k0"); !errors.Is(err, errcode.ErrReplicaGone) {
		t.Fatalf("lookup inside the lease after a tick: %v, want REPLICA_IS_GONE", err)
	}
	settledAfterLease(t, s, clk, "k0", visits, n)
	if s.heldPending.Load() || len(s.shards[0].held) != 0 {
		t.Fatalf("still held after the object went: %v, %d", s.heldPending.Load(), len(s.shards[0].held))
	}
	if ok, err := s.ExistKey(bg, "k1"); err != nil || !ok {
		t.Fatalf("k1 after the ticks: %v %v", ok, err)
	}
}

// A leased object whose replica died with its node keeps it for the lease
// (lookups answer REPLICA_IS_GONE): the sweep after the death holds it,
// and the tick after the lease drops it visiting the held objects only,
// not every object again each tick.
func TestDeadReplicaHeldForLeaseSettledWithoutWalk(t *testing.T) {
	s, clk := testService(t, func(c *Config) { c.Shards = 1 })
	const n = 3000
	mount(t, s, "n1", 64*(n+10))
	mount(t, s, "n2", 64*10)
	for i := range n {
		put(t, s, fmt.Sprintf("k%d", i), 64, "n1")
	}
	put(t, s, "d", 64, "n2")
	if _, err := s.GetReplicaList(bg, "d"); err != nil { // leases d
		t.Fatal(err)
	}
	if !s.ExpireNode("n2") { // the full sweep: d's replica is dead, d leased
		t.Fatal("n2 unknown")
	}
	if s.sweepDirty.Load() {
		t.Fatal("a dead replica kept for a lease asks for another sweep of every object")
	}
	if _, err := s.GetReplicaList(bg, "d"); !errors.Is(err, errcode.ErrReplicaGone) {
		t.Fatalf("lookup inside the lease of an object on a dead node: %v, want REPLICA_IS_GONE", err)
	}
	visits := s.scanVisits.Load()
	s.Tick()
	settledAfterLease(t, s, clk, "d", visits, n)
	if err := s.Check(); err != nil {
		t.Fatal(err)
	}
}
