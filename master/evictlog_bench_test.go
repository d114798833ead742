package master

import (
	"fmt"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tierstore/tierstore/masterapi"
)

// evictStores names the removal stores the eviction benchmarks compare:
// in memory, and a file in a temporary --state_dir (an fdatasync per
// group commit).
func evictStores(b *testing.B) map[string]func() RemovalStore {
	return map[string]func() RemovalStore{
		"memory": func() RemovalStore { return NewMemoryRemovalStore() },
		"file": func() RemovalStore {
			f, err := OpenFileRemovalStore(b.TempDir())
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { f.Close() })
			return f
		},
	}
}

func evictBenchService(b *testing.B, store RemovalStore, segment int64, shards ...int) *Service {
	cfg := DefaultConfig()
	if len(shards) > 0 {
		cfg.Shards = shards[0]
	}
	cfg.MonitorInterval = 0
	cfg.ClientTTL = time.Hour
	cfg.EnableOffload = true
	cfg.Removals = store
	cfg.Logger = slog.New(slog.DiscardHandler)
	s, err := New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	if err := s.MountSegment(bg, masterapi.MountRequest{Node: "n", Endpoint: "e", Segment: "s", Size: segment}); err != nil {
		b.Fatal(err)
	}
	return s
}

// BenchmarkPutUnderEviction: puts of 4 KiB into a 16 MiB segment, every
// one past the first 4096 evicting for room, with the removal log in
// memory and in a file, at 1024 and 65536 metadata shards. Evictions for
// room write no log entry, so the two stores must cost the same
// (docs/design.md, "Evictions"); an eviction round visits only the
// shards holding DRAM objects (shard.dram, Service.dramShards), so the
// two shard counts must cost about the same too.
func BenchmarkPutUnderEviction(b *testing.B) {
	for _, name := range []string{"memory", "file"} {
		for _, shards := range []int{1024, 65536} {
			b.Run(fmt.Sprintf("%s/shards=%d", name, shards), func(b *testing.B) {
				s := evictBenchService(b, evictStores(b)[name](), 16<<20, shards)
				var ctr atomic.Uint64
				b.ReportAllocs()
				b.ResetTimer()
				for range b.N {
					k := benchKey(int(ctr.Add(1)))
					benchPutPair(b, s, k)
					s.ReRegisterSSDObjects(bg, "n", []masterapi.SSDObject{{Key: k, Size: 4096}}) // evictable
				}
				b.StopTimer()
				st, _ := s.Stats(bg)
				b.ReportMetric(float64(st.Evictions)/float64(b.N), "evictions/op")
				b.ReportMetric(float64(s.RemovalLog().Retained), "log-entries")
			})
		}
	}
}

// BenchmarkEvictDRAM: one EvictDRAM of one key (its entry durable
// before the answer), with the removal log in memory and in a file.
func BenchmarkEvictDRAM(b *testing.B) {
	for _, name := range []string{"memory", "file"} {
		b.Run(name, func(b *testing.B) {
			s := evictBenchService(b, evictStores(b)[name](), 1<<30)
			keys := make([]string, b.N)
			for i := range keys {
				keys[i] = fmt.Sprintf("k%d", i)
				r, err := s.PutStart(bg, masterapi.PutStartRequest{Key: keys[i], Size: 4096})
				if err != nil {
					b.Fatal(err)
				}
				if err := s.PutEnd(bg, keys[i], r.PutToken); err != nil {
					b.Fatal(err)
				}
				s.ReRegisterSSDObjects(bg, "n", []masterapi.SSDObject{{Key: keys[i], Size: 4096}})
			}
			b.ResetTimer()
			for i := range b.N {
				if res, err := s.EvictDRAM(bg, keys[i:i+1], false); err != nil || res.Dropped != 1 {
					b.Fatal(res, err)
				}
			}
		})
	}
}
