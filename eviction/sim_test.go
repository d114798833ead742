package eviction

import (
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

// simulate replays reads of bucket ids through a tier of capacity buckets
// (all of size 1) managed by p: a read of a tracked bucket is a hit (Touch);
// a miss writes the bucket (Add), evicting Victims first when the tier is
// full. It returns the hit ratio.
func simulate(p Policy, capacity int, reads []uint64) float64 {
	hits := 0
	tracked := map[uint64]bool{}
	for _, id := range reads {
		if tracked[id] {
			hits++
			p.Touch(id)
			continue
		}
		if p.Len() >= capacity {
			for _, v := range p.Victims(int64(p.Len()-capacity+1), nil) {
				p.Remove(v)
				delete(tracked, v)
			}
		}
		p.Add(id, 1)
		tracked[id] = true
	}
	return float64(hits) / float64(len(reads))
}

// scanMix is a read trace of a KV-cache tier: a skewed working set of
// shared prefixes (ids 0..999, Zipf) interleaved with one-off long prompts
// whose buckets are read once, in runs of 150 (ids from 1e6 up) starting
// at 0.5% of the reads (so ~43% of all reads are scan reads).
func scanMix(seed uint64, n int) []uint64 {
	r := rand.New(rand.NewPCG(seed, 1))
	z := rand.NewZipf(r, 1.1, 1, 999)
	next := uint64(1_000_000)
	out := make([]uint64, 0, n)
	for len(out) < n {
		if r.IntN(1000) < 5 {
			for i := 0; i < 150 && len(out) < n; i++ {
				out = append(out, next)
				next++
			}
			continue
		}
		out = append(out, z.Uint64())
	}
	return out
}

// On a trace mixing a skewed working set with one-hit scans, lru2 keeps the
// working set and hits more often than lru and fifo.
func TestLRU2HitRatioOnScanMix(t *testing.T) {
	reads := scanMix(42, 60_000)
	ratios := map[string]float64{}
	for _, name := range Names {
		p, _ := New(name)
		ratios[name] = simulate(p, 200, reads)
	}
	t.Logf("hit ratios: %v", ratios)
	require.Greater(t, ratios["lru2"], ratios["lru"])
	require.Greater(t, ratios["lru2"], ratios["fifo"])
}

// BenchmarkSimulateScanMix reports each policy's hit ratio on the scan mix
// (metric "hit%") and the cost of the replay.
func BenchmarkSimulateScanMix(b *testing.B) {
	reads := scanMix(7, 100_000)
	for _, name := range Names {
		b.Run(name, func(b *testing.B) {
			var ratio float64
			for b.Loop() {
				p, _ := New(name)
				ratio = simulate(p, 200, reads)
			}
			b.ReportMetric(100*ratio, "hit%")
		})
	}
}
