package master

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"runtime/debug"
	rtmetrics "runtime/metrics"
	"testing"

	"github.com/tierstore/tierstore/masterapi"
)

// BenchmarkReRegisterThenEvict measures what a re-registration's
// objects cost the heap once part of them are gone: 2M keys of ~30
// bytes re-registered in chunks of 4096 (as a node sends them), then
// their SSD replicas evicted (EvictSSDReplica, as a node's bucket
// eviction reports them; an object left without a replica goes) at
// random or in the order they were registered (a node lists its tier
// roughly bucket by bucket). It reports the live heap per registered
// key after the re-registration and per key left after each eviction
// (after a GC): a chunk's objects share slabs and its keys one buffer,
// which stay while any of their objects lives (docs/benchmarks.md,
// stop 39).
func BenchmarkReRegisterThenEvict(b *testing.B) {
	for _, tc := range []struct {
		name   string
		share  float64 // evicted
		random bool
	}{
		{"random50%", 0.5, true},
		{"random90%", 0.9, true},
		{"ordered90%", 0.9, false},
	} {
		b.Run(tc.name, func(b *testing.B) {
			const keys, chunk = 2_000_000, 4096
			var after, left float64
			for b.Loop() {
				s := quietService(b)
				if err := s.MountSegment(bg, masterapi.MountRequest{Node: "n", Endpoint: "e", Segment: "s", Size: 1 << 20}); err != nil {
					b.Fatal(err)
				}
				names := make([]string, keys)
				base := liveHeap()
				for lo := 0; lo < keys; lo += chunk {
					var c masterapi.SSDColumns
					for i := lo; i < min(lo+chunk, keys); i++ {
						names[i] = benchKey(i) + fmt.Sprint("/e", i%1000)
						c.Keys = append(c.Keys, names[i]...)
						c.Lens = append(c.Lens, uint32(len(names[i])))
						c.Sizes = append(c.Sizes, 64<<10)
						c.CRCs = append(c.CRCs, uint32(i))
					}
					if lo == 0 {
						c.Expected = keys
					}
					if _, err := s.ReRegisterSSDColumns(bg, "n", c); err != nil {
						b.Fatal(err)
					}
				}
				full := liveHeap() - base
				order := make([]int, keys)
				for i := range order {
					order[i] = i
				}
				if tc.random {
					rand.New(rand.NewPCG(3, 4)).Shuffle(keys, func(i, j int) { order[i], order[j] = order[j], order[i] })
				}
				gone := int(tc.share * keys)
				for lo := 0; lo < gone; lo += chunk {
					batch := make([]string, 0, chunk)
					for _, i := range order[lo:min(lo+chunk, gone)] {
						batch = append(batch, names[i])
					}
					if _, err := s.EvictSSDReplica(bg, "n", batch); err != nil {
						b.Fatal(err)
					}
				}
				if got := s.cnt.objects.Load(); got != int64(keys-gone) {
					b.Fatalf("%d objects left, want %d", got, keys-gone)
				}
				clear(names)
				rest := liveHeap() - base
				after += float64(full) / keys
				left += float64(rest) / float64(keys-gone)
				runtime.KeepAlive(s)
				s.Close()
			}
			b.ReportMetric(after/float64(b.N), "B/key-registered")
			b.ReportMetric(left/float64(b.N), "B/key-left")
		})
	}
}

// liveHeap is the heap's bytes in spans in use after a full collection
// and a return of free pages to the OS: its live objects and the free
// slots of spans that hold any (which a process's RSS keeps; the live
// bytes alone would not count a span of 46 objects kept by one of them).
func liveHeap() int64 {
	runtime.GC()
	debug.FreeOSMemory()
	s := []rtmetrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}, {Name: "/memory/classes/heap/unused:bytes"}}
	rtmetrics.Read(s)
	return int64(s[0].Value.Uint64() + s[1].Value.Uint64())
}
