package master

import (
	"fmt"
	"testing"
	"time"

	"github.com/tierstore/tierstore/internal/errcode"
	"github.com/tierstore/tierstore/internal/testkit"
	"github.com/tierstore/tierstore/masterapi"
)

// TestBackgroundLoop: with MonitorInterval set, the loop expires a silent
// node and evicts above the high watermark without anyone calling Tick.
func TestBackgroundLoop(t *testing.T) {
	s, clk := testService(t, func(c *Config) {
		c.MonitorInterval = time.Millisecond
		c.EvictionHighWatermarkRatio = 0.5
		c.EvictionRatio = 0.5
	})
	mount(t, s, "a", 64<<10)
	mount(t, s, "b", 64<<10)
	for i := 0; i < 12; i++ { // 12 x 4 KiB = 75% of a's segment
		put(t, s, fmt.Sprint("k", i), 4<<10, "a")
	}
	testkit.Eventually(t, "watermark eviction", func() bool {
		st, _ := s.Stats(bg)
		return st.Evictions > 0 && st.SegmentUsed <= 32<<10
	})
	clk.Advance(s.cfg.ClientTTL / 2)
	s.Ping(bg, "b")
	clk.Advance(s.cfg.ClientTTL/2 + time.Second)
	testkit.Eventually(t, "node expiry", func() bool { st, _ := s.Stats(bg); return st.ExpiredNodes == 1 && st.Nodes == 1 })
	if p, _ := s.Ping(bg, "a"); p.Status != masterapi.NeedRemount {
		t.Fatal("expired node not told to remount")
	}
	if p, _ := s.Ping(bg, "b"); p.Status != masterapi.NodeOK {
		t.Fatal("live node expired")
	}
}

// TestMasterRestartRecovery: a new master learns SSD objects from nodes that
// remount and re-register (invariant 6).
func TestMasterRestartRecovery(t *testing.T) {
	s1, _ := testService(t, nil)
	mount(t, s1, "a", 1<<20)
	s1.ReRegisterSSDObjects(bg, "a", []masterapi.SSDObject{{Key: "x", Size: 10, CRC: 3}})
	s1.Close()
	if _, err := s1.Stats(bg); !codesIs(err, errcode.ErrShuttingDown) {
		t.Fatalf("after close: %v", err)
	}

	s2, _ := testService(t, nil)
	_, err := s2.ReRegisterSSDObjects(bg, "a", []masterapi.SSDObject{{Key: "x", Size: 10, CRC: 3}})
	mustIs(t, err, errcode.ErrNeedRemount)
	if p, _ := s2.Ping(bg, "a"); p.Status != masterapi.NeedRemount {
		t.Fatal("new master knows the node")
	}
	mount(t, s2, "a", 1<<20)
	if errs, err := s2.ReRegisterSSDObjects(bg, "a", []masterapi.SSDObject{{Key: "x", Size: 10, CRC: 3}}); err != nil || errs[0] != nil {
		t.Fatal(err, errs)
	}
	info, err := s2.GetReplicaList(bg, "x")
	if err != nil || kinds(info) != "SSD@a " || info.Replicas[0].Endpoint != "a:1" {
		t.Fatalf("%+v %v", info, err)
	}
}

// TestNodeDeathReleasesOffloadPin: the expired node's tasks vanish with it.
func TestNodeDeathReleasesOffloadPin(t *testing.T) {
	s, clk := offloadService(t, func(c *Config) { c.ClientTTL = 10 * time.Second })
	mount(t, s, "a", 1<<20)
	put(t, s, "k", 64, "a")
	if ts, _ := heartbeat(s, "a", 0); len(ts) != 1 {
		t.Fatal("no task")
	}
	clk.Advance(time.Minute)
	s.Tick()
	if st, _ := s.Stats(bg); st.OffloadInFlight != 0 || st.Objects != 0 {
		t.Fatalf("stats after expiry %+v", st)
	}
	// The node returns and answers the old task: the object is gone, so
	// the answer is refused (the node deletes the copy)...
	mount(t, s, "a", 1<<20)
	errs, err := s.NotifyOffloadSuccess(bg, masterapi.NotifyRequest{Node: "a", Persisted: []masterapi.SSDObject{{Key: "k", Size: 64, CRC: crcOf("k")}}})
	if err != nil {
		t.Fatal(err)
	}
	mustIs(t, errs[0], errcode.ErrObjectNotFound)
	// ...while re-registration after the remount creates it.
	if errs, err := s.ReRegisterSSDObjects(bg, "a", []masterapi.SSDObject{{Key: "k", Size: 64, CRC: crcOf("k")}}); err != nil || errs[0] != nil {
		t.Fatal(err, errs)
	}
	if info, err := s.GetReplicaList(bg, "k"); err != nil || kinds(info) != "SSD@a " {
		t.Fatalf("%s %v", kinds(info), err)
	}
}

// metricValue returns the value of the metric name whose labels include
// label=value ("" matches an unlabelled metric).
func metricValue(t *testing.T, s *Service, name, label, value string) float64 {
	t.Helper()
	mfs, err := s.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			ok := label == ""
			for _, lp := range m.GetLabel() {
				if lp.GetName() == label && lp.GetValue() == value {
					ok = true
				}
			}
			if !ok {
				continue
			}
			switch {
			case m.GetGauge() != nil:
				return m.GetGauge().GetValue()
			case m.GetCounter() != nil:
				return m.GetCounter().GetValue()
			}
		}
	}
	t.Fatalf("metric %s{%s=%q} not found", name, label, value)
	return 0
}

func TestMetrics(t *testing.T) {
	s, clk := offloadService(t, func(c *Config) { c.EvictionRatio = 1 })
	mount(t, s, "a", 1<<20)
	put(t, s, "k", 100, "a")
	s.GetReplicaList(bg, "nope")
	s.ReRegisterSSDObjects(bg, "a", []masterapi.SSDObject{{Key: "d", Size: 50, CRC: 1}})
	for _, c := range []struct {
		name, label, value string
		want               float64
	}{
		{"tierstore_master_objects", "", "", 2},
		{"tierstore_master_bytes", "tier", "dram", 100},
		{"tierstore_master_bytes", "tier", "ssd", 50},
		{"tierstore_master_offload_queue_depth", "", "", 1},
		{"tierstore_master_errors_total", "code", "OBJECT_NOT_FOUND", 1},
		{"tierstore_master_nodes", "", "", 1},
		{"tierstore_master_evictions_total", "", "", 0},
	} {
		if got := metricValue(t, s, c.name, c.label, c.value); got != c.want {
			t.Errorf("%s{%s=%q} = %v, want %v", c.name, c.label, c.value, got, c.want)
		}
	}
	heartbeat(s, "a", 0) // a failure answers a fetched task only
	s.NotifyOffloadSuccess(bg, masterapi.NotifyRequest{Node: "a", Failed: []masterapi.OffloadFailure{{Key: "k"}}})
	clk.Advance(time.Hour)
	s.Ping(bg, "a")
	s.EvictNow()
	if got := metricValue(t, s, "tierstore_master_evictions_total", "", ""); got != 1 {
		t.Fatalf("evictions %v", got)
	}
	if got := metricValue(t, s, "tierstore_master_offload_failed_total", "", ""); got != 1 {
		t.Fatalf("offload failed %v", got)
	}
}

// TestRestartedNodeRetiresOldIncarnation: a node that restarts (new
// incarnation or new endpoint) and mounts again before client_ttl does not
// get its old, now empty, DRAM replicas back.
func TestRestartedNodeRetiresOldIncarnation(t *testing.T) {
	s, _ := testService(t, func(c *Config) { c.ClientTTL = time.Hour })
	inc := func(n, e, i string) error {
		return s.MountSegment(bg, masterapi.MountRequest{Node: n, Endpoint: e, Segment: "seg0", Size: 1 << 20, Incarnation: i})
	}
	if err := inc("a", "a:1", "p1"); err != nil {
		t.Fatal(err)
	}
	put(t, s, "k", 100, "a")
	s.ExistKey(bg, "k")
	if err := inc("a", "a:1", "p1"); err != nil { // same process: no-op
		t.Fatal(err)
	}
	if _, err := s.GetReplicaList(bg, "k"); err != nil {
		t.Fatalf("same incarnation lost the replica: %v", err)
	}
	if err := inc("a", "a:1", "p2"); err != nil { // restarted
		t.Fatal(err)
	}
	_, err := s.GetReplicaList(bg, "k")
	mustIs(t, err, errcode.ErrReplicaGone) // leased: gone, not not-found
	put(t, s, "k2", 100, "a")
	if err := inc("a", "a:2", "p2"); err != nil { // new endpoint: restarted too
		t.Fatal(err)
	}
	_, err = s.GetReplicaList(bg, "k2")
	mustIs(t, err, errcode.ErrObjectNotFound) // never looked up: no lease
	if st, _ := s.Stats(bg); st.ExpiredNodes != 2 || st.Nodes != 1 || st.SegmentUsed != 0 {
		t.Fatalf("stats %+v", st)
	}
}

// TestLeaveNode: a node that leaves is retired at once (its DRAM and SSD
// replicas are no longer listed, without waiting for client_ttl); a leave
// of an earlier incarnation leaves the current one alone; an unknown node
// is ErrClientNotFound.
func TestLeaveNode(t *testing.T) {
	s, _ := testService(t, nil)
	inc := func(node, inc string) {
		t.Helper()
		if err := s.MountSegment(bg, masterapi.MountRequest{Node: node, Segment: node + "/seg", Size: 1 << 20, Incarnation: inc}); err != nil {
			t.Fatal(err)
		}
	}
	inc("a", "a1")
	inc("b", "b1")
	put(t, s, "mem", 4<<10, "a")
	if errs, err := s.ReRegisterSSDObjects(bg, "a", []masterapi.SSDObject{{Key: "disk", Size: 10, CRC: 3}}); err != nil || errs[0] != nil {
		t.Fatal(err, errs)
	}
	put(t, s, "onb", 4<<10, "b")

	mustIs(t, s.LeaveNode(bg, "nobody", ""), errcode.ErrClientNotFound)
	if err := s.LeaveNode(bg, "a", "a0"); err != nil { // an earlier incarnation's late leave
		t.Fatal(err)
	}
	if p, _ := s.Ping(bg, "a"); p.Status != masterapi.NodeOK { // (a lookup would take a lease)
		t.Fatal("a retired by an earlier incarnation's leave")
	}
	if err := s.LeaveNode(bg, "a", "a1"); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"mem", "disk"} {
		if ok, err := s.ExistKey(bg, k); err != nil || ok {
			t.Fatalf("%s still listed after its node left: %v %v", k, ok, err)
		}
	}
	if p, _ := s.Ping(bg, "a"); p.Status != masterapi.NeedRemount {
		t.Fatal("a node that left is still known")
	}
	if ok, err := s.ExistKey(bg, "onb"); err != nil || !ok {
		t.Fatalf("another node's object: %v %v", ok, err)
	}
	inc("a", "a2") // it comes back and re-registers
	if errs, err := s.ReRegisterSSDObjects(bg, "a", []masterapi.SSDObject{{Key: "disk", Size: 10, CRC: 3}}); err != nil || errs[0] != nil {
		t.Fatal(err, errs)
	}
	if ok, err := s.ExistKey(bg, "disk"); err != nil || !ok {
		t.Fatalf("re-registered after the return: %v %v", ok, err)
	}
}
