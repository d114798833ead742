package node

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/tierstore/tierstore/client"
	"github.com/tierstore/tierstore/internal/errcode"
	"github.com/tierstore/tierstore/master"
	"github.com/tierstore/tierstore/masterapi"
)

// Node side of the offload races (master/offload_test.go): an object force-removed while the node offloads
// it is refused in the bucket notify (OBJECT_NOT_FOUND) and the node deletes
// the copy it just made; the source range is not handed to another put
// before the node answered; the removed key stays removed.
func TestRemovedDuringOffloadNotKeptOnSSD(t *testing.T) {
	m, tr, n := newMemNode(t)
	c := newTestClient(t, client.Config{Master: m, LocalNode: n})
	ctx := context.Background()
	val := rnd(64 << 10)
	if err := c.Put(ctx, "gone", val); err != nil {
		t.Fatal(err)
	}
	info, _ := m.GetReplicaList(masterapi.WithOffloadPath(ctx), "gone")
	src := info.Replicas[0]

	tr.mu.Lock()
	tr.block, tr.entered = make(chan struct{}), make(chan struct{})
	block, entered := tr.block, tr.entered
	tr.mu.Unlock()
	done := make(chan int)
	go func() { done <- n.OffloadNow() }()
	<-entered // the node fetched the task and copied the source range
	if err := m.Remove(ctx, "gone", true); err != nil {
		t.Fatal(err)
	}
	other := rnd(64 << 10)
	if err := c.Put(ctx, "other", other); err != nil {
		t.Fatal(err)
	}
	oi, _ := m.GetReplicaList(masterapi.WithOffloadPath(ctx), "other")
	if r := oi.Replicas[0]; r.Offset < src.Offset+src.Length && src.Offset < r.Offset+r.Length {
		t.Fatalf("a put reused the range [%d,+%d) while its offload task was out", src.Offset, src.Length)
	}
	close(block)
	if got := <-done; got != 1 {
		t.Fatalf("round handled %d tasks", got)
	}
	if tr.has("gone") {
		t.Fatal("the node kept an SSD copy of a removed key")
	}
	if _, err := c.Get(ctx, "gone"); !errors.Is(err, client.ErrObjectNotFound) {
		t.Fatalf("removed key: %v", err)
	}
	// The orphaned range was freed by the answer: only "other" uses DRAM.
	if st, _ := m.Stats(ctx); st.SegmentUsed != 64<<10 {
		t.Fatalf("segment used %d, want %d", st.SegmentUsed, 64<<10)
	}
	if err := m.Check(); err != nil {
		t.Fatal(err)
	}
}

// Already-present path: a key the master refuses in the final answer
// (removed while the node checked its stale copy) is deleted from SSD.
func TestAlreadyPresentRefusedKeyDeleted(t *testing.T) {
	m, tr, n := newMemNode(t)
	c := newTestClient(t, client.Config{Master: m, LocalNode: n})
	ctx := context.Background()
	val := rnd(4000)
	if err := c.Put(ctx, "k", val); err != nil {
		t.Fatal(err)
	}
	tr.put("k", val) // already on SSD: the round answers it in the final notify
	tr.mu.Lock()
	tr.block, tr.entered = make(chan struct{}), make(chan struct{})
	block, entered := tr.block, tr.entered
	tr.mu.Unlock()
	done := make(chan int)
	go func() { done <- n.OffloadNow() }()
	<-entered
	if err := m.Remove(ctx, "k", true); err != nil {
		t.Fatal(err)
	}
	close(block)
	<-done
	if tr.has("k") {
		t.Fatal("the node kept a key the master refused")
	}
	if _, err := m.GetReplicaList(ctx, "k"); !errors.Is(err, client.ErrObjectNotFound) {
		t.Fatalf("removed key resurrected by the notify: %v", err)
	}
}

// With the node: a retryable tier failure is answered, the master
// queues the task again and the next round persists it.
func TestRetryableOffloadFailureRetried(t *testing.T) {
	m, tr, n := newMemNode(t)
	c := newTestClient(t, client.Config{Master: m, LocalNode: n})
	ctx := context.Background()
	if err := c.Put(ctx, "k", rnd(4000)); err != nil {
		t.Fatal(err)
	}
	tr.mu.Lock()
	tr.failKeys["k"] = true
	tr.mu.Unlock()
	if got := n.OffloadNow(); got != 1 {
		t.Fatalf("first round handled %d", got)
	}
	tr.mu.Lock()
	delete(tr.failKeys, "k")
	tr.mu.Unlock()
	if got := n.OffloadNow(); got != 1 {
		t.Fatalf("the failed task was not handed out again (%d)", got)
	}
	info, err := m.GetReplicaList(ctx, "k")
	if err != nil || len(info.Replicas) != 2 || !tr.has("k") {
		t.Fatalf("after the retry: %+v %v", info, err)
	}
}

// a reconcile deletes from SSD the keys the master no longer wants
// (removed objects) and keeps the others; after a master restart it never
// deletes what the new master has not heard of yet.
func TestReconcileRemovesUnwanted(t *testing.T) {
	m1, sw, tr, n, c := restartableNode(t)
	ctx := context.Background()
	for _, k := range []string{"keep", "drop"} {
		if err := c.Put(ctx, k, rnd(3000)); err != nil {
			t.Fatal(err)
		}
	}
	n.OffloadNow()
	if !tr.has("keep") || !tr.has("drop") {
		t.Fatal("not offloaded")
	}
	if err := m1.Remove(ctx, "drop", true); err != nil {
		t.Fatal(err)
	}
	tr.put("stray", rnd(100)) // never announced
	if err := n.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	if tr.has("drop") || tr.has("stray") || !tr.has("keep") {
		t.Fatalf("after reconcile: drop %v stray %v keep %v", tr.has("drop"), tr.has("stray"), tr.has("keep"))
	}
	if ns := n.Stats(); ns.ReconcileRemoved != 2 {
		t.Fatalf("reconcile removed %d", ns.ReconcileRemoved)
	}

	// Master restart: the new master knows nothing. Reconciles (racing the
	// ping loop's remount) must not delete "keep"; after the node
	// re-registered, the new master serves it.
	m2 := newMaster(t, m1.Config()) // the same removal log, as --state_dir keeps it
	sw.cur.Store(m2)
	deadline := time.Now().Add(10 * time.Second)
	for {
		_ = n.Reconcile(ctx)
		if !tr.has("keep") {
			t.Fatal("a reconcile after a master restart deleted a registered object")
		}
		// The DRAM replica comes back too (re-registered from the
		// node's records, docs/ha.md); the SSD one is what this waits for.
		if info, err := m2.GetReplicaList(ctx, "keep"); err == nil && hasKind(info, masterapi.SSD) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the node never re-registered with the new master")
		}
		time.Sleep(5 * time.Millisecond) // poll: the ping loop remounts on its own schedule
	}
}

// a DRAM replica whose bytes were corrupted in the segment fails its
// CRC32C; the client reports it, the master drops it, and the read is served
// by the SSD replica. Without another replica the read fails with
// CHECKSUM_MISMATCH and the leased object answers REPLICA_IS_GONE.
func TestCorruptReplicaReported(t *testing.T) {
	m := newMaster(t, testMasterConfig())
	tr := newMemTier()
	n := startTestNode(t, m, "127.0.0.1:0", tr)
	// The client talks to the master over gRPC: the report crosses the wire.
	c := newTestClient(t, client.Config{MasterAddr: serveMaster(t, m), LocalNode: n})
	ctx := context.Background()
	corrupt := func(key string) {
		t.Helper()
		info, err := m.GetReplicaList(masterapi.WithOffloadPath(ctx), key)
		if err != nil || info.Replicas[0].Kind != masterapi.DRAM {
			t.Fatalf("%s: %+v %v", key, info, err)
		}
		r := info.Replicas[0]
		if err := n.seg.WriteAt([]byte("garbage!"), r.Offset+r.Length/2); err != nil {
			t.Fatal(err)
		}
	}

	val := rnd(32 << 10)
	if err := c.Put(ctx, "both", val); err != nil {
		t.Fatal(err)
	}
	n.OffloadNow() // DRAM + SSD
	corrupt("both")
	got, err := c.Get(ctx, "both")
	if err != nil || !bytes.Equal(got, val) {
		t.Fatalf("get with a corrupt DRAM replica: %v", err)
	}
	rs := c.ReadStats()
	if rs.ChecksumFailures != 1 || rs.BadReplicasReported != 1 || rs.LocalSSD != 1 {
		t.Fatalf("read stats %+v", rs)
	}
	info, err := m.GetReplicaList(ctx, "both")
	if err != nil || len(info.Replicas) != 1 || info.Replicas[0].Kind != masterapi.SSD {
		t.Fatalf("the corrupt DRAM replica is still listed: %+v %v", info, err)
	}

	// SSD copy with wrong bytes (the tier did not notice): reported too.
	tr.put("both", rnd(32<<10))
	_, err = c.Get(ctx, "both")
	if !errors.Is(err, client.ErrChecksumMismatch) {
		t.Fatalf("get with only a corrupt SSD replica: %v", err)
	}
	_, err = m.GetReplicaList(ctx, "both")
	if !errors.Is(err, client.ErrReplicaGone) { // leased by the lookups above
		t.Fatalf("after the SSD report: %v", err)
	}
	if rs := c.ReadStats(); rs.BadReplicasReported != 2 {
		t.Fatalf("read stats %+v", rs)
	}

	// DRAM only: CHECKSUM_MISMATCH, then REPLICA_IS_GONE inside the lease.
	tr.mu.Lock()
	tr.failKeys["solo"] = true // keep it DRAM-only
	tr.mu.Unlock()
	if err := c.Put(ctx, "solo", rnd(4096)); err != nil {
		t.Fatal(err)
	}
	corrupt("solo")
	if _, err := c.Get(ctx, "solo"); !errors.Is(err, client.ErrChecksumMismatch) || client.CodeOf(err) != errcode.ChecksumMismatch {
		t.Fatalf("get of a corrupt DRAM-only object: %v", err)
	}
	if _, err := c.Get(ctx, "solo"); !errors.Is(err, client.ErrReplicaGone) {
		t.Fatalf("second get: %v", err)
	}
	if err := m.Check(); err != nil {
		t.Fatal(err)
	}
}

// An offload round that straddles a master restart: the new master does not
// know the key yet and refuses it, but the node remounted meanwhile, so it
// keeps the copy and re-registers it instead of deleting it.
func TestRefusedAcrossRemountKeptAndReregistered(t *testing.T) {
	_, sw, tr, n, c := restartableNode(t)
	ctx := context.Background()
	if err := c.Put(ctx, "k", rnd(5000)); err != nil {
		t.Fatal(err)
	}
	tr.mu.Lock()
	tr.block, tr.entered = make(chan struct{}), make(chan struct{})
	block, entered := tr.block, tr.entered
	tr.mu.Unlock()
	done := make(chan int)
	go func() { done <- n.OffloadNow() }()
	<-entered
	m2 := newMaster(t, sw.cur.Load().Config()) // the same removal log, as --state_dir keeps it
	sw.cur.Store(m2)
	deadline := time.Now().Add(10 * time.Second)
	for { // the ping loop remounts at the new master
		if st, _ := m2.Stats(ctx); st.Nodes == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the node did not remount at the new master")
		}
		time.Sleep(5 * time.Millisecond) // poll
	}
	close(block)
	<-done
	if !tr.has("k") {
		t.Fatal("the node deleted a copy the restarted master had not heard of yet")
	}
	if err := n.Reconcile(ctx); err != nil { // runs the pending re-registration first
		t.Fatal(err)
	}
	// Both replicas: the SSD copy re-registered, and the DRAM one from the
	// node's records of its writes (docs/ha.md). The DRAM re-registration
	// runs on the ping loop after the mount, beside Reconcile (which holds
	// roundMu, not the re-registration's lock): wait for it, bounded.
	deadline = time.Now().Add(10 * time.Second)
	for {
		info, err := m2.GetReplicaList(ctx, "k")
		if err == nil && len(info.Replicas) == 2 && hasKind(info, masterapi.SSD) && hasKind(info, masterapi.DRAM) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("new master after re-registration: %+v %v", info, err)
		}
		time.Sleep(5 * time.Millisecond) // poll
	}
}

// hasKind reports whether info lists a replica of kind k.
func hasKind(info masterapi.ObjectInfo, k masterapi.ReplicaKind) bool {
	for _, r := range info.Replicas {
		if r.Kind == k {
			return true
		}
	}
	return false
}

// restartableNode starts a master, a node with an in-memory tier behind a
// master switch (so a test can swap in a restarted master) and a client.
func restartableNode(t *testing.T) (*master.Service, *switchable, *memTier, *Node, *client.Client) {
	t.Helper()
	m1 := newMaster(t, testMasterConfig())
	sw := &switchable{}
	sw.cur.Store(m1)
	tr := newMemTier()
	n, err := Start(context.Background(), testNodeConfig(""), sw, WithTier(tr))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	c := newTestClient(t, client.Config{Master: m1, LocalNode: n})
	return m1, sw, tr, n, c
}
