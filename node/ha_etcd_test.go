package node

import (
	"context"
	"fmt"
	"net"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/tierstore/tierstore/client"
	"github.com/tierstore/tierstore/ha"
	"github.com/tierstore/tierstore/ha/hatest"
	"github.com/tierstore/tierstore/master"
	"github.com/tierstore/tierstore/masterapi"
	"github.com/tierstore/tierstore/mastergrpc"
)

// haLeader serves a master of term on a fresh 127.0.0.1 listener and
// publishes it as a candidate in etcd (the first-created key leads); it
// returns the master and a function that kills it (server stopped, key
// deleted as its lease would expire).
func haLeader(t *testing.T, cli *clientv3.Client, removals master.RemovalStore) (*master.Service, func()) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	key := fmt.Sprintf("%s/%s", ha.DefaultPrefix, lis.Addr())
	r, err := cli.Put(context.Background(), key, lis.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	mc := testMasterConfig()
	mc.HA = master.HAConfig{Term: uint64(r.Header.Revision)}
	mc.Removals = removals // the leaders' shared log (etcd's, in a deployment)
	m := newMaster(t, mc)
	srv := master.NewServer(m)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	return m, func() {
		srv.Stop()
		if _, err := cli.Delete(context.Background(), key); err != nil {
			t.Error(err)
		}
	}
}

// An offload round in flight when its leader dies: the node's notify goes
// to the new leader (through the etcd:// master connection); whatever it
// meets there, the durable SSD copy is kept and the new leader ends up
// listing it. Two cases: as it comes (the notify races the node's remount
// at the new leader: answered NEED_REMOUNT, or accepted once the node
// re-registered the key's DRAM replica), and refused as unknown after the
// remount (the key's DRAM record is dropped first, so the new leader
// cannot know the key: the node keeps the copy and re-registers it
// instead of deleting it).
func TestOffloadInFlightAcrossAFailover(t *testing.T) {
	t.Run("as it comes", func(t *testing.T) { offloadAcrossFailover(t, false) })
	t.Run("refused as unknown after the remount", func(t *testing.T) { offloadAcrossFailover(t, true) })
}

func offloadAcrossFailover(t *testing.T, remountFirst bool) {
	ctx := context.Background()
	e := hatest.Start(t)
	cli, err := clientv3.New(clientv3.Config{Endpoints: e.Endpoints(), DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	removals := master.NewMemoryRemovalStore()
	a, killA := haLeader(t, cli, removals)
	b, _ := haLeader(t, cli, removals)
	remote, err := mastergrpc.Dial(ctx, e.MasterURL())
	if err != nil {
		t.Fatal(err)
	}
	defer remote.Close()
	tr := newMemTier()
	n, err := Start(ctx, testNodeConfig(""), remote, WithTier(tr))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	c := newTestClient(t, client.Config{Master: a, LocalNode: n})
	if err := c.Put(ctx, "k", rnd(5000)); err != nil {
		t.Fatal(err)
	}
	if remountFirst {
		n.ha.recMu.Lock()
		clear(n.ha.records)
		n.ha.recMu.Unlock()
	}
	tr.mu.Lock()
	tr.block, tr.entered = make(chan struct{}), make(chan struct{})
	block, entered := tr.block, tr.entered
	tr.mu.Unlock()
	done := make(chan int)
	go func() { done <- n.OffloadNow() }()
	<-entered // the task came from a; the tier is writing
	killA()
	for remountFirst { // the node follows etcd and remounts at b
		if st, _ := b.Stats(ctx); st.Nodes == 1 {
			break
		}
		time.Sleep(5 * time.Millisecond) // poll
	}
	close(block)
	if got := <-done; got != 1 {
		t.Fatalf("round handled %d tasks", got)
	}
	if !tr.has("k") {
		t.Fatal("the durable SSD copy was deleted across the failover")
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		_ = n.Reconcile(ctx) // runs a pending re-registration first
		info, err := b.GetReplicaList(ctx, "k")
		if err == nil && hasKind(info, masterapi.SSD) && hasKind(info, masterapi.DRAM) != remountFirst && n.Term() == b.Term() {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the new leader's replicas: %+v %v (node term %d, leader term %d)", info, err, n.Term(), b.Term())
		}
		time.Sleep(20 * time.Millisecond) // poll: the node re-registers on its own schedule
	}
	if !tr.has("k") {
		t.Fatal("the SSD copy went after the rebuild")
	}
}
