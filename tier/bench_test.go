package tier

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/tierstore/tierstore/backend"
	"github.com/tierstore/tierstore/backend/pwrite"
	"github.com/tierstore/tierstore/backend/uring"
)

// benchDir is where benchmarks put bucket files: $TIERSTORE_BENCH_DIR, or a
// temporary directory (which must be on the disk being measured).
func benchDir(b *testing.B) string {
	if d := os.Getenv("TIERSTORE_BENCH_DIR"); d != "" {
		dir, err := os.MkdirTemp(d, "tier-bench-")
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { os.RemoveAll(dir) })
		return dir
	}
	return b.TempDir()
}

var benchBackends = []struct {
	name string
	open func(dir string) (backend.Backend, error)
}{
	{"pwrite", func(dir string) (backend.Backend, error) { return pwrite.Open(dir, pwrite.Options{}) }},
	{"pwrite+direct", func(dir string) (backend.Backend, error) { return pwrite.Open(dir, pwrite.Options{Direct: true}) }},
	{"uring+direct", func(dir string) (backend.Backend, error) { return uring.Open(dir, uring.Options{Direct: true}) }},
}

var benchSizes = []int{64 << 10, 256 << 10, 1 << 20}

// BenchmarkOffload measures Offload of 128 MiB worth of objects per call
// (two 64 MiB buckets, pipelined), durable on return.
func BenchmarkOffload(b *testing.B) {
	for _, bk := range benchBackends {
		for _, size := range benchSizes {
			b.Run(fmt.Sprintf("%s/%dKiB", bk.name, size>>10), func(b *testing.B) {
				dir := benchDir(b)
				be, err := bk.open(filepath.Join(dir, "buckets"))
				if err != nil {
					b.Fatal(err)
				}
				n := (128 << 20) / size
				e, err := Open(dir, Options{Backend: be, BucketBytesLimit: 64<<20 + 1<<20, BucketKeysLimit: n / 2})
				if err != nil {
					b.Fatal(err)
				}
				defer e.Close()
				tasks := makeTasks("x", n, size, 1)
				b.SetBytes(int64(n * size))
				i := 0
				for b.Loop() {
					for j := range tasks {
						tasks[j].Key = fmt.Appendf(tasks[j].Key[:0], "k-%d-%d", i, j)
					}
					i++
					for _, o := range e.Offload(bg, tasks, nil) {
						if o.Status != Persisted {
							b.Fatal(o.Err)
						}
					}
					// Keep the disk footprint bounded.
					if i%4 == 0 {
						b.StopTimer()
						for k := i - 4; k < i; k++ {
							for j := range tasks {
								_ = e.Remove(fmt.Appendf(nil, "k-%d-%d", k, j))
							}
						}
						b.StartTimer()
					}
				}
			})
		}
	}
}

// BenchmarkLoad measures random single-object Loads, 32 keys per call, from
// 256 MiB of objects.
func BenchmarkLoad(b *testing.B) {
	for _, bk := range benchBackends {
		for _, size := range benchSizes {
			b.Run(fmt.Sprintf("%s/%dKiB", bk.name, size>>10), func(b *testing.B) {
				dir := benchDir(b)
				be, err := bk.open(filepath.Join(dir, "buckets"))
				if err != nil {
					b.Fatal(err)
				}
				e, err := Open(dir, Options{Backend: be})
				if err != nil {
					b.Fatal(err)
				}
				defer e.Close()
				n := (256 << 20) / size
				tasks := makeTasks("x", n, size, 2)
				for _, o := range e.Offload(bg, tasks, nil) {
					if o.Status != Persisted {
						b.Fatal(o.Err)
					}
				}
				keys := keysOf(tasks)
				for i := range tasks {
					tasks[i].Value = nil
				}
				dropCaches()
				const batch = 32
				b.SetBytes(int64(batch * size))
				x := uint64(12345)
				req := make([][]byte, batch)
				for b.Loop() {
					for j := range req {
						x = x*6364136223846793005 + 1442695040888963407
						req[j] = keys[(x>>33)%uint64(n)]
					}
					for _, r := range e.Load(bg, req) {
						if r.Err != nil {
							b.Fatal(r.Err)
						}
					}
				}
			})
		}
	}
}

// dropCaches empties the page cache (best effort, needs root) so that
// buffered reads come from the disk, as fio's O_DIRECT reads do.
func dropCaches() {
	_ = os.WriteFile("/proc/sys/vm/drop_caches", []byte("1"), 0)
}

// BenchmarkFio runs fio on the benchmark directory in the same run, so the
// engine's figures can be read as ratios of the disk's: sequential 1 MiB
// O_DIRECT writes at iodepth 16 with an fdatasync every 64 MiB (one bucket),
// and O_DIRECT random reads at each object size, iodepth 32. It reports fio's
// own bandwidth as fio-MB/s (ns/op includes fio's start-up and file layout,
// ignore it); skipped when fio is not installed.
func BenchmarkFio(b *testing.B) {
	fio, err := exec.LookPath("fio")
	if err != nil {
		b.Skip("fio not installed (apt-get install fio)")
	}
	run := func(b *testing.B, args ...string) {
		dir := benchDir(b)
		args = append([]string{"--name=tierstore", "--directory=" + dir, "--output-format=json",
			"--ioengine=io_uring", "--direct=1", "--size=256M", "--numjobs=1"}, args...)
		var bw float64
		for b.Loop() {
			out, err := exec.Command(fio, args...).Output()
			if err != nil {
				b.Fatalf("fio %v: %v", args, err)
			}
			var res struct {
				Jobs []struct {
					Read struct {
						BwBytes float64 `json:"bw_bytes"`
					} `json:"read"`
					Write struct {
						BwBytes float64 `json:"bw_bytes"`
					} `json:"write"`
				} `json:"jobs"`
			}
			if err := json.Unmarshal(out, &res); err != nil || len(res.Jobs) == 0 {
				b.Fatalf("fio output: %v", err)
			}
			bw = res.Jobs[0].Read.BwBytes + res.Jobs[0].Write.BwBytes
		}
		// fio's own bandwidth, independent of process start-up time.
		b.ReportMetric(bw/1e6, "fio-MB/s")
	}
	b.Run("write/1MiB/qd16", func(b *testing.B) {
		run(b, "--rw=write", "--bs=1M", "--iodepth=16", "--fdatasync=64")
	})
	for _, size := range benchSizes {
		b.Run(fmt.Sprintf("randread/%dKiB/qd32", size>>10), func(b *testing.B) {
			run(b, "--rw=randread", fmt.Sprintf("--bs=%d", size), "--iodepth=32")
		})
	}
}
