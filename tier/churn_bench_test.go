package tier

import (
	"context"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"testing"

	"github.com/tierstore/tierstore/backend/pwrite"
)

// keySet is a set of keys with a uniform random pick.
type keySet struct {
	keys []string
	at   map[string]int
}

func newKeySet() *keySet { return &keySet{at: map[string]int{}} }

func (s *keySet) add(k string) {
	if _, ok := s.at[k]; !ok {
		s.at[k] = len(s.keys)
		s.keys = append(s.keys, k)
	}
}

func (s *keySet) del(k string) {
	i, ok := s.at[k]
	if !ok {
		return
	}
	last := s.keys[len(s.keys)-1]
	s.keys[i], s.at[last] = last, i
	s.keys = s.keys[:len(s.keys)-1]
	delete(s.at, k)
}

func (s *keySet) pick(r *rand.Rand) (string, bool) {
	if len(s.keys) == 0 {
		return "", false
	}
	return s.keys[r.IntN(len(s.keys))], true
}

// BenchmarkChurnRemoves is the SSD tier under a churn of offloads and
// removes, 30% of the writes being removes (issue 21 item 2): each round
// offloads one bucket of 8 objects of 64 KiB, removes objects the tier
// holds (uniformly, 3 removes for 7 puts) and reads 8 objects put and not
// removed (uniformly; an evicted one is a miss), in a tier of 32 MiB (64
// buckets) on the pwrite backend, the lru policy, 1,200 rounds (75 times
// the capacity). Side by side in one run: mostly dead buckets evicted
// first (the engine's rule) and the policy's order alone. Reported per
// run: the live and dead share of the bucket file bytes at the end and
// their mean over the rounds, the write amplification (bucket file bytes
// written per object byte offloaded), what compaction would have added
// (the live bytes of the evicted buckets rewritten, per object byte
// offloaded), live bytes lost to eviction per object byte offloaded, and
// the read hit ratio.
func BenchmarkChurnRemoves(b *testing.B) {
	const (
		objSize   = 64 << 10
		perBucket = 8
		rounds    = 1200
		capacity  = 64 * (perBucket*objSize + 2*4096)
	)
	for _, deadFirst := range []bool{true, false} {
		b.Run(map[bool]string{true: "dead-first", false: "lru-only"}[deadFirst], func(b *testing.B) {
			for range b.N {
				dir := benchDir(b)
				be, err := pwrite.Open(filepath.Join(dir, "buckets"), pwrite.Options{})
				if err != nil {
					b.Fatal(err)
				}
				onSSD := newKeySet()
				e, err := Open(dir, Options{Backend: be, Capacity: capacity, BucketKeysLimit: perBucket, Eviction: "lru",
					OnEvict: func(_ context.Context, keys [][]byte) ([][]byte, error) {
						for _, k := range keys {
							onSSD.del(string(k)) // called under the offload, on this goroutine's behalf
						}
						return nil, nil
					}})
				if err != nil {
					b.Fatal(err)
				}
				e.noDeadFirst = !deadFirst
				r := rand.New(rand.NewPCG(7, 21))
				readable := newKeySet()
				val := make([]byte, objSize)
				var offloaded, reads, hits int64
				var liveSum, deadSum float64
				next := 0
				for round := range rounds {
					tasks := make([]Task, perBucket)
					for i := range tasks {
						k := fmt.Sprintf("k%07d", next)
						next++
						v := append([]byte(nil), val...)
						v[0], v[1], v[2] = byte(next), byte(next>>8), byte(next>>16)
						tasks[i] = Task{Key: []byte(k), Value: v}
					}
					for i, o := range e.Offload(context.Background(), tasks, nil) {
						if o.Status != Persisted {
							b.Fatalf("round %d: offload of %s: %v %v", round, tasks[i].Key, o.Status, o.Err)
						}
						onSSD.add(string(tasks[i].Key))
						readable.add(string(tasks[i].Key))
						offloaded += objSize
					}
					// 3 removes per 7 puts: 8*3/7 per round, the
					// remainder carried by the round number.
					removes := (round+1)*perBucket*3/7 - round*perBucket*3/7
					for range removes {
						k, ok := onSSD.pick(r)
						if !ok {
							break
						}
						if err := e.Remove([]byte(k)); err != nil {
							b.Fatal(err)
						}
						onSSD.del(k)
						readable.del(k)
					}
					for range perBucket {
						k, ok := readable.pick(r)
						if !ok {
							break
						}
						reads++
						if res := e.Load(context.Background(), [][]byte{[]byte(k)}); res[0].Err == nil {
							hits++
						}
					}
					st := e.Stats()
					liveSum += float64(st.LiveBytes) / float64(st.BytesUsed)
					deadSum += float64(st.DeadBytes) / float64(st.BytesUsed)
				}
				st := e.Stats()
				b.ReportMetric(float64(st.LiveBytes)/float64(st.BytesUsed), "live/used")
				b.ReportMetric(float64(st.DeadBytes)/float64(st.BytesUsed), "dead/used")
				b.ReportMetric(liveSum/rounds, "mean-live/used")
				b.ReportMetric(deadSum/rounds, "mean-dead/used")
				b.ReportMetric(float64(st.BytesWritten)/float64(offloaded), "write-amp")
				b.ReportMetric(float64(st.BytesWritten+st.EvictedLiveBytes)/float64(offloaded), "write-amp-if-compacted")
				b.ReportMetric(float64(st.EvictedLiveBytes)/float64(offloaded), "live-evicted/offloaded")
				b.ReportMetric(float64(hits)/float64(reads), "hit-ratio")
				b.ReportMetric(float64(st.Evictions), "evictions")
				if err := e.Close(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
