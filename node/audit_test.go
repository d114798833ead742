package node

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tierstore/tierstore/client"
	"github.com/tierstore/tierstore/internal/errcode"
	"github.com/tierstore/tierstore/master"
	"github.com/tierstore/tierstore/masterapi"
)

// lostReplies applies every notify at the master, then loses the reply of
// the first `lose` notifies that persist something (a transport error, as a
// dropped connection would give).
type lostReplies struct {
	masterapi.API
	lose int64
	lost atomic.Int64
}

func (f *lostReplies) NotifyOffloadSuccess(ctx context.Context, r masterapi.NotifyRequest) ([]error, error) {
	errs, err := f.API.NotifyOffloadSuccess(ctx, r)
	if len(r.Persisted) > 0 && f.lost.Add(1) <= f.lose {
		return nil, errcode.Errorf(errcode.RPCFail, "injected: reply lost")
	}
	return errs, err
}

// offloadOneWithLostReplies puts one object through a node whose master
// loses `lose` notify replies, offloads it and drops its DRAM replica where
// an SSD copy is listed. It returns the master's stats, the node and the
// Get result.
func offloadOneWithLostReplies(t *testing.T, lose int64) (masterapi.Stats, *Node, []byte, []byte, error) {
	t.Helper()
	m := newMaster(t, testMasterConfig())
	cfg := testNodeConfig("")
	cfg.EnableOffload, cfg.SSDDir, cfg.Backend = true, t.TempDir(), "pwrite"
	cfg.OffloadTaskTimeout = 300 * time.Millisecond // the round gives up on the notify after this
	n, err := Start(context.Background(), cfg, &lostReplies{API: m, lose: lose})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	c := newTestClient(t, client.Config{Master: m, LocalNode: n})
	ctx := context.Background()
	val := rnd(10000)
	if err := c.Put(ctx, "k", val); err != nil {
		t.Fatal(err)
	}
	if got := n.OffloadNow(); got != 1 {
		t.Fatalf("offload round handled %d tasks", got)
	}
	st, err := m.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.EvictDRAM(ctx, nil, true); err != nil {
		t.Fatal(err)
	}
	got, gerr := c.Get(ctx, "k")
	return st, n, val, got, gerr
}

// TestLostNotifyReplyIsRetried: one lost reply of an applied notify is
// absorbed by the node sending the notify again; the object is on SSD and
// listed there, and is read from SSD once DRAM is dropped.
func TestLostNotifyReplyIsRetried(t *testing.T) {
	st, n, val, got, err := offloadOneWithLostReplies(t, 1)
	if st.SSDReplicas != 1 || n.Stats().Tier.Objects != 1 {
		t.Fatalf("after one lost reply: master lists %d SSD replicas, node holds %d objects, want 1 and 1",
			st.SSDReplicas, n.Stats().Tier.Objects)
	}
	if n.Stats().NotifyRetries != 1 {
		t.Errorf("notify retries %d, want 1", n.Stats().NotifyRetries)
	}
	if err != nil || string(got) != string(val) {
		t.Fatalf("get after DRAM drop: %v", err)
	}
}

// TestLostNotifyRepliesKeepDurableBucket: every reply lost until the round's
// task timeout (the master applied each notify, the node never heard): the
// bucket is durable and indexed and was never refused, so the node keeps it
// (invariant 9, issue 9 item 5), and the master's SSD replica points
// at bytes the node really holds (invariant 1: no phantom either way).
func TestLostNotifyRepliesKeepDurableBucket(t *testing.T) {
	st, n, val, got, err := offloadOneWithLostReplies(t, 1<<30)
	if objs := n.Stats().Tier.Objects; objs != 1 {
		t.Fatalf("node holds %d SSD objects after notifies the master applied but never answered, want 1", objs)
	}
	if st.SSDReplicas != 1 {
		t.Fatalf("master lists %d SSD replicas, want 1", st.SSDReplicas)
	}
	if err != nil || string(got) != string(val) {
		t.Fatalf("get: %v", err)
	}
}

// TestGetReportsMissingSSDReplica: a node that answers "not found" for its
// own SSD copy gets that replica reported and dropped at the master (the
// lookup inside the lease then says REPLICA_IS_GONE instead of offering it
// again); a node that cannot be reached is a plain fallback, not reported.
func TestGetReportsMissingSSDReplica(t *testing.T) {
	m := newMaster(t, testMasterConfig())
	ctx := context.Background()
	startSSDNode := func() *Node {
		cfg := testNodeConfig("127.0.0.1:0")
		cfg.EnableOffload, cfg.SSDDir, cfg.Backend = true, t.TempDir(), "pwrite"
		n, err := Start(ctx, cfg, m)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { n.Close() })
		return n
	}
	a, b := startSSDNode(), startSSDNode()
	c := newTestClient(t, client.Config{Master: m}) // remote reader: peers over gRPC
	for _, k := range []string{"lost", "unreachable"} {
		pn := a
		if k == "unreachable" {
			pn = b
		}
		pc := newTestClient(t, client.Config{Master: m, PreferredNode: pn.Name()})
		if err := pc.Put(ctx, k, rnd(5000)); err != nil {
			t.Fatal(err)
		}
	}
	if a.OffloadNow() != 1 || b.OffloadNow() != 1 {
		t.Fatal("offload rounds")
	}
	if n, err := c.EvictDRAM(ctx, nil, true); n.Dropped != 2 || err != nil {
		t.Fatalf("evict memory: %d %v", n, err)
	}
	// a loses its SSD copy behind the master's back; b goes away.
	if err := a.tier.Remove([]byte("lost")); err != nil {
		t.Fatal(err)
	}
	b.srv.Stop() // listener closed, connections dropped; Close copes
	if _, err := c.Get(ctx, "lost"); err == nil {
		t.Fatal("get of a lost object succeeded")
	}
	if _, err := c.Get(ctx, "unreachable"); err == nil {
		t.Fatal("get from a stopped node succeeded")
	}
	if rs := c.ReadStats(); rs.MissingReplicasReported != 1 {
		t.Errorf("missing replicas reported %d, want 1", rs.MissingReplicasReported)
	}
	_, err := m.GetReplicaList(ctx, "lost")
	if !errors.Is(err, client.ErrReplicaGone) {
		t.Fatalf("lookup of the lost object: %v, want REPLICA_IS_GONE (the replica must not be offered)", err)
	}
	info, err := m.GetReplicaList(ctx, "unreachable")
	if err != nil || len(info.Replicas) != 1 || info.Replicas[0].Node != b.Name() {
		t.Fatalf("an unreachable node's replica must stay listed: %+v %v", info, err)
	}
}

// crashMaster never forwards UnmountSegment: a node closed through it
// vanishes as a crashed process would, its segment still mounted.
type crashMaster struct{ masterapi.API }

func (crashMaster) UnmountSegment(context.Context, string, string) error { return nil }
func (crashMaster) LeaveNode(context.Context, string, string) error      { return nil }

// TestRestartOnSameSSDDirRetiresOldIncarnation: a node restarted on the same
// --ssd_dir, before the master expired it, comes back under the same id;
// the previous process's DRAM replicas are retired at once (not offered
// again), its SSD objects are re-registered and readable through the new
// process. Without an SSD directory every start gets a new id.
func TestRestartOnSameSSDDirRetiresOldIncarnation(t *testing.T) {
	m := newMaster(t, testMasterConfig())
	ctx := context.Background()
	cfg := testNodeConfig("")
	cfg.EnableOffload, cfg.SSDDir, cfg.Backend = true, t.TempDir(), "pwrite"
	n1, err := Start(ctx, cfg, crashMaster{m})
	if err != nil {
		t.Fatal(err)
	}
	c1 := newTestClient(t, client.Config{Master: m, LocalNode: n1})
	val := rnd(6000)
	if err := c1.Put(ctx, "ssd", val); err != nil {
		t.Fatal(err)
	}
	if n1.OffloadNow() != 1 {
		t.Fatal("offload round")
	}
	if err := c1.Put(ctx, "dram", rnd(3000)); err != nil {
		t.Fatal(err)
	}
	if info, err := m.GetReplicaList(ctx, "dram"); err != nil || len(info.Replicas) != 1 {
		t.Fatalf("dram object before the restart: %+v %v", info, err)
	}
	m.Tick()   // nothing expires: the node pinged moments ago
	n1.Close() // "crash": the master still lists the segment
	c1.Close()

	n2, err := Start(ctx, cfg, m)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n2.Close() })
	if n2.Name() != n1.Name() {
		t.Fatalf("restart on the same --ssd_dir: id %q, was %q", n2.Name(), n1.Name())
	}
	if info, err := m.GetReplicaList(ctx, "dram"); err == nil {
		t.Fatalf("the dead process's DRAM replica is still offered: %+v", info)
	}
	c2 := newTestClient(t, client.Config{Master: m, LocalNode: n2})
	got, err := c2.Get(ctx, "ssd")
	if err != nil || string(got) != string(val) {
		t.Fatalf("SSD object after the restart: %v", err)
	}
	if rs := c2.ReadStats(); rs.LocalSSD != 1 {
		t.Fatalf("read stats %+v, want one local SSD read", rs)
	}

	// No SSD directory: a fresh id every start.
	a := startTestNode(t, m, "", nil)
	b := startTestNode(t, m, "", nil)
	if a.Name() == b.Name() {
		t.Fatalf("two starts without --ssd_dir share the id %q", a.Name())
	}
}

// TestSSDEvictionHonoursLease: invariant 4 with the real tier engine. The
// only copy of a leased object is on SSD (its DRAM replica dropped); SSD
// eviction rounds forced by new offloads refuse that bucket while the lease
// lasts (the master answers OBJECT_HAS_LEASE, the tier evicts other buckets
// instead) and the object stays readable; once the lease is over the bucket
// goes like any other and the object with it.
func TestSSDEvictionHonoursLease(t *testing.T) {
	ctx := context.Background()
	const valSize = 8000
	nodeCfg := func(capacity int64) Config {
		cfg := testNodeConfig("")
		cfg.EnableOffload, cfg.SSDDir, cfg.Backend = true, t.TempDir(), "pwrite"
		cfg.BucketKeysLimit, cfg.BucketSizeLimit, cfg.BucketEviction = 1, 16<<10, "fifo"
		cfg.SSDCapacity = capacity
		return cfg
	}
	// The size of one single-object bucket file, measured.
	var bucket int64
	{
		m := newMaster(t, testMasterConfig())
		n, err := Start(ctx, nodeCfg(0), m)
		if err != nil {
			t.Fatal(err)
		}
		c := newTestClient(t, client.Config{Master: m, LocalNode: n})
		if err := c.Put(ctx, "probe", rnd(valSize)); err != nil {
			t.Fatal(err)
		}
		n.OffloadNow()
		bucket = n.Stats().Tier.BytesUsed
		n.Close()
		if bucket <= 0 {
			t.Fatal("probe bucket has no size")
		}
	}
	// Four buckets of capacity: the 4th commit crosses the 90% watermark
	// and evicts one bucket (down to 80%).
	clk := master.NewManualClock(time.Now())
	mc := testMasterConfig()
	mc.Clock = clk
	m := newMaster(t, mc)
	n, err := Start(ctx, nodeCfg(4*bucket), m)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	c := newTestClient(t, client.Config{Master: m, LocalNode: n})
	val := rnd(valSize)
	if err := c.Put(ctx, "leased", val); err != nil {
		t.Fatal(err)
	}
	n.OffloadNow()
	if d, err := c.EvictDRAM(ctx, []string{"leased"}, false); d.Dropped != 1 || err != nil {
		t.Fatalf("dropping the DRAM replica: %d %v", d, err)
	}
	if ok, err := c.Exists(ctx, "leased"); !ok || err != nil { // the lease
		t.Fatalf("exists: %v %v", ok, err)
	}
	onSSD := func() bool {
		ok, err := n.tier.Exists([]byte("leased"))
		if err != nil {
			t.Fatal(err)
		}
		return ok
	}
	i := 0
	offloadOne := func() {
		i++
		if err := c.Put(ctx, fmt.Sprintf("filler%d", i), rnd(valSize)); err != nil {
			t.Fatal(err)
		}
		if got := n.OffloadNow(); got != 1 {
			t.Fatalf("round %d handled %d tasks", i, got)
		}
	}
	for range 6 { // well past the first eviction, still inside the lease
		offloadOne()
	}
	if ev := n.Stats().Tier.Evictions; ev < 2 {
		t.Fatalf("only %d buckets evicted: the test did not force eviction", ev)
	}
	if !onSSD() {
		t.Fatal("the only copy of a leased object was evicted from SSD")
	}
	if got, err := c.Get(ctx, "leased"); err != nil || string(got) != string(val) {
		t.Fatalf("get inside the lease: %v", err)
	}
	// After the lease (Get renewed it) the bucket is evicted like any other.
	clk.Advance(mc.DefaultKVLeaseTTL + time.Second)
	for range 6 {
		if !onSSD() {
			break
		}
		offloadOne()
	}
	if onSSD() {
		t.Fatal("the object's bucket survived eviction rounds after its lease")
	}
	if _, err := m.GetReplicaList(ctx, "leased"); !errors.Is(err, client.ErrObjectNotFound) {
		t.Fatalf("lookup after the eviction: %v, want OBJECT_NOT_FOUND", err)
	}
}
