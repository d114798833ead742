package node

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/tierstore/tierstore/client"
)

// TestFullDRAMDrainsWithoutTicks: with a heartbeat of an hour, puts of 4x
// the node's DRAM through a real tier all succeed: every put that finds
// DRAM full waits for room, the master wakes the node (WaitOffload), and
// its offload rounds make the room; no tick ever comes. Every object is
// offloaded exactly once (no task lost: each has its SSD copy, none
// duplicated: the node persisted one per key, the tier holds one per
// key), reads return the bytes put, and the master's invariants hold.
func TestFullDRAMDrainsWithoutTicks(t *testing.T) {
	mc := testMasterConfig()
	mc.PutStartMaxWait = time.Minute
	m := newMaster(t, mc)
	cfg := testNodeConfig("")
	cfg.OffloadWake = true
	cfg.Memory = 2 << 20
	cfg.EnableOffload = true
	cfg.SSDDir = t.TempDir()
	cfg.Backend = "pwrite"
	cfg.SSDCapacity = 64 << 20
	n, err := Start(context.Background(), cfg, m)
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	c := newTestClient(t, client.Config{Master: m, LocalNode: n})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const writers, each, size = 4, 8, 256 << 10 // 8 MiB: 4x the DRAM
	vals := make([][]byte, writers*each)
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				k := w*each + i
				vals[k] = rnd(size)
				if err := c.Put(ctx, fmt.Sprint("w", k), vals[k]); err != nil {
					errs <- fmt.Errorf("put %d: %w", k, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	n.OffloadNow() // the last puts' tasks (below the wake threshold)
	st, err := m.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.SSDReplicas != int64(len(vals)) || st.OffloadQueued != 0 || st.OffloadInFlight != 0 {
		t.Fatalf("%d SSD replicas of %d objects, %d tasks queued, %d in flight", st.SSDReplicas, len(vals), st.OffloadQueued, st.OffloadInFlight)
	}
	ns := n.Stats()
	if ns.OffloadPersisted != int64(len(vals)) || ns.OffloadFailed != 0 || ns.Tier.Objects != int64(len(vals)) {
		t.Fatalf("node persisted %d, failed %d, tier holds %d; want %d, 0, %d", ns.OffloadPersisted, ns.OffloadFailed, ns.Tier.Objects, len(vals), len(vals))
	}
	if ns.OffloadWakes == 0 {
		t.Fatal("no heartbeat was woken by the master")
	}
	for k, v := range vals {
		got, err := c.Get(ctx, fmt.Sprint("w", k))
		if err != nil || !bytes.Equal(got, v) {
			t.Fatalf("get w%d: %v", k, err)
		}
	}
	if err := m.Check(); err != nil {
		t.Fatal(err)
	}
}
