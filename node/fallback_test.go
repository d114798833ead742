package node

import (
	"bytes"
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/tierstore/tierstore/client"
	"github.com/tierstore/tierstore/internal/errcode"
	"github.com/tierstore/tierstore/master"
	"github.com/tierstore/tierstore/masterapi"
)

// staleLookup answers the first GetReplicaList of key with the replica list
// of that moment, then runs between (the store moves on: the DRAM replica
// goes and its range is re-allocated) before the reader gets the answer.
type staleLookup struct {
	masterapi.API
	key     string
	once    sync.Once
	between func(info masterapi.ObjectInfo)
}

func (s *staleLookup) GetReplicaList(ctx context.Context, key string) (masterapi.ObjectInfo, error) {
	info, err := s.API.GetReplicaList(ctx, key)
	if err == nil && key == s.key {
		s.once.Do(func() { s.between(info) })
	}
	return info, err
}

// Issue 9 item 2 (invariant 4: a lease keeps the object readable, not a
// particular replica): a reader whose DRAM replica is evicted and whose
// range is re-allocated to another object between its lookup and its read
// gets the other object's bytes there, which fail the CRC32C: it falls
// back to the SSD replica and returns the right bytes, and its report of
// the replica it saw does not harm the object that now owns the range.
func TestReaderFallsBackWhenDRAMRangeReallocated(t *testing.T) {
	ctx := context.Background()
	clk := master.NewManualClock(time.Now())
	mc := testMasterConfig()
	mc.Clock = clk
	m := newMaster(t, mc)
	cfg := testNodeConfig("")
	cfg.EnableOffload, cfg.SSDDir, cfg.Backend = true, t.TempDir(), "pwrite"
	n, err := Start(ctx, cfg, m)
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	writer := newTestClient(t, client.Config{Master: m, LocalNode: n})
	valA, valB := rnd(64<<10), rnd(64<<10)
	if err := writer.Put(ctx, "A", valA); err != nil {
		t.Fatal(err)
	}
	if n.OffloadNow() != 1 || n.Stats().Tier.Objects != 1 {
		t.Fatal("A was not offloaded")
	}
	var reused bool
	sl := &staleLookup{API: m, key: "A", between: func(info masterapi.ObjectInfo) {
		// The lease this lookup granted ends (a DRAM replica may go
		// inside a lease too once the master allows it; the node's side is
		// the same), the DRAM replica is evicted and B takes its range.
		clk.Advance(mc.DefaultKVLeaseTTL + time.Second)
		if d, err := m.EvictDRAM(ctx, []string{"A"}, false); d.Dropped != 1 || err != nil {
			t.Errorf("evicting A's DRAM replica: %d %v", d, err)
			return
		}
		if err := writer.Put(ctx, "B", valB); err != nil {
			t.Errorf("put B: %v", err)
			return
		}
		bi, err := m.GetReplicaList(masterapi.WithOffloadPath(ctx), "B")
		if err != nil {
			t.Errorf("lookup B: %v", err)
			return
		}
		for _, r := range info.Replicas {
			if r.Kind == masterapi.DRAM {
				reused = bi.Replicas[0].Offset == r.Offset
			}
		}
	}}
	reader := newTestClient(t, client.Config{Master: sl, LocalNode: n})
	got, err := reader.Get(ctx, "A")
	if err != nil || !bytes.Equal(got, valA) {
		t.Fatalf("get A with a stale DRAM replica: %v", err)
	}
	if !reused {
		t.Fatal("B did not take A's old range: the test did not exercise the re-allocation")
	}
	if rs := reader.ReadStats(); rs.Fallbacks != 1 || rs.LocalSSD != 1 {
		t.Fatalf("read stats %+v: want one fallback, served from SSD", rs)
	}
	// B keeps its replica and its bytes.
	bi, err := m.GetReplicaList(ctx, "B")
	if err != nil || len(bi.Replicas) != 1 || bi.Replicas[0].Kind != masterapi.DRAM {
		t.Fatalf("B after A's reader reported what it saw: %+v %v", bi, err)
	}
	if got, err := writer.Get(ctx, "B"); err != nil || !bytes.Equal(got, valB) {
		t.Fatalf("get B: %v", err)
	}
	if err := m.Check(); err != nil {
		t.Fatal(err)
	}
}

// Issue 21 item 5, made deterministic: between a reader's lookup and its
// read the object is force-removed and its DRAM range re-allocated (and
// written) to another object, over the data plane. The bytes there fail
// the CRC32C, but the replica was removed, not damaged: the Get answers
// OBJECT_NOT_FOUND (a fresh lookup's answer), counts no checksum failure
// and reports nothing bad; the other object keeps its replica.
func TestReadOfRemovedReusedRangeIsNotFound(t *testing.T) {
	ctx := context.Background()
	m := newMaster(t, testMasterConfig())
	n := startTestNode(t, m, "127.0.0.1:0", nil)
	writer := newTestClient(t, client.Config{Master: m, LocalNode: n})
	if err := writer.Put(ctx, "A", rnd(64<<10)); err != nil {
		t.Fatal(err)
	}
	var reused bool
	sl := &staleLookup{API: m, key: "A", between: func(info masterapi.ObjectInfo) {
		if err := m.Remove(ctx, "A", true); err != nil {
			t.Errorf("remove A: %v", err)
			return
		}
		if err := writer.Put(ctx, "B", rnd(64<<10)); err != nil {
			t.Errorf("put B: %v", err)
			return
		}
		bi, err := m.GetReplicaList(masterapi.WithOffloadPath(ctx), "B")
		reused = err == nil && bi.Replicas[0].Offset == info.Replicas[0].Offset
	}}
	reader := newTestClient(t, client.Config{Master: sl}) // remote: the data plane
	_, err := reader.Get(ctx, "A")
	if !errors.Is(err, errcode.ErrObjectNotFound) || errors.Is(err, errcode.ErrChecksumMismatch) {
		t.Fatalf("get of A removed under the read: %v, want OBJECT_NOT_FOUND", err)
	}
	if !reused {
		t.Fatal("B did not take A's old range: the test did not exercise the reuse")
	}
	if rs := reader.ReadStats(); rs.ChecksumFailures != 0 || rs.BadReplicasReported != 0 || rs.RemovedUnderRead != 1 {
		t.Fatalf("read stats %+v: want one replica removed under the read, no checksum failure", rs)
	}
	if bi, err := m.GetReplicaList(ctx, "B"); err != nil || len(bi.Replicas) != 1 {
		t.Fatalf("B after A's reader: %+v %v", bi, err)
	}
}
