package uring

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tierstore/tierstore/backend"
	"github.com/tierstore/tierstore/backend/backendtest"
	"github.com/tierstore/tierstore/backend/pwrite"
)

// benchDir is TIERSTORE_BENCH_DIR, or a temporary directory on a real disk:
// os.TempDir() unless it is tmpfs/ramfs, then /var/tmp.
func benchDir(b *testing.B) string {
	b.Helper()
	parent := os.Getenv("TIERSTORE_BENCH_DIR")
	if parent == "" {
		parent = os.TempDir()
		var fs unix.Statfs_t
		if unix.Statfs(parent, &fs) == nil && (fs.Type == unix.TMPFS_MAGIC || fs.Type == unix.RAMFS_MAGIC) {
			parent = "/var/tmp"
		}
	}
	d, err := os.MkdirTemp(parent, "tierstore-bench-")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { os.RemoveAll(d) })
	return d
}

// benchBackends opens the backends compared side by side.
func benchBackends(b *testing.B) []backend.Backend {
	b.Helper()
	u, err := Open(benchDir(b), DefaultOptions())
	if err != nil {
		b.Fatal(err)
	}
	p, err := pwrite.Open(benchDir(b), pwrite.Options{Direct: true})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { u.Close(); p.Close() })
	return []backend.Backend{u, p}
}

// cpuTime is the user+system CPU time this process has used.
func cpuTime() time.Duration {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// reportCPU adds the CPU time per operation since start (whole process,
// so it includes the runtime and GC) as the metric cpu-ns/op.
func reportCPU(b *testing.B, start time.Duration) {
	b.ReportMetric(float64(cpuTime()-start)/float64(b.N), "cpu-ns/op")
}

// objects returns bucket/obj iovecs of obj bytes, all views of one 4 MiB
// pattern (cheap to set up, and the same bytes every run).
func objects(bucket, obj int) [][]byte {
	pat := backendtest.Pattern(42, 4<<20)
	out := make([][]byte, 0, bucket/obj)
	for off := 0; off < bucket; off += obj {
		p := off % len(pat)
		out = append(out, pat[p:p+obj:p+obj])
	}
	return out
}

func sizeName(n int) string {
	if n >= 1<<20 {
		return fmt.Sprintf("%dMiB", n>>20)
	}
	return fmt.Sprintf("%dKiB", n>>10)
}

// BenchmarkWriteBucket writes whole buckets made of objects (one iovec per
// object), fdatasync and directory fsync included, deleting each bucket
// untimed. Compare with fio --rw=write --bs=1M --direct=1
// --ioengine=io_uring --iodepth=16 --fdatasync=<bucket/1M>.
func BenchmarkWriteBucket(b *testing.B) {
	bes := benchBackends(b)
	for _, bucket := range []int{64 << 20, 256 << 20} {
		for _, obj := range []int{256 << 10, 1 << 20} {
			data := objects(bucket, obj)
			for _, be := range bes {
				name := fmt.Sprintf("bucket=%s/obj=%s/%s", sizeName(bucket), sizeName(obj), be.Name())
				b.Run(name, func(b *testing.B) {
					b.SetBytes(int64(bucket))
					id := uint64(0)
					cpu0 := cpuTime()
					defer func() { reportCPU(b, cpu0) }()
					for b.Loop() {
						id++
						if err := be.WriteBucket(context.Background(), id, data); err != nil {
							b.Fatal(err)
						}
						b.StopTimer()
						if err := be.Delete(id); err != nil {
							b.Fatal(err)
						}
						b.StartTimer()
					}
				})
			}
		}
	}
}

// BenchmarkRead reads random objects of one 256 MiB bucket: ops=32 is one
// Load of 32 objects (the whole call at queue depth 32, so each call ends
// with the slowest read), ops=256 one Load of 256 objects kept at queue
// depth 32 (steady state, the figure to compare with fio --rw=randread
// --bs=<obj> --iodepth=32 --direct=1 --ioengine=io_uring).
func BenchmarkRead(b *testing.B) {
	const bucket = 256 << 20
	bes := benchBackends(b)
	data := objects(bucket, 1<<20)
	for _, be := range bes {
		if err := be.WriteBucket(context.Background(), 1, data); err != nil {
			b.Fatal(err)
		}
	}
	for _, obj := range []int{1 << 20, 64 << 10} {
		for _, perCall := range []int{32, 256} {
			for _, be := range bes {
				benchRead(b, be, bucket, obj, perCall)
			}
		}
	}
}

func benchRead(b *testing.B, be backend.Backend, bucket, obj, perCall int) {
	{
		{
			b.Run(fmt.Sprintf("obj=%s/ops=%d/%s", sizeName(obj), perCall, be.Name()), func(b *testing.B) {
				rng := rand.New(rand.NewPCG(1, uint64(obj)))
				ops := make([]backend.ReadOp, perCall)
				b.SetBytes(int64(obj * perCall))
				cpu0 := cpuTime()
				defer func() { reportCPU(b, cpu0) }()
				for b.Loop() {
					for i := range ops {
						ops[i] = backend.ReadOp{Off: int64(rng.IntN(bucket/obj) * obj), Len: obj}
					}
					if err := backend.ReadFile(context.Background(), be, 1, ops); err != nil {
						b.Fatal(err)
					}
					for i := range ops {
						if ops[i].Err != nil {
							b.Fatal(ops[i].Err)
						}
					}
				}
			})
		}
	}
}

// BenchmarkWriteTuning writes 256 MiB buckets of 1 MiB objects with the uring
// backend at several chunk sizes and write depths (how the defaults were
// chosen).
func BenchmarkWriteTuning(b *testing.B) {
	const bucket = 256 << 20
	data := objects(bucket, 1<<20)
	for _, chunk := range []int{256 << 10, 1 << 20, 2 << 20, 4 << 20, 8 << 20} {
		for _, depth := range []int{2, 4, 8, 16} {
			b.Run(fmt.Sprintf("chunk=%s/depth=%d", sizeName(chunk), depth), func(b *testing.B) {
				opts := DefaultOptions()
				opts.ChunkSize, opts.WriteDepth = chunk, depth
				be, err := Open(benchDir(b), opts)
				if err != nil {
					b.Fatal(err)
				}
				defer be.Close()
				b.SetBytes(bucket)
				cpu0 := cpuTime()
				defer func() { reportCPU(b, cpu0) }()
				id := uint64(0)
				for b.Loop() {
					id++
					if err := be.WriteBucket(context.Background(), id, data); err != nil {
						b.Fatal(err)
					}
					b.StopTimer()
					if err := be.Delete(id); err != nil {
						b.Fatal(err)
					}
					b.StartTimer()
				}
			})
		}
	}
}
