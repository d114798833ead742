package node

import (
	"bytes"
	"context"
	"errors"
	"testing"

	"github.com/tierstore/tierstore/client"
	"github.com/tierstore/tierstore/internal/errcode"

	"github.com/tierstore/tierstore/masterapi"
)

// Replicas on several nodes through real peer sockets and a master over
// gRPC: a put with 2 replicas writes both nodes, a reader falls back from
// a dead node's DRAM replica to another node's, and a reader in the
// process of the second replica's node reads it locally.
func TestReplicasWrittenToTwoNodesAndReadAcrossFallback(t *testing.T) {
	m := newMaster(t, testMasterConfig())
	addr := serveMaster(t, m)
	a := startTestNode(t, m, "127.0.0.1:0", nil)
	b := startTestNode(t, m, "127.0.0.1:0", nil)
	c := startTestNode(t, m, "127.0.0.1:0", nil)
	nodes := map[string]*Node{a.Name(): a, b.Name(): b, c.Name(): c}
	w := newTestClient(t, client.Config{MasterAddr: addr, PreferredNode: a.Name()})
	ctx := context.Background()
	val := rnd(2*writeChunk + 777)
	if err := w.PutWith(ctx, "k", val, client.PutOptions{Replicas: 2}); err != nil {
		t.Fatal(err)
	}
	keys := []string{"b0", "b1", "b2"}
	vals := [][]byte{rnd(10), rnd(70000), rnd(writeChunk + 1)}
	for i, err := range w.BatchPutWith(ctx, keys, vals, client.PutOptions{Replicas: 3}) {
		if err != nil {
			t.Fatalf("batch put %d: %v", i, err)
		}
	}
	if n := a.Stats().PeerWrites; n != 4 {
		t.Fatalf("node a (preferred) served %d writes, want 4", n)
	}
	if b.Stats().PeerWrites+c.Stats().PeerWrites != 1+2*3 {
		t.Fatalf("nodes b, c served %d + %d writes, want 7", b.Stats().PeerWrites, c.Stats().PeerWrites)
	}
	info, err := m.GetReplicaList(ctx, "k")
	if err != nil || len(info.Replicas) != 2 || info.Replicas[0].Node != a.Name() {
		t.Fatalf("replicas of k: %+v %v", info.Replicas, err)
	}
	second := nodes[info.Replicas[1].Node]

	// The first replica's node goes away before the master notices (the
	// reader's lookups answer what the master listed while a was up): the
	// reader falls back on the second.
	seen := frozenLookups{API: m, infos: map[string]masterapi.ObjectInfo{}}
	for _, k := range append([]string{"k"}, keys...) {
		if seen.infos[k], err = m.GetReplicaList(ctx, k); err != nil {
			t.Fatal(err)
		}
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	// Consecutive reads of one object start at each of its replicas in
	// turn (spreadRemoteDRAM): of 2 reads of k, one starts at a's replica
	// and falls back; of 3 reads of each 3-replica key, one.
	r := newTestClient(t, client.Config{Master: seen})
	for range 2 {
		got, err := r.Get(ctx, "k")
		if err != nil || !bytes.Equal(got, val) {
			t.Fatalf("get with the first replica's node closed: %v", err)
		}
	}
	if rs := r.ReadStats(); rs.RemoteDRAM != 2 || rs.Fallbacks != 1 {
		t.Fatalf("read stats %+v, want 2 remote DRAM reads, one after a fallback", rs)
	}
	for i, k := range keys {
		for range 3 {
			if got, err := r.Get(ctx, k); err != nil || !bytes.Equal(got, vals[i]) {
				t.Fatalf("get %s with node a closed: %v", k, err)
			}
		}
	}
	if rs := r.ReadStats(); rs.RemoteDRAM != 11 || rs.Fallbacks != 4 {
		t.Fatalf("read stats %+v, want 11 remote DRAM reads, 4 after a fallback", rs)
	}
	gv, gerrs := newTestClient(t, client.Config{MasterAddr: addr}).BatchGet(ctx, keys) // the master knows a left
	for i := range keys {
		if gerrs[i] != nil || !bytes.Equal(gv[i], vals[i]) {
			t.Fatalf("batch get %d: %v", i, gerrs[i])
		}
	}

	// A reader beside the second replica's node reads it in-process first,
	// although the master lists the first replica first.
	l := newTestClient(t, client.Config{MasterAddr: addr, LocalNode: second})
	if got, err := l.Get(ctx, "k"); err != nil || !bytes.Equal(got, val) {
		t.Fatalf("local get: %v", err)
	}
	if rs := l.ReadStats(); rs.LocalDRAM != 1 || rs.Fallbacks != 0 {
		t.Fatalf("local reader's stats %+v", rs)
	}
	if err := w.Remove(ctx, "k", true); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Get(ctx, "k"); !errors.Is(err, errcode.ErrObjectNotFound) {
		t.Fatalf("after remove: %v", err)
	}
}

// A put asking for more replicas than there are live nodes fails with a
// clear error and keeps nothing, unless it allows fewer.
func TestReplicasMoreThanNodesThroughClient(t *testing.T) {
	m := newMaster(t, testMasterConfig())
	addr := serveMaster(t, m)
	startTestNode(t, m, "127.0.0.1:0", nil)
	startTestNode(t, m, "127.0.0.1:0", nil)
	w := newTestClient(t, client.Config{MasterAddr: addr})
	ctx := context.Background()
	err := w.PutWith(ctx, "k", rnd(100), client.PutOptions{Replicas: 3})
	if !errors.Is(err, errcode.ErrNoAvailableHandle) {
		t.Fatalf("3 replicas on 2 nodes: %v", err)
	}
	t.Logf("the error: %v", err)
	if ok, err := w.Exists(ctx, "k"); ok || err != nil {
		t.Fatalf("exists after the refused put: %v %v", ok, err)
	}
	if err := w.PutWith(ctx, "k", rnd(100), client.PutOptions{Replicas: 3, AllowFewer: true}); err != nil {
		t.Fatal(err)
	}
	if info, err := m.GetReplicaList(ctx, "k"); err != nil || len(info.Replicas) != 2 {
		t.Fatalf("allow fewer: %+v %v", info.Replicas, err)
	}
	if err := w.PutWith(ctx, "x", rnd(100), client.PutOptions{Replicas: -1}); !errors.Is(err, errcode.ErrInvalidParams) {
		t.Fatalf("-1 replicas: %v", err)
	}
}

// frozenLookups answers GetReplicaList with the replica lists recorded in
// infos (what the master listed earlier), the rest as the master does.
type frozenLookups struct {
	masterapi.API
	infos map[string]masterapi.ObjectInfo
}

func (f frozenLookups) GetReplicaList(ctx context.Context, key string) (masterapi.ObjectInfo, error) {
	if info, ok := f.infos[key]; ok {
		return info, nil
	}
	return f.API.GetReplicaList(ctx, key)
}

// The readers of an object put with 2 replicas share its two nodes (a hot
// prefix read by every worker): single and batch reads alternate between
// the replicas.
func TestReplicasReadsSpreadOverNodes(t *testing.T) {
	m := newMaster(t, testMasterConfig())
	addr := serveMaster(t, m)
	a := startTestNode(t, m, "127.0.0.1:0", nil)
	b := startTestNode(t, m, "127.0.0.1:0", nil)
	ctx := context.Background()
	w := newTestClient(t, client.Config{MasterAddr: addr})
	val := rnd(64 << 10)
	if err := w.PutWith(ctx, "hot", val, client.PutOptions{Replicas: 2}); err != nil {
		t.Fatal(err)
	}
	r := newTestClient(t, client.Config{MasterAddr: addr})
	for range 10 {
		if got, err := r.Get(ctx, "hot"); err != nil || !bytes.Equal(got, val) {
			t.Fatalf("get: %v", err)
		}
	}
	if ra, rb := a.Stats().PeerReadsDRAM, b.Stats().PeerReadsDRAM; ra != 5 || rb != 5 {
		t.Fatalf("10 gets served %d by a, %d by b: want 5 each", ra, rb)
	}
	for range 10 {
		vals, errs := r.BatchGet(ctx, []string{"hot"})
		if errs[0] != nil || !bytes.Equal(vals[0], val) {
			t.Fatalf("batch get: %v", errs[0])
		}
	}
	if ra, rb := a.Stats().PeerReadsDRAM, b.Stats().PeerReadsDRAM; ra != 10 || rb != 10 {
		t.Fatalf("20 reads served %d by a, %d by b: want 10 each", ra, rb)
	}
	if rs := r.ReadStats(); rs.RemoteDRAM != 20 || rs.Fallbacks != 0 {
		t.Fatalf("read stats %+v", rs)
	}
}
