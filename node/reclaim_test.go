package node

import (
	"context"
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"
)

// SSD live and dead bytes through the node's metrics and its NodeStats
// (what `tierstore stats --node` prints), with the real tier: two objects
// offloaded in one round share a bucket; a forced remove the node applies
// from the removal log moves one object's bytes from live to dead, and
// removing the other deletes the bucket (issue 21 item 2).
func TestSSDLiveAndDeadBytes(t *testing.T) {
	r := newLifeRig(t)
	ctx := context.Background()
	const size = 64 << 10
	for _, k := range []string{"a", "b"} {
		if err := r.c.Put(ctx, k, rnd(size)); err != nil {
			t.Fatal(err)
		}
	}
	r.n.OffloadNow()
	check := func(live, dead, buckets int64) {
		t.Helper()
		st, err := PeerStats(ctx, r.n.Endpoint())
		if err != nil {
			t.Fatal(err)
		}
		if st.Tier.LiveBytes != live || st.Tier.DeadBytes != dead || st.Tier.Buckets != buckets {
			t.Fatalf("node stats: %d live, %d dead bytes, %d buckets; want %d, %d, %d", st.Tier.LiveBytes, st.Tier.DeadBytes, st.Tier.Buckets, live, dead, buckets)
		}
		rec := httptest.NewRecorder()
		r.n.MetricsHandler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
		for _, want := range []string{
			fmt.Sprintf("tierstore_node_ssd_bytes_live{node=%q} %d", r.n.Name(), live),
			fmt.Sprintf("tierstore_node_ssd_bytes_dead{node=%q} %d", r.n.Name(), dead),
		} {
			if !strings.Contains(rec.Body.String(), want) {
				t.Fatalf("metrics lack %q", want)
			}
		}
	}
	check(2*size, 0, 1)
	if err := r.c.Remove(ctx, "a", true); err != nil {
		t.Fatal(err)
	}
	if err := r.n.SyncRemovals(ctx); err != nil {
		t.Fatal(err)
	}
	check(size, size, 1)
	if err := r.c.Remove(ctx, "b", true); err != nil {
		t.Fatal(err)
	}
	if err := r.n.SyncRemovals(ctx); err != nil {
		t.Fatal(err)
	}
	check(0, 0, 0)
}
