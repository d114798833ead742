package node

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/tierstore/tierstore/internal/errcode"
	"github.com/tierstore/tierstore/master"
	"github.com/tierstore/tierstore/masterapi"
)

// recordingMaster forwards to a master and records the reconcile and
// re-registration calls; hooks may change answers.
type recordingMaster struct {
	masterapi.API
	mu          sync.Mutex // protects the fields below
	reRegisters []int      // objects per ReRegisterSSDColumns call
	keysCalls   []int      // keys per ReconcileKeys call
	ends        int        // ReconcileEnd calls
	onKeys      func()     // runs before each ReconcileKeys is forwarded
}

func (r *recordingMaster) ReRegisterSSDColumns(ctx context.Context, node string, objs masterapi.SSDColumns) ([]error, error) {
	r.mu.Lock()
	r.reRegisters = append(r.reRegisters, objs.Len())
	r.mu.Unlock()
	return r.API.ReRegisterSSDColumns(ctx, node, objs)
}

func (r *recordingMaster) ReconcileKeys(ctx context.Context, node string, id uint64, keys []string) (masterapi.ReconcileKeysResult, error) {
	r.mu.Lock()
	r.keysCalls = append(r.keysCalls, len(keys))
	hook := r.onKeys
	r.mu.Unlock()
	if hook != nil {
		hook()
	}
	return r.API.ReconcileKeys(ctx, node, id, keys)
}

func (r *recordingMaster) ReconcileEnd(ctx context.Context, node string, id uint64) (int64, error) {
	r.mu.Lock()
	r.ends++
	r.mu.Unlock()
	return r.API.ReconcileEnd(ctx, node, id)
}

// reconcileSetup starts a node whose SSD holds objects keys k0..k(n-1),
// re-registered at start through a recordingMaster.
func reconcileSetup(t *testing.T, objects int) (*master.Service, *recordingMaster, *memTier, *Node) {
	t.Helper()
	m := newMaster(t, testMasterConfig())
	rm := &recordingMaster{API: m}
	tr := newMemTier()
	for i := range objects {
		tr.put(fmt.Sprint("k", i), []byte{byte(i), 1, 2})
	}
	n, err := Start(context.Background(), testNodeConfig(""), rm, WithTier(tr))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	return m, rm, tr, n
}

// TestReRegisterStreamsBatches: the start-up re-registration sends the SSD
// objects in batches of at most reRegisterBatch as the tier lists them
// (several in flight), and every object reaches the master.
func TestReRegisterStreamsBatches(t *testing.T) {
	const objects = 2*reRegisterBatch + 5
	m, rm, _, _ := reconcileSetup(t, objects)
	rm.mu.Lock()
	calls := append([]int(nil), rm.reRegisters...)
	rm.mu.Unlock()
	slices.Sort(calls) // up to reRegisterInFlight chunks are in flight at once
	slices.Reverse(calls)
	if len(calls) != 3 || calls[0] != reRegisterBatch || calls[1] != reRegisterBatch || calls[2] != 5 {
		t.Fatalf("re-registration calls %v, want [%d %d 5]", calls, reRegisterBatch, reRegisterBatch)
	}
	if st, _ := m.Stats(context.Background()); st.SSDReplicas != objects {
		t.Fatalf("master lists %d SSD replicas, want %d", st.SSDReplicas, objects)
	}
}

// TestReconcileSendsOnlyDifferingRanges: when SSD and master agree a
// reconcile sends no key at all; when a few keys differ it sends only the
// keys of their slots, removes what the master does not want, and the
// master drops what the SSD does not hold.
func TestReconcileSendsOnlyDifferingRanges(t *testing.T) {
	const objects = 5000
	m, rm, tr, n := reconcileSetup(t, objects)
	ctx := context.Background()
	if err := n.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	if ns := n.Stats(); ns.ReconcileKeysSent != 0 || ns.Reconciles != 1 {
		t.Fatalf("nothing changed, yet the reconcile sent %d keys (%d reconciles)", ns.ReconcileKeysSent, ns.Reconciles)
	}
	tr.put("stray", []byte("never announced"))
	if _, err := m.EvictSSDReplica(ctx, n.Name(), []string{"k7"}); err != nil { // the node keeps the bytes
		t.Fatal(err)
	}
	if _, err := m.ReRegisterSSDObjects(ctx, n.Name(), []masterapi.SSDObject{{Key: "phantom", Size: 3, CRC: 1}}); err != nil {
		t.Fatal(err)
	}
	if err := n.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	if tr.has("stray") || tr.has("k7") || !tr.has("k8") {
		t.Fatalf("after reconcile: stray %v k7 %v k8 %v", tr.has("stray"), tr.has("k7"), tr.has("k8"))
	}
	if _, err := m.GetReplicaList(ctx, "phantom"); !errors.Is(err, errcode.ErrObjectNotFound) {
		t.Fatalf("phantom replica not dropped: %v", err)
	}
	ns := n.Stats()
	// Three slots differ, of SlotsFor(5000) = 32: about 3/32 of the keys.
	if ns.ReconcileKeysSent == 0 || ns.ReconcileKeysSent > objects/4 || ns.ReconcileRemoved != 2 {
		t.Fatalf("keys sent %d (of %d), removed %d", ns.ReconcileKeysSent, objects, ns.ReconcileRemoved)
	}
	rm.mu.Lock()
	ends := rm.ends
	rm.mu.Unlock()
	if ends != 1 {
		t.Fatalf("%d ReconcileEnd calls, want 1", ends)
	}
	if st, _ := m.Stats(ctx); st.SSDReplicas != objects-1 {
		t.Fatalf("master lists %d SSD replicas, want %d", st.SSDReplicas, objects-1)
	}
}

// TestReconcileBatchesKeys: a reconcile whose every slot differs (the
// master lost the node's replicas without asking for a remount) sends the
// keys in batches of at most reconcileBatchKeys.
func TestReconcileBatchesKeys(t *testing.T) {
	const objects = reconcileBatchKeys + 100
	m, rm, tr, n := reconcileSetup(t, objects)
	ctx := context.Background()
	var keys []string
	for i := range objects {
		keys = append(keys, fmt.Sprint("k", i))
	}
	if _, err := m.EvictSSDReplica(ctx, n.Name(), keys); err != nil {
		t.Fatal(err)
	}
	if err := n.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	rm.mu.Lock()
	calls := append([]int(nil), rm.keysCalls...)
	rm.mu.Unlock()
	total := 0
	for _, c := range calls {
		if c > reconcileBatchKeys {
			t.Fatalf("a ReconcileKeys call of %d keys", c)
		}
		total += c
	}
	if len(calls) < 2 || total != objects {
		t.Fatalf("calls %v: %d keys, want %d in several calls", calls, total, objects)
	}
	if tr.has("k0") || n.Stats().ReconcileRemoved != objects {
		t.Fatalf("unwanted keys kept: removed %d", n.Stats().ReconcileRemoved)
	}
}

// TestReconcileRemountDuringSession: a node that remounted during the
// session (the master may be a new one) neither deletes the keys answered
// unwanted nor ends the session.
func TestReconcileRemountDuringSession(t *testing.T) {
	_, rm, tr, n := reconcileSetup(t, 10)
	tr.put("stray", []byte("x"))
	rm.mu.Lock()
	rm.onKeys = func() { n.newMountGen() } // as remount does, before its mount
	rm.mu.Unlock()
	if err := n.Reconcile(context.Background()); err != nil {
		t.Fatal(err)
	}
	rm.mu.Lock()
	ends := rm.ends
	rm.mu.Unlock()
	if !tr.has("stray") || ends != 0 {
		t.Fatalf("after a remount during the session: stray kept %v, %d ReconcileEnd calls", tr.has("stray"), ends)
	}
}
