package main

import (
	"fmt"
	"testing"

	"github.com/tierstore/tierstore/bench/internal/belady"
	"github.com/tierstore/tierstore/bench/internal/trace"
	"pgregory.net/rapid"
)

// bestDemand is the most hits any demand cache of n objects gets on reqs
// from request i on with residents res: every eviction choice is tried.
func bestDemand(reqs []trace.Request, i, n int, res map[string]bool) int64 {
	if i == len(reqs) {
		return 0
	}
	k := reqs[i].Key
	if res[k] {
		return 1 + bestDemand(reqs, i+1, n, res)
	}
	next := func() map[string]bool {
		m := make(map[string]bool, len(res)+1)
		for r := range res {
			m[r] = true
		}
		m[k] = true
		return m
	}
	if len(res) < n {
		return bestDemand(reqs, i+1, n, next())
	}
	var best int64
	for v := range res {
		m := next()
		delete(m, v)
		best = max(best, bestDemand(reqs, i+1, n, m))
	}
	return best
}

// TestDemandMINIsOptimal: demandMIN (the two-tier bound) equals an
// exhaustive search over every eviction choice of a demand cache on small
// traces, and never exceeds Belady's MIN with bypass at the same size.
func TestDemandMINIsOptimal(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		n := rapid.IntRange(1, 3).Draw(t, "n")
		keys := rapid.IntRange(1, 5).Draw(t, "keys")
		var reqs []trace.Request
		for i := rapid.IntRange(0, 11).Draw(t, "len"); i > 0; i-- {
			reqs = append(reqs, trace.Request{Key: fmt.Sprint("k", rapid.IntRange(0, keys-1).Draw(t, "key")), Size: 1})
		}
		got, want := demandMIN(reqs, n), bestDemand(reqs, 0, n, map[string]bool{})
		if got != want {
			t.Fatalf("demandMIN = %d hits, exhaustive %d (n %d, %v)", got, want, n, reqs)
		}
		if len(reqs) > 0 {
			b, err := belady.MIN(reqs, int64(n))
			if err != nil {
				t.Fatal(err)
			}
			if got > b.Hits {
				t.Fatalf("demandMIN %d hits above MIN with bypass %d", got, b.Hits)
			}
		}
	})
}

// TestChurnUsableBlocks: the churn sizes leave 243 DRAM blocks (256 less
// a 5% eviction round) and the SSD's 90% in 8 MiB buckets.
func TestChurnUsableBlocks(t *testing.T) {
	sz := churnSizes{dram: 16 << 20, ssd: 64 << 20, block: 64 << 10}
	got := churnUsableBlocks(sz, 16)
	if got < 243+900 || got > 243+921 {
		t.Fatalf("usable blocks %d, want 243 + about 915", got)
	}
}
