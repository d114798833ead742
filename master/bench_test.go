package master

import (
	"fmt"
	"github.com/tierstore/tierstore/mastergrpc"
	"log/slog"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tierstore/tierstore/masterapi"
)

// benchObjects is the population of the lookup benchmarks.
const benchObjects = 1_000_000

var (
	benchOnce sync.Once
	benchSvc  *Service
	benchKeys []string
	benchMem  float64 // heap bytes per object measured while filling
)

func benchKey(i int) string { return fmt.Sprintf("kv/%016x/%08d", uint64(i)*0x9E3779B97F4A7C15, i) }

// benchService returns a Service holding benchObjects complete objects
// (64 B each in DRAM, every 4th also on SSD), built once per process.
func benchService(b *testing.B) (*Service, []string) {
	benchOnce.Do(func() {
		s := quietService(b)
		for n := 0; n < 4; n++ {
			if err := s.MountSegment(bg, masterapi.MountRequest{Node: fmt.Sprint("n", n), Endpoint: "e", Segment: "s", Size: 32 << 20}); err != nil {
				panic(err)
			}
		}
		keys := make([]string, benchObjects)
		for i := range keys {
			keys[i] = benchKey(i)
		}
		runtime.GC()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		for i, k := range keys {
			r, err := s.PutStart(bg, masterapi.PutStartRequest{Key: k, Size: 64, CRC: uint32(i), PreferredNode: fmt.Sprint("n", i%4)})
			if err != nil {
				panic(err)
			}
			if err := s.PutEnd(bg, k, r.PutToken); err != nil {
				panic(err)
			}
			if i%4 == 0 {
				s.ReRegisterSSDObjects(bg, fmt.Sprint("n", (i+1)%4), []masterapi.SSDObject{{Key: k, Size: 64, CRC: uint32(i)}})
			}
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		// Keys were allocated before the measurement: add their bytes.
		keyBytes := float64(len(keys[0]) + 16)
		benchMem = float64(after.HeapAlloc-before.HeapAlloc)/float64(len(keys)) + keyBytes
		benchSvc, benchKeys = s, keys
	})
	return benchSvc, benchKeys
}

// BenchmarkMemoryPerObject reports the master's heap per object (metadata,
// key, replicas) with 1M objects resident.
func BenchmarkMemoryPerObject(b *testing.B) {
	benchService(b)
	for i := 0; i < b.N; i++ {
	}
	b.ReportMetric(benchMem, "heapB/object")
	b.ReportMetric(benchMem*benchObjects/(1<<20), "MiB/1M-objects")
}

func BenchmarkExistKey(b *testing.B) {
	s, keys := benchService(b)
	var ctr atomic.Uint64
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		i := int(ctr.Add(1) * 7919)
		for pb.Next() {
			i++
			if ok, err := s.ExistKey(bg, keys[i%len(keys)]); !ok || err != nil {
				b.Fatal(ok, err)
			}
		}
	})
}

func BenchmarkGetReplicaList(b *testing.B) {
	s, keys := benchService(b)
	var ctr atomic.Uint64
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		i := int(ctr.Add(1) * 7919)
		for pb.Next() {
			i++
			if _, err := s.GetReplicaList(bg, keys[i%len(keys)]); err != nil {
				b.Fatal(err)
			}
		}
	})
}

func batches(keys []string, size int) [][]string {
	var out [][]string
	for i := 0; i+size <= len(keys) && len(out) < 256; i += len(keys) / 256 {
		out = append(out, keys[i:i+size])
	}
	return out
}

// BenchmarkBatchExistKey1000: one op is a batch of 1000 keys; keys/s is
// reported.
func BenchmarkBatchExistKey1000(b *testing.B) {
	benchBatch1000(b, func(s *Service, keys []string) error {
		_, err := s.BatchExistKey(bg, keys)
		return err
	})
}

func BenchmarkBatchGetReplicaList1000(b *testing.B) {
	benchBatch1000(b, func(s *Service, keys []string) error {
		_, err := s.BatchGetReplicaList(bg, keys)
		return err
	})
}

// benchBatch1000 runs call on batches of 1000 keys from both cores and
// reports keys/s.
func benchBatch1000(b *testing.B, call func(s *Service, keys []string) error) {
	s, keys := benchService(b)
	runBatches(b, s, batches(keys, 1000), call)
}

// runBatches calls call(on, batch) from parallel goroutines, each starting
// at another of the batches bs (of 1000 keys), and reports keys/s.
func runBatches[T any](b *testing.B, on T, bs [][]string, call func(on T, keys []string) error) {
	var ctr atomic.Uint64
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		i := int(ctr.Add(1))
		for pb.Next() {
			i++
			if err := call(on, bs[i%len(bs)]); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.ReportMetric(float64(b.N)*1000/b.Elapsed().Seconds(), "keys/s")
}

// BenchmarkPutStartEnd: one op is a PutStart + PutEnd pair of a new 4 KiB
// object into a 256 MiB segment; eviction runs whenever it fills.
func BenchmarkPutStartEnd(b *testing.B) {
	s := quietService(b)
	defer s.Close()
	for n := 0; n < 2; n++ {
		if err := s.MountSegment(bg, masterapi.MountRequest{Node: fmt.Sprint("n", n), Endpoint: "e", Segment: "s", Size: 128 << 20}); err != nil {
			b.Fatal(err)
		}
	}
	var ctr atomic.Uint64
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			benchPutPair(b, s, benchKey(int(ctr.Add(1))))
		}
	})
	st, _ := s.Stats(bg)
	b.ReportMetric(float64(st.Evictions)/float64(b.N), "evictions/op")
}

// BenchmarkGRPCBatchGetReplicaList1000: batch lookups of 1000 keys through
// *mastergrpc.Client over a real 127.0.0.1 gRPC connection.
func BenchmarkGRPCBatchGetReplicaList1000(b *testing.B) {
	benchGRPCBatches(b, func(r *mastergrpc.Client, keys []string) error {
		res, err := r.BatchGetReplicaList(bg, keys)
		if err == nil {
			err = res[0].Err
		}
		return err
	})
}

func BenchmarkGRPCBatchExistKey1000(b *testing.B) {
	benchGRPCBatches(b, func(r *mastergrpc.Client, keys []string) error {
		_, err := r.BatchExistKey(bg, keys)
		return err
	})
}

// benchGRPCBatches runs call over gRPC on batches of 1000 keys from
// parallel goroutines and reports keys per second.
func benchGRPCBatches(b *testing.B, call func(r *mastergrpc.Client, keys []string) error) {
	s, keys := benchService(b)
	runBatches(b, remoteService(b, s), batches(keys, 1000), call)
}

// BenchmarkAbandonedPutReclaim: one round of the reclaim of abandoned puts
// on a master holding 1M SSD-only objects and a put in progress, as Tick
// runs it every quarter of put_start_discard_timeout under steady puts
// ("reclaim": only the objects with a DRAM replica), beside the full sweep
// it ran before ("full-sweep": every object).
func BenchmarkAbandonedPutReclaim(b *testing.B) {
	const objects = 1 << 20
	cfg := DefaultConfig()
	cfg.MonitorInterval = 0
	cfg.Logger = slog.New(slog.DiscardHandler)
	cfg.ClientTTL = 1000 * time.Hour // the node stays alive while the clock jumps
	clk := NewManualClock(time.Unix(1e9, 0))
	cfg.Clock = clk
	s, err := New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	if err := s.MountSegment(bg, masterapi.MountRequest{Node: "n", Endpoint: "e", Segment: "s", Size: 1 << 30}); err != nil {
		b.Fatal(err)
	}
	for i := 0; i < objects; i += 4096 {
		objs := make([]masterapi.SSDObject, 0, 4096)
		for j := i; j < i+4096; j++ {
			objs = append(objs, masterapi.SSDObject{Key: benchKey(j), Size: 64, CRC: uint32(j)})
		}
		if _, err := s.ReRegisterSSDObjects(bg, "n", objs); err != nil {
			b.Fatal(err)
		}
	}
	quarter := cfg.PutStartDiscardTimeout / 4
	for _, round := range []struct {
		name string
		run  func()
	}{
		{"reclaim", s.Tick},
		{"full-sweep", func() { s.sweep(s.now()) }},
	} {
		b.Run(round.name, func(b *testing.B) {
			for i := 0; b.Loop(); i++ {
				if _, err := s.PutStart(bg, masterapi.PutStartRequest{Key: fmt.Sprint("in-progress/", round.name, i), Size: 64}); err != nil {
					b.Fatal(err)
				}
				clk.Advance(quarter)
				round.run()
			}
			b.ReportMetric(float64(objects), "objects")
		})
	}
}

// quietService is a master for benchmarks: no monitor loop, nodes never
// expire, no logs.
func quietService(b *testing.B) *Service {
	b.Helper()
	cfg := DefaultConfig()
	cfg.MonitorInterval = 0
	cfg.ClientTTL = time.Hour
	cfg.Logger = slog.New(slog.DiscardHandler)
	s, err := New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	return s
}

// benchPutPair puts a new object of 4 KiB under k: PutStart, then PutEnd.
func benchPutPair(b *testing.B, s *Service, k string) {
	r, err := s.PutStart(bg, masterapi.PutStartRequest{Key: k, Size: 4096})
	if err != nil {
		b.Fatal(err)
	}
	if err := s.PutEnd(bg, k, r.PutToken); err != nil {
		b.Fatal(err)
	}
}
