package e2e

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/tierstore/tierstore/internal/testkit"
)

// TestTinyLFUPromotionAcrossProcesses: the binaries with the recommended
// admission flags (master tinylfu with promotion, node worth eviction and
// a short sketch interval). DRAM holds 16 objects; 24 puts push the first
// ones to SSD (tinylfu admits DRAM victims); reading one of them from SSD
// makes it frequent enough, and the node's heartbeat promotes it: the
// next read comes from DRAM.
func TestTinyLFUPromotionAcrossProcesses(t *testing.T) {
	m := startMaster(t, 0, "--offload_admission_policy=tinylfu", "--dram_promotion_min_freq=3")
	a := startNode(t, m.Addr, t.TempDir(), "--memory=1MiB", "--ssd_capacity=32MiB", "--backend=uring",
		"--bucket_eviction=worth", "--admission_sketch_interval=100ms")
	c := newClient(t, m.Addr, a.Node)
	vals, keys := putAll(t, c, "promo", 24, 64<<10)
	waitSSDReplicas(t, c, 4)
	ctx := context.Background()
	k := keys[0]
	read := func() (fromSSD, fromDRAM bool) {
		before := c.ReadStats()
		got, err := c.Get(ctx, k)
		if err != nil || !bytes.Equal(got, vals[k]) {
			t.Fatalf("get %s: %v", k, err)
		}
		after := c.ReadStats()
		return after.RemoteSSD+after.LocalSSD > before.RemoteSSD+before.LocalSSD,
			after.RemoteDRAM+after.LocalDRAM > before.RemoteDRAM+before.LocalDRAM
	}
	if ssd, _ := read(); !ssd {
		t.Fatalf("%s was not read from SSD after 23 more puts into a 16-object DRAM", k)
	}
	read() // the put and two SSD reads reach dram_promotion_min_freq
	testkit.Within(t, 20*time.Second, "promotion published", func() error {
		st, err := c.Stats(ctx)
		if err != nil {
			return err
		}
		if st.Promotions < 1 {
			return fmt.Errorf("%d promotions, %d abandoned", st.Promotions, st.PromotionsAbandoned)
		}
		return nil
	})
	if _, dram := read(); !dram {
		t.Fatalf("%s not read from DRAM after its promotion", k)
	}
}
