package master

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/tierstore/tierstore/internal/errcode"
	"github.com/tierstore/tierstore/masterapi"
)

// The tests in this file guard issue 9 item 7: every lease check on every
// removal path (docs/design.md invariant 4, Mooncake #4508) has a test of
// its own that fails when that check is removed. Each sets up one object
// whose lease is active, runs one removal path, and checks that a lookup
// inside the lease answers what the lease promises: the object readable, or
// REPLICA_IS_GONE (-712) when its bytes are really gone, never
// OBJECT_NOT_FOUND (-704).

// leased stores key in node a's DRAM and grants it a lease.
func leased(t *testing.T, s *Service, key string) masterapi.Replica {
	t.Helper()
	r := put(t, s, key, 100, "a")
	if ok, err := s.ExistKey(bg, key); !ok || err != nil {
		t.Fatalf("lookup of %s: %v %v", key, ok, err)
	}
	r.Status = masterapi.Complete
	return r
}

// leasedOnSSD registers key on node a's SSD only and grants it a lease.
func leasedOnSSD(t *testing.T, s *Service, key string) {
	t.Helper()
	if errs, err := s.ReRegisterSSDObjects(bg, "a", []masterapi.SSDObject{{Key: key, Size: 100, CRC: crcOf(key)}}); err != nil || errs[0] != nil {
		t.Fatal(errs, err)
	}
	if ok, err := s.ExistKey(bg, key); !ok || err != nil {
		t.Fatalf("lookup of %s: %v %v", key, ok, err)
	}
}

// mustBeGone checks that key answers REPLICA_IS_GONE (not OBJECT_NOT_FOUND).
func mustBeGone(t *testing.T, s *Service, key string) {
	t.Helper()
	_, err := s.GetReplicaList(bg, key)
	if !errors.Is(err, errcode.ErrReplicaGone) {
		t.Fatalf("%s inside its lease: %v, want REPLICA_IS_GONE (-712)", key, err)
	}
}

// afterLease ends every lease and runs the background work.
func afterLease(s *Service, clk *ManualClock) {
	clk.Advance(s.cfg.DefaultKVLeaseTTL + time.Second)
	s.Tick()
}

func leaseService(t *testing.T, mut func(*Config)) (*Service, *ManualClock) {
	s, clk := testService(t, func(c *Config) {
		c.ClientTTL = time.Hour
		if mut != nil {
			mut(c)
		}
	})
	mount(t, s, "a", 1<<20)
	return s, clk
}

// Sweep: an object left without replicas inside its lease is deleted by
// the sweep only after the lease (Mooncake #4508: the sweep ignored it).
func TestLeaseGuardSweep(t *testing.T) {
	s, clk := leaseService(t, nil)
	r := leased(t, s, "k")
	if err := s.ReportBadReplica(bg, "k", crcOf("k"), r); err != nil {
		t.Fatal(err)
	}
	s.Tick() // the sweep runs: a replica was lost
	mustBeGone(t, s, "k")
	afterLease(s, clk)
	_, err := s.GetReplicaList(bg, "k")
	mustIs(t, err, errcode.ErrObjectNotFound)
}

// Dead-node clear: the sweep after a node's expiry keeps the unreadable
// replicas of a leased object (and their retired incarnation's row in
// Stats) until the lease ends.
func TestLeaseGuardDeadNodeClear(t *testing.T) {
	s, clk := leaseService(t, nil)
	leased(t, s, "k")
	s.ExpireNode("a")
	mustBeGone(t, s, "k")
	st, _ := s.Stats(bg)
	if len(st.PerNode) != 1 || st.PerNode[0].Alive || st.PerNode[0].DRAMReplicas != 1 {
		t.Fatalf("the expired incarnation's replica was cleared inside the lease: %+v", st.PerNode)
	}
	afterLease(s, clk)
	if st, _ := s.Stats(bg); len(st.PerNode) != 0 || st.Objects != 0 {
		t.Fatalf("after the lease: %+v", st)
	}
}

// Bad-replica report: the last replica reported bad inside the lease.
func TestLeaseGuardBadReplicaReport(t *testing.T) {
	s, clk := leaseService(t, nil)
	r := leased(t, s, "k")
	if err := s.ReportBadReplica(bg, "k", crcOf("k"), r); err != nil {
		t.Fatal(err)
	}
	mustBeGone(t, s, "k")
	afterLease(s, clk)
	_, err := s.GetReplicaList(bg, "k")
	mustIs(t, err, errcode.ErrObjectNotFound)
}

// Reconcile: the node's list no longer has the leased object's only copy.
func TestLeaseGuardReconcile(t *testing.T) {
	s, _ := leaseService(t, nil)
	leasedOnSSD(t, s, "k")
	if res, err := reconcileAll(s, "a", nil); err != nil || res.Dropped != 1 {
		t.Fatal(res, err)
	}
	mustBeGone(t, s, "k")
}

// Offload failure: the node answers that the leased object's only copy is
// not on its SSD.
func TestLeaseGuardOffloadFailure(t *testing.T) {
	s, _ := leaseService(t, func(c *Config) { c.EnableOffload = true })
	leasedOnSSD(t, s, "k")
	if _, err := s.NotifyOffloadSuccess(bg, masterapi.NotifyRequest{Node: "a", Failed: []masterapi.OffloadFailure{{Key: "k", Reason: "corrupt entry dropped"}}}); err != nil {
		t.Fatal(err)
	}
	mustBeGone(t, s, "k")
}

// DRAM eviction: a leased object whose only readable replica is in DRAM
// is never a victim.
func TestLeaseGuardDRAMEviction(t *testing.T) {
	s, clk := leaseService(t, func(c *Config) { c.EvictionRatio = 1 })
	leased(t, s, "k")
	if n := s.EvictNow(); n != 0 {
		t.Fatalf("evicted %d leased objects", n)
	}
	if _, err := s.GetReplicaList(bg, "k"); err != nil {
		t.Fatal(err)
	}
	afterLease(s, clk)
	if n := s.EvictNow(); n != 1 {
		t.Fatal("not evicted after the lease")
	}
}

// DRAM eviction, re-check: a lease granted after the round picked its
// victims still protects the victim (checked again under its shard lock).
func TestLeaseGuardDRAMEvictionRecheck(t *testing.T) {
	s, _ := leaseService(t, func(c *Config) { c.EvictionRatio = 1 })
	put(t, s, "k", 100, "a")
	s.hooks.victimsPicked = func() {
		if ok, _ := s.ExistKey(bg, "k"); !ok {
			t.Error("lookup miss")
		}
	}
	if n := s.EvictNow(); n != 0 {
		t.Fatal("a victim leased after the scan was evicted")
	}
	if _, err := s.GetReplicaList(bg, "k"); err != nil {
		t.Fatal(err)
	}
}

// EvictDRAM: the DRAM replica of a leased object that has an SSD copy
// stays while a reader of the lease was given only the DRAM replica.
func TestLeaseGuardEvictDRAM(t *testing.T) {
	s, clk := leaseService(t, nil)
	put(t, s, "k", 100, "a")
	if info, err := s.GetReplicaList(bg, "k"); err != nil || kinds(info) != "DRAM@a " {
		t.Fatal(kinds(info), err)
	}
	s.ReRegisterSSDObjects(bg, "a", []masterapi.SSDObject{{Key: "k", Size: 100, CRC: crcOf("k")}})
	if n, err := s.EvictDRAM(bg, nil, true); n.Dropped != 0 || n.Leased != 1 || err != nil {
		t.Fatalf("EvictDRAM dropped %d DRAM replicas a reader depends on (%+v): %v", n.Dropped, n, err)
	}
	afterLease(s, clk)
	if n, err := s.EvictDRAM(bg, nil, true); n.Dropped != 1 || err != nil {
		t.Fatalf("after the lease: %d %v", n, err)
	}
}

// SSD eviction: the leased object's only readable replica is kept
// (answered in Keep) and stays readable.
func TestLeaseGuardSSDEviction(t *testing.T) {
	s, _ := leaseService(t, nil)
	leasedOnSSD(t, s, "k")
	res, err := s.EvictSSDReplica(bg, "a", []string{"k"})
	if err != nil || res.Dropped != 0 || fmt.Sprint(res.Keep) != "[k]" {
		t.Fatalf("%+v %v", res, err)
	}
	if info, err := s.GetReplicaList(bg, "k"); err != nil || kinds(info) != "SSD@a " {
		t.Fatal(kinds(info), err)
	}
}

// Remove: a non-forced Remove of a leased object is refused (-706).
func TestLeaseGuardRemove(t *testing.T) {
	s, clk := leaseService(t, nil)
	leased(t, s, "k")
	err := s.Remove(bg, "k", false)
	if !errors.Is(err, errcode.ErrObjectHasLease) || errcode.Of(err) != -706 {
		t.Fatalf("Remove of a leased object: %v", err)
	}
	if _, err := s.GetReplicaList(bg, "k"); err != nil {
		t.Fatal(err)
	}
	afterLease(s, clk)
	if err := s.Remove(bg, "k", false); err != nil {
		t.Fatal(err)
	}
}

// RemoveAll: a non-forced RemoveAll skips leased objects.
func TestLeaseGuardRemoveAll(t *testing.T) {
	s, _ := leaseService(t, nil)
	leased(t, s, "k")
	put(t, s, "free", 100, "a")
	if n, err := s.RemoveAll(bg, false); n != 1 || err != nil {
		t.Fatalf("RemoveAll removed %d: %v", n, err)
	}
	if _, err := s.GetReplicaList(bg, "k"); err != nil {
		t.Fatal(err)
	}
}
