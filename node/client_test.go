package node

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tierstore/tierstore/client"
	"github.com/tierstore/tierstore/internal/errcode"
	"github.com/tierstore/tierstore/internal/keyspec"
	"github.com/tierstore/tierstore/master"
	"github.com/tierstore/tierstore/masterapi"
)

func TestInProcessPutGetExistsRemove(t *testing.T) {
	m := newMaster(t, testMasterConfig())
	n := startTestNode(t, m, "", nil)
	c := newTestClient(t, client.Config{Master: m, LocalNode: n})
	ctx := context.Background()
	val := rnd(100 << 10)
	if err := c.Put(ctx, "k1", val); err != nil {
		t.Fatal(err)
	}
	if err := c.Put(ctx, "k1", val); !errors.Is(err, errcode.ErrObjectExists) {
		t.Fatalf("second put: %v", err)
	}
	got, err := c.Get(ctx, "k1")
	if err != nil || !bytes.Equal(got, val) {
		t.Fatalf("get: %v", err)
	}
	if rs := c.ReadStats(); rs.LocalDRAM != 1 {
		t.Fatalf("read stats %+v", rs)
	}
	if ok, err := c.Exists(ctx, "k1"); !ok || err != nil {
		t.Fatalf("exists: %v %v", ok, err)
	}
	if ok, err := c.Exists(ctx, "nope"); ok || err != nil {
		t.Fatalf("exists of a missing key: %v %v", ok, err)
	}
	if _, err := c.Get(ctx, "nope"); !errors.Is(err, errcode.ErrObjectNotFound) {
		t.Fatalf("get of a missing key: %v", err)
	}
	if err := c.Remove(ctx, "k1", false); !errors.Is(err, errcode.ErrObjectHasLease) {
		t.Fatalf("remove inside the lease: %v", err)
	}
	if err := c.Remove(ctx, "k1", true); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Get(ctx, "k1"); !errors.Is(err, errcode.ErrObjectNotFound) {
		t.Fatalf("get after remove: %v", err)
	}
	for _, bad := range []string{"", string(make([]byte, keyspec.MaxLen+1))} {
		if err := c.Put(ctx, bad, val); !errors.Is(err, errcode.ErrInvalidKey) {
			t.Fatalf("put with a key of %d bytes: %v", len(bad), err)
		}
	}
	if err := c.Put(ctx, "empty", nil); !errors.Is(err, errcode.ErrInvalidParams) {
		t.Fatalf("empty value: %v", err)
	}
}

// Two nodes with real peer sockets, a master over gRPC, clients without a
// local node: values larger than one chunk cross both ways intact, batch
// forms work, and reads are counted as remote DRAM.
func TestRemoteNodesOverGRPC(t *testing.T) {
	m := newMaster(t, testMasterConfig())
	addr := serveMaster(t, m)
	a := startTestNode(t, m, "127.0.0.1:0", nil)
	b := startTestNode(t, m, "127.0.0.1:0", nil)
	ca := newTestClient(t, client.Config{MasterAddr: addr, PreferredNode: a.Name()})
	cb := newTestClient(t, client.Config{MasterAddr: addr, PreferredNode: b.Name()})
	ctx := context.Background()
	big := rnd(2*writeChunk + 12345)
	if err := ca.Put(ctx, "big", big); err != nil {
		t.Fatal(err)
	}
	got, err := cb.Get(ctx, "big")
	if err != nil || !bytes.Equal(got, big) {
		t.Fatalf("cross-node get of a 3-chunk value: %v", err)
	}
	if a.Stats().PeerWrites != 1 || a.Stats().PeerReadsDRAM != 1 {
		t.Fatalf("node a should hold the object: %+v", a.Stats())
	}
	keys := []string{"b0", "b1", "b2", "", "b4"}
	vals := [][]byte{rnd(10), rnd(70000), rnd(1), rnd(5), rnd(writeChunk + 1)}
	errs := cb.BatchPut(ctx, keys, vals)
	for i, e := range errs {
		if (i == 3) != (e != nil) {
			t.Fatalf("batch put item %d: %v", i, e)
		}
	}
	if !errors.Is(errs[3], errcode.ErrInvalidKey) {
		t.Fatalf("empty key in batch: %v", errs[3])
	}
	gv, gerrs := ca.BatchGet(ctx, append(keys, "missing"))
	for i := range keys {
		if i == 3 {
			continue
		}
		if gerrs[i] != nil || !bytes.Equal(gv[i], vals[i]) {
			t.Fatalf("batch get item %d: %v", i, gerrs[i])
		}
	}
	if !errors.Is(gerrs[5], errcode.ErrObjectNotFound) {
		t.Fatalf("batch get of a missing key: %v", gerrs[5])
	}
	ex, eerrs := ca.BatchExists(ctx, []string{"b0", "missing"})
	if !ex[0] || ex[1] || eerrs[0] != nil || eerrs[1] != nil {
		t.Fatalf("batch exists: %v %v", ex, eerrs)
	}
	if rs := ca.ReadStats(); rs.RemoteDRAM != 4 || rs.LocalDRAM != 0 {
		t.Fatalf("read stats %+v", rs)
	}
}

// PeerStats reads a node's counters over its gRPC control service, on the
// data plane's port. (The data plane's range checks are
// TestDataPlaneRangeChecks.)
func TestPeerStats(t *testing.T) {
	m := newMaster(t, testMasterConfig())
	n := startTestNode(t, m, "127.0.0.1:0", nil)
	ctx := context.Background()
	ps, err := PeerStats(ctx, n.Endpoint())
	if err != nil || ps.Segment != n.SegmentName() || len(ps.OffloadFailedBy) != int(numCauses) {
		t.Fatalf("peer stats %+v: %v", ps, err)
	}
}

// Offload: every task is answered (nothing left in flight at the master),
// persisted keys get a SSD replica, failed ones do not and are
// queued again, and Get falls back from a corrupt DRAM replica to SSD.
func TestOffloadAnswersEveryTaskAndReadFallsBack(t *testing.T) {
	m := newMaster(t, testMasterConfig())
	tr := newMemTier()
	tr.failKeys["f"] = true
	n := startTestNode(t, m, "", tr)
	c := newTestClient(t, client.Config{Master: m, LocalNode: n})
	ctx := context.Background()
	vals := map[string][]byte{"p1": rnd(5000), "p2": rnd(7000), "f": rnd(100)}
	for k, v := range vals {
		if err := c.Put(ctx, k, v); err != nil {
			t.Fatal(err)
		}
	}
	if got := n.OffloadNow(); got != 3 {
		t.Fatalf("offload round handled %d tasks, want 3", got)
	}
	st, err := m.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.OffloadInFlight != 0 {
		t.Fatalf("%d offload tasks left unanswered", st.OffloadInFlight)
	}
	if st.SSDReplicas != 2 {
		t.Fatalf("%d SSD replicas, want 2", st.SSDReplicas)
	}
	if ns := n.Stats(); ns.OffloadPersisted != 2 || ns.OffloadFailed != 1 {
		t.Fatalf("node stats %+v", ns)
	}
	// Corrupt p1's DRAM bytes: Get must serve SSD's bytes, never the
	// corrupt ones.
	info, err := m.GetReplicaList(ctx, "p1")
	if err != nil {
		t.Fatal(err)
	}
	var mem masterapi.Replica
	for _, r := range info.Replicas {
		if r.Kind == masterapi.DRAM {
			mem = r
		}
	}
	if err := n.seg.WriteAt([]byte("garbage"), mem.Offset); err != nil {
		t.Fatal(err)
	}
	got, err := c.Get(ctx, "p1")
	if err != nil || !bytes.Equal(got, vals["p1"]) {
		t.Fatalf("get with a corrupt DRAM replica: %v", err)
	}
	if rs := c.ReadStats(); rs.ChecksumFailures != 1 || rs.LocalSSD != 1 {
		t.Fatalf("read stats %+v", rs)
	}
	// f has only its DRAM replica; corrupt it: the read fails with
	// CHECKSUM_MISMATCH rather than returning wrong bytes.
	info, err = m.GetReplicaList(ctx, "f")
	if err != nil {
		t.Fatal(err)
	}
	if err := n.seg.WriteAt([]byte("garbage"), info.Replicas[0].Offset); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Get(ctx, "f"); !errors.Is(err, errcode.ErrChecksumMismatch) {
		t.Fatalf("get of a corrupt only replica: %v", err)
	}
}

// An object already on SSD (AlreadyPresent) is reported as persisted when
// its bytes match, and removed and failed when they are a stale copy.
func TestOffloadAlreadyPresent(t *testing.T) {
	m := newMaster(t, testMasterConfig())
	tr := newMemTier()
	good, stale := rnd(3000), rnd(3000)
	n := startTestNode(t, m, "", tr)
	c := newTestClient(t, client.Config{Master: m, LocalNode: n})
	ctx := context.Background()
	tr.put("same", good)
	tr.put("stale", rnd(3000))
	if err := c.Put(ctx, "same", good); err != nil {
		t.Fatal(err)
	}
	if err := c.Put(ctx, "stale", stale); err != nil {
		t.Fatal(err)
	}
	n.OffloadNow()
	info, err := m.GetReplicaList(ctx, "same")
	if err != nil || len(info.Replicas) != 2 {
		t.Fatalf("already-present object should have an SSD replica: %+v %v", info, err)
	}
	if tr.has("stale") {
		t.Fatal("stale SSD copy was not removed")
	}
	if st, _ := m.Stats(ctx); st.OffloadInFlight != 0 || st.SSDReplicas != 1 {
		t.Fatalf("master stats %+v", st)
	}
	// The stale key was answered failed (retryable): no SSD replica for it.
	info, err = m.GetReplicaList(ctx, "stale")
	if err != nil || len(info.Replicas) != 1 || info.Replicas[0].Kind != masterapi.DRAM {
		t.Fatalf("stale object replicas: %+v %v", info, err)
	}
	if ns := n.Stats(); ns.OffloadPersisted != 1 || ns.OffloadFailed != 1 {
		t.Fatalf("node stats %+v", ns)
	}
}

// switchable is a master.API whose target can be replaced (a master
// restart, in-process).
type switchable struct {
	masterapi.API
	cur atomic.Pointer[master.Service]
}

func (s *switchable) get() masterapi.API { return s.cur.Load() }

// The methods the node uses, forwarded to the current master.
func (s *switchable) MountSegment(ctx context.Context, r masterapi.MountRequest) error {
	return s.get().MountSegment(ctx, r)
}
func (s *switchable) UnmountSegment(ctx context.Context, node, seg string) error {
	return s.get().UnmountSegment(ctx, node, seg)
}
func (s *switchable) LeaveNode(ctx context.Context, node, incarnation string) error {
	return s.get().LeaveNode(ctx, node, incarnation)
}
func (s *switchable) Ping(ctx context.Context, node string) (masterapi.PingReply, error) {
	return s.get().Ping(ctx, node)
}
func (s *switchable) Heartbeat(ctx context.Context, req masterapi.HeartbeatRequest) (masterapi.HeartbeatReply, error) {
	return s.get().Heartbeat(ctx, req)
}
func (s *switchable) PromoteEnd(ctx context.Context, node string, res []masterapi.PromoteResult) ([]error, error) {
	return s.get().PromoteEnd(ctx, node, res)
}
func (s *switchable) NotifyOffloadSuccess(ctx context.Context, r masterapi.NotifyRequest) ([]error, error) {
	return s.get().NotifyOffloadSuccess(ctx, r)
}
func (s *switchable) ReRegisterSSDColumns(ctx context.Context, node string, objs masterapi.SSDColumns) ([]error, error) {
	return s.get().ReRegisterSSDColumns(ctx, node, objs)
}
func (s *switchable) EvictSSDReplica(ctx context.Context, node string, keys []string) (masterapi.EvictResult, error) {
	return s.get().EvictSSDReplica(ctx, node, keys)
}
func (s *switchable) ReconcileBegin(ctx context.Context, node string, d masterapi.SlotDigest) (masterapi.ReconcileSession, error) {
	return s.get().ReconcileBegin(ctx, node, d)
}
func (s *switchable) ReconcileKeys(ctx context.Context, node string, id uint64, keys []string) (masterapi.ReconcileKeysResult, error) {
	return s.get().ReconcileKeys(ctx, node, id, keys)
}
func (s *switchable) ReconcileEnd(ctx context.Context, node string, id uint64) (int64, error) {
	return s.get().ReconcileEnd(ctx, node, id)
}
func (s *switchable) PullRemovals(ctx context.Context, r masterapi.PullRequest) (masterapi.PullReply, error) {
	return s.get().PullRemovals(ctx, r)
}
func (s *switchable) ReRegisterDRAMObjects(ctx context.Context, node, seg string, objs []masterapi.DRAMObject, done bool) ([]error, error) {
	return s.get().ReRegisterDRAMObjects(ctx, node, seg, objs, done)
}

// Start-up re-registers what the SSD holds; after a master restart the node
// remounts on NEED_REMOUNT and re-registers again, so SSD objects are
// readable through the new master.
func TestReRegisterAtStartAndAfterMasterRestart(t *testing.T) {
	mc := testMasterConfig()
	mc.Removals = master.NewMemoryRemovalStore() // the restarted master's --state_dir
	m1 := newMaster(t, mc)
	sw := &switchable{}
	sw.cur.Store(m1)
	tr := newMemTier()
	val := rnd(4000)
	tr.put("old", val) // on SSD from an earlier run
	cfg := testNodeConfig("")
	cfg.HeartbeatInterval = 10 * time.Millisecond
	n, err := Start(context.Background(), cfg, sw, WithTier(tr))
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	ctx := context.Background()
	c1 := newTestClient(t, client.Config{Master: m1, LocalNode: n})
	got, err := c1.Get(ctx, "old")
	if err != nil || !bytes.Equal(got, val) {
		t.Fatalf("object on SSD at start-up not re-registered: %v", err)
	}

	m2 := newMaster(t, mc) // the "restarted" master: empty, the same removal log
	sw.cur.Store(m2)
	c2 := newTestClient(t, client.Config{Master: m2, LocalNode: n})
	deadline := time.Now().Add(10 * time.Second)
	for {
		got, err := c2.Get(ctx, "old")
		if err == nil {
			if !bytes.Equal(got, val) {
				t.Fatal("wrong bytes")
			}
			break
		}
		if !errors.Is(err, errcode.ErrObjectNotFound) || time.Now().After(deadline) {
			t.Fatalf("after the master restart: %v", err)
		}
		time.Sleep(10 * time.Millisecond) // poll interval of a bounded wait
	}
	if n.Stats().Remounts < 1 {
		t.Fatalf("no remount counted: %+v", n.Stats())
	}
	// The new master can place puts on the remounted segment.
	if err := c2.Put(ctx, "new", rnd(100)); err != nil {
		t.Fatalf("put after remount: %v", err)
	}
}

// Reconcile prunes SSD replicas the SSD no longer holds; the evict
// callback removes the replica at the master before the bytes go.
func TestReconcileAndEvictCallback(t *testing.T) {
	m, tr, n := newMemNode(t)
	c := newTestClient(t, client.Config{Master: m, LocalNode: n})
	ctx := context.Background()
	for _, k := range []string{"a", "b", "c"} {
		if err := c.Put(ctx, k, rnd(1000)); err != nil {
			t.Fatal(err)
		}
	}
	n.OffloadNow()
	if st, _ := m.Stats(ctx); st.SSDReplicas != 3 {
		t.Fatalf("stats %+v", st)
	}
	// "a" vanishes from the SSD behind the node's back.
	if err := tr.Remove([]byte("a")); err != nil {
		t.Fatal(err)
	}
	if err := n.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	if st, _ := m.Stats(ctx); st.SSDReplicas != 2 {
		t.Fatalf("reconcile did not prune: %+v", st)
	}
	// The tier's eviction callback tells the master first.
	if _, err := n.onEvict(ctx, [][]byte{[]byte("b")}); err != nil {
		t.Fatal(err)
	}
	if st, _ := m.Stats(ctx); st.SSDReplicas != 1 {
		t.Fatalf("evict callback did not drop the replica: %+v", st)
	}
}

// Close drains: an offload round in progress when Close is called finishes
// on its own context and answers its tasks.
func TestCloseDrainsOffloadRound(t *testing.T) {
	m := newMaster(t, testMasterConfig())
	tr := newMemTier()
	tr.block, tr.entered = make(chan struct{}), make(chan struct{})
	block, entered := tr.block, tr.entered
	cfg := testNodeConfig("")
	cfg.HeartbeatInterval = 5 * time.Millisecond
	n, err := Start(context.Background(), cfg, m, WithTier(tr))
	if err != nil {
		t.Fatal(err)
	}
	c := newTestClient(t, client.Config{Master: m, LocalNode: n})
	ctx := context.Background()
	if err := c.Put(ctx, "k", rnd(2000)); err != nil {
		t.Fatal(err)
	}
	<-entered // the heartbeat loop is inside tier.Offload
	closed := make(chan error)
	go func() { closed <- n.Close() }()
	<-n.ctx.Done() // Close has begun: the loops are told to stop
	close(block)
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
	if !tr.has("k") {
		t.Fatal("the round in progress did not commit")
	}
	st, _ := m.Stats(ctx)
	if st.OffloadInFlight != 0 {
		t.Fatalf("task left in flight after the drain: %+v", st)
	}
}

// A corrupt SSD replica is a miss, never wrong bytes, and the node drops
// the replica at the master.
func TestCorruptSSDReplicaIsDropped(t *testing.T) {
	m := newMaster(t, testMasterConfig())
	tr := newMemTier()
	n := startTestNode(t, m, "127.0.0.1:0", tr)
	addr := serveMaster(t, m)
	c := newTestClient(t, client.Config{MasterAddr: addr})
	ctx := context.Background()
	if err := c.Put(ctx, "k", rnd(5000)); err != nil {
		t.Fatal(err)
	}
	n.OffloadNow()
	if d, err := c.EvictDRAM(ctx, []string{"k"}, false); err != nil || d.Dropped != 1 {
		t.Fatalf("evict: %d %v", d, err)
	}
	tr.mu.Lock()
	tr.corrupt["k"] = true
	tr.mu.Unlock()
	if _, err := c.Get(ctx, "k"); !errors.Is(err, errcode.ErrChecksumMismatch) {
		t.Fatalf("get of a corrupt SSD-only object: %v", err)
	}
	if st, _ := m.Stats(ctx); st.SSDReplicas != 0 {
		t.Fatalf("the corrupt replica is still listed: %+v", st)
	}
	// Inside the lease of the last lookup the master says the replica is
	// gone; it never hands out the dropped replica again.
	if _, err := c.Get(ctx, "k"); !errors.Is(err, errcode.ErrReplicaGone) && !errors.Is(err, errcode.ErrObjectNotFound) {
		t.Fatalf("after the drop: %v", err)
	}
}

func TestMetricsHandler(t *testing.T) {
	m, tr, n := newMemNode(t)
	c := newTestClient(t, client.Config{Master: m, LocalNode: n})
	if err := c.Put(context.Background(), "k", rnd(100)); err != nil {
		t.Fatal(err)
	}
	n.OffloadNow()
	h := n.MetricsHandler()
	tr.mu.Lock()
	before := tr.statsCalls
	tr.mu.Unlock()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body := rec.Body.String()
	// Issue 11: one Stats snapshot per scrape, not one per metric.
	tr.mu.Lock()
	calls := tr.statsCalls - before
	tr.mu.Unlock()
	if calls != 1 {
		t.Errorf("one scrape asked the tier for its stats %d times, want 1", calls)
	}
	for _, want := range []string{
		"tierstore_node_offload_persisted_total{node=\"" + n.Name() + "\"} 1",
		"tierstore_node_ssd_objects{node=\"" + n.Name() + "\"} 1",
		"tierstore_node_segment_bytes",
		"tierstore_node_offload_failures_total{node=\"" + n.Name() + "\",reason=\"too_large\"} 0",
	} {
		if !strings.Contains(body, want) {
			t.Errorf("metrics lack %q:\n%s", want, body)
		}
	}
}

func TestStartNodeRefusesBadConfig(t *testing.T) {
	m := newMaster(t, testMasterConfig())
	cfg := testNodeConfig("256.0.0.1:99999")
	if _, err := Start(context.Background(), cfg, m); !errors.Is(err, ErrBadConfig) || !strings.Contains(err.Error(), "--listen") {
		t.Fatalf("bad listen address: %v", err)
	}
	cfg = testNodeConfig("")
	cfg.EnableOffload = true
	if _, err := Start(context.Background(), cfg, m); !errors.Is(err, ErrBadConfig) || !strings.Contains(err.Error(), "--enable_offload") {
		t.Fatalf("offload without a directory: %v", err)
	}
	if _, err := Start(context.Background(), testNodeConfig(""), nil); !errors.Is(err, ErrBadConfig) {
		t.Fatalf("no master: %v", err)
	}
	if _, err := client.New(context.Background(), client.Config{}); !errors.Is(err, client.ErrBadConfig) {
		t.Fatalf("client without a master: %v", err)
	}
}

// Invariant 7 with the real tier engine: when SSD capacity forces bucket
// eviction, the master is told first, so it never lists an SSD replica the
// node cannot serve; every object stays readable from its remaining replica.
func TestSSDEvictionTellsMasterRealTier(t *testing.T) {
	m := newMaster(t, testMasterConfig())
	cfg := testNodeConfig("")
	cfg.EnableOffload = true
	cfg.SSDDir = t.TempDir()
	cfg.Backend = "pwrite"
	cfg.BucketKeysLimit = 1
	cfg.SSDCapacity = 2 << 20
	cfg.BucketSizeLimit = 1 << 20
	n, err := Start(context.Background(), cfg, m)
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	c := newTestClient(t, client.Config{Master: m, LocalNode: n})
	ctx := context.Background()
	vals := map[string][]byte{}
	var keys []string
	for i := 0; i < 16; i++ {
		k := fmt.Sprintf("e%02d", i)
		keys = append(keys, k)
		vals[k] = rnd(200 << 10)
		if err := c.Put(ctx, k, vals[k]); err != nil {
			t.Fatal(err)
		}
	}
	n.OffloadNow()
	ts := n.Stats().Tier
	if ts.Evictions == 0 {
		t.Fatalf("capacity did not force an eviction: %+v", ts)
	}
	if ts.BytesUsed > cfg.SSDCapacity {
		t.Fatalf("SSD use %d over capacity %d", ts.BytesUsed, cfg.SSDCapacity)
	}
	st, err := m.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.SSDReplicas != ts.Objects {
		t.Fatalf("master lists %d SSD replicas, the tier holds %d objects", st.SSDReplicas, ts.Objects)
	}
	if _, err := c.EvictDRAM(ctx, nil, true); err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		got, err := c.Get(ctx, k)
		if err != nil || !bytes.Equal(got, vals[k]) {
			t.Fatalf("get %s: %v", k, err)
		}
	}
	rs := c.ReadStats()
	if rs.Fallbacks != 0 || rs.LocalSSD != ts.Objects || rs.LocalDRAM != int64(len(keys))-ts.Objects {
		t.Fatalf("reads %+v with %d objects on SSD", rs, ts.Objects)
	}
}

// failNotify refuses the first NotifyOffloadSuccess call explicitly (an
// answer, not a transport failure), then passes the calls on.
type failNotify struct {
	masterapi.API
	failed atomic.Int64
}

func (f *failNotify) NotifyOffloadSuccess(ctx context.Context, r masterapi.NotifyRequest) ([]error, error) {
	if f.failed.Add(1) == 1 {
		return nil, errcode.Errorf(errcode.InvalidParams, "injected: the master refuses this notify")
	}
	return f.API.NotifyOffloadSuccess(ctx, r)
}

// Invariant 1 with the real tier engine: when the master explicitly
// refuses the announcement of a bucket, the keys are rolled back (the SSD
// does not keep objects the master was never told about) and the tasks
// are answered as failed.
func TestNotifyFailureRollsBackRealTier(t *testing.T) {
	m := newMaster(t, testMasterConfig())
	fm := &failNotify{API: m}
	cfg := testNodeConfig("")
	cfg.EnableOffload = true
	cfg.SSDDir = t.TempDir()
	cfg.Backend = "pwrite"
	n, err := Start(context.Background(), cfg, fm)
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	c := newTestClient(t, client.Config{Master: m, LocalNode: n})
	ctx := context.Background()
	for i := 0; i < 3; i++ {
		if err := c.Put(ctx, fmt.Sprintf("r%d", i), rnd(10000)); err != nil {
			t.Fatal(err)
		}
	}
	if got := n.OffloadNow(); got != 3 {
		t.Fatalf("round handled %d tasks", got)
	}
	ns := n.Stats()
	if ns.Tier.Objects != 0 || ns.OffloadFailed != 3 || ns.OffloadPersisted != 0 {
		t.Fatalf("after a failed announcement: %+v", ns)
	}
	st, _ := m.Stats(ctx)
	if st.SSDReplicas != 0 || st.OffloadInFlight != 0 {
		t.Fatalf("master after a failed announcement: %+v", st)
	}
}
