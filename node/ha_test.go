package node

import (
	"bytes"
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tierstore/tierstore/client"
	"github.com/tierstore/tierstore/internal/errcode"
	"github.com/tierstore/tierstore/internal/wire"
	"github.com/tierstore/tierstore/master"
	"github.com/tierstore/tierstore/masterapi"
)

// A master that knows nothing (a new leader after a failover) learns the
// node's DRAM objects from the node: every object whose last complete write
// is intact comes back, in-process and gRPC writes alike; an object whose
// bytes changed, or whose range a later put reused, does not, nor does a
// removed one (the removal log both masters share, invariant 10); new
// puts never land on a re-registered range.
func TestDRAMObjectsSurviveANewMaster(t *testing.T) {
	ctx := context.Background()
	mc := testMasterConfig()
	mc.Removals = master.NewMemoryRemovalStore() // what etcd is to two leaders
	m1 := newMaster(t, mc)
	sw := &switchable{}
	sw.cur.Store(m1)
	n, err := Start(ctx, testNodeConfig("127.0.0.1:0"), sw)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	local := newTestClient(t, client.Config{Master: m1, LocalNode: n})
	remote := newTestClient(t, client.Config{Master: m1}) // writes through the peer service
	vals := map[string][]byte{}
	put := func(c *client.Client, key string, size int) {
		t.Helper()
		vals[key] = rnd(size)
		if err := c.Put(ctx, key, vals[key]); err != nil {
			t.Fatal(err)
		}
	}
	put(local, "local", 5000)
	put(remote, "remote", 70000)
	put(local, "corrupt", 3000)
	put(local, "old", 4000)
	if err := m1.Remove(ctx, "old", true); err != nil {
		t.Fatal(err)
	}
	put(remote, "new", 4000) // best fit: the range "old" had
	put(local, "removed", 2000)
	if err := m1.Remove(ctx, "removed", true); err != nil { // nothing reuses its range
		t.Fatal(err)
	}
	infoOld, _ := m1.GetReplicaList(ctx, "new")
	info, _ := m1.GetReplicaList(ctx, "corrupt")
	if err := n.seg.WriteAt([]byte("scribble"), info.Replicas[0].Offset+100); err != nil {
		t.Fatal(err)
	}
	tok := infoOld.Replicas[0].PutToken

	m2 := newMaster(t, mc) // the new leader: empty, the same removal log
	sw.cur.Store(m2)
	n.pingLocked() // NEED_REMOUNT: mount, then the DRAM re-registration
	c2 := newTestClient(t, client.Config{Master: m2, LocalNode: n})
	for _, k := range []string{"local", "remote", "new"} {
		got, err := c2.Get(ctx, k)
		if err != nil || !bytes.Equal(got, vals[k]) {
			t.Fatalf("%s through the new master: %v", k, err)
		}
	}
	for _, k := range []string{"corrupt", "old", "removed"} {
		if _, err := m2.GetReplicaList(ctx, k); !errors.Is(err, errcode.ErrObjectNotFound) {
			t.Fatalf("%s came back: %v", k, err)
		}
	}
	if err := m2.PutEnd(ctx, "new", tok); err != nil {
		t.Fatalf("PutEnd of a put the old master started, at the new one: %v", err)
	}
	for i := range 20 { // new puts fill the segment around the re-registered objects
		if err := c2.Put(ctx, string(rune('a'+i)), rnd(100000)); err != nil {
			t.Fatal(err)
		}
	}
	for _, k := range []string{"local", "remote", "new"} {
		if got, err := c2.Get(ctx, k); err != nil || !bytes.Equal(got, vals[k]) {
			t.Fatalf("%s after new puts: %v", k, err)
		}
	}
	if err := m2.Check(); err != nil {
		t.Fatal(err)
	}
}

// termAPI stamps the node-facing answers of a master with a term the test
// sets, as leaders of successive terms would.
type termAPI struct {
	masterapi.API
	term atomic.Uint64
	// remount: Ping answers NEED_REMOUNT whatever the master says.
	remount atomic.Bool
}

func (a *termAPI) Ping(ctx context.Context, node string) (masterapi.PingReply, error) {
	r, err := a.API.Ping(ctx, node)
	r.Term = a.term.Load()
	if a.remount.Load() {
		r.Status = masterapi.NeedRemount
	}
	return r, err
}

func (a *termAPI) Heartbeat(ctx context.Context, req masterapi.HeartbeatRequest) (masterapi.HeartbeatReply, error) {
	rep, err := a.API.Heartbeat(ctx, req)
	rep.Term = a.term.Load()
	for i := range rep.Tasks {
		rep.Tasks[i].Term = rep.Term
	}
	return rep, err
}

// A node that has seen term 5 ignores a NEED_REMOUNT and the offload tasks
// of term 4: a deposed leader cannot make it remount or offload.
func TestNodeIgnoresOlderTerms(t *testing.T) {
	ctx := context.Background()
	m := newMaster(t, testMasterConfig())
	api := &termAPI{API: m}
	tr := newMemTier()
	n := startTestNode(t, api, "", tr)
	c := newTestClient(t, client.Config{Master: m, LocalNode: n})
	api.term.Store(5)
	n.pingLocked()
	if n.Term() != 5 {
		t.Fatalf("term %d", n.Term())
	}
	api.term.Store(4)
	api.remount.Store(true)
	before := n.Stats().Remounts
	n.pingLocked()
	if got := n.Stats().Remounts; got != before {
		t.Fatalf("remounted on a term-4 answer (%d -> %d)", before, got)
	}
	if err := c.Put(ctx, "stale", rnd(1000)); err != nil {
		t.Fatal(err)
	}
	n.OffloadNow()
	if tr.has("stale") {
		t.Fatal("offloaded a term-4 task")
	}
	api.term.Store(5)
	if err := c.Put(ctx, "current", rnd(1000)); err != nil {
		t.Fatal(err)
	}
	n.OffloadNow()
	if !tr.has("current") {
		t.Fatal("a task of the current term was not offloaded")
	}
	n.pingLocked() // term 5, NEED_REMOUNT: this one is obeyed
	if got := n.Stats().Remounts; got != before+1 {
		t.Fatalf("remounts %d, want %d", got, before+1)
	}
}

// racingAPI puts an object through the master just before the node's DRAM
// re-registration reaches it, as a client racing a failover would.
type racingAPI struct {
	*switchable
	got chan error
}

func (a *racingAPI) ReRegisterDRAMObjects(ctx context.Context, node, seg string, objs []masterapi.DRAMObject, done bool) ([]error, error) {
	if len(objs) > 0 {
		pctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
		_, err := a.get().PutStart(pctx, masterapi.PutStartRequest{Key: "racer", Size: 1000})
		cancel()
		a.got <- err
	}
	return a.switchable.ReRegisterDRAMObjects(ctx, node, seg, objs, done)
}

// The segment is held from allocation between the mount and the end of the
// DRAM re-registration: a put racing it waits (here: until its deadline)
// instead of getting the range of an object not re-registered yet.
func TestRemountHoldsAllocation(t *testing.T) {
	ctx := context.Background()
	m1 := newMaster(t, testMasterConfig())
	api := &racingAPI{switchable: &switchable{}, got: make(chan error, 4)}
	api.cur.Store(m1)
	n, err := Start(ctx, testNodeConfig(""), api)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	c := newTestClient(t, client.Config{Master: m1, LocalNode: n})
	if err := c.Put(ctx, "k", rnd(1000)); err != nil {
		t.Fatal(err)
	}
	api.cur.Store(newMaster(t, m1.Config())) // the same removal log
	n.pingLocked()
	if err := <-api.got; !errors.Is(err, errcode.ErrNoAvailableHandle) {
		t.Fatalf("a put during the re-registration: %v", err)
	}
}

// A write whose range a newer put claimed before the write was recorded is
// not recorded: the newer put owns the range.
func TestRecordWriteYieldsToNewerPut(t *testing.T) {
	m := newMaster(t, testMasterConfig())
	n := startTestNode(t, m, "", nil)
	if err := n.claimRange(0, 1000, 10); err != nil {
		t.Fatal(err)
	}
	n.recordWrite(wire.Object{Key: "owner"}, 0, 1000, 2, 10)
	n.recordWrite(wire.Object{Key: "late"}, 0, 1000, 1, 9) // an older put's write ends last
	n.ha.recMu.Lock()
	defer n.ha.recMu.Unlock()
	if r := n.ha.records[0]; len(n.ha.records) != 1 || r.obj.Key != "owner" {
		t.Fatalf("records %+v", n.ha.records)
	}
}
