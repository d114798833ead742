package pwrite_test

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/tierstore/tierstore/backend"
	"github.com/tierstore/tierstore/backend/backendtest"
	"github.com/tierstore/tierstore/backend/pwrite"
)

// Benchmarks run on a real disk: the directory named by TIERSTORE_BENCH_DIR,
// default os.TempDir(). A fresh sub-directory is created and removed.

const benchBucket = 64 << 20

func benchDir(b *testing.B) string {
	base := os.Getenv("TIERSTORE_BENCH_DIR")
	if base == "" {
		base = os.TempDir()
	}
	dir, err := os.MkdirTemp(base, "pwrite-bench-")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

func benchOpen(b *testing.B, direct bool) *pwrite.Backend {
	dir := benchDir(b)
	be, err := pwrite.Open(dir, pwrite.Options{Direct: direct, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatal(err)
	}
	if be.Direct() != direct {
		b.Skipf("O_DIRECT not supported in %s", dir)
	}
	b.Cleanup(func() { be.Close() })
	return be
}

var modes = []struct {
	name   string
	direct bool
}{{"buffered", false}, {"direct", true}}

// BenchmarkWriteBucket writes 64 MiB buckets (including fdatasync and the
// directory fsync) made of iovecs of 256 KiB or 1 MiB.
func BenchmarkWriteBucket(b *testing.B) {
	src := backendtest.Pattern(1, benchBucket)
	for _, m := range modes {
		for _, iov := range []int{256 << 10, 1 << 20} {
			b.Run(fmt.Sprintf("%s/iov=%dKiB", m.name, iov>>10), func(b *testing.B) {
				be := benchOpen(b, m.direct)
				data := backendtest.Split(src, []int{iov})
				b.SetBytes(benchBucket)
				b.ResetTimer()
				for i := range b.N {
					if err := be.WriteBucket(context.Background(), uint64(i), data); err != nil {
						b.Fatal(err)
					}
					b.StopTimer()
					if err := be.Delete(uint64(i)); err != nil {
						b.Fatal(err)
					}
					b.StartTimer()
				}
			})
		}
	}
}

// dropCache evicts the bucket file from the page cache, so that buffered
// reads measure the device rather than memory.
func dropCache(b *testing.B, path string) {
	fd, err := unix.Open(path, unix.O_RDONLY, 0)
	if err != nil {
		b.Fatal(err)
	}
	defer unix.Close(fd)
	if err := unix.Fadvise(fd, 0, 0, unix.FADV_DONTNEED); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkRead reads random aligned ranges of 64 KiB or 1 MiB from a 256 MiB
// bucket file, one range per Read (queue depth 1) or 16 ranges per Read
// ("x16", served by the backend's read workers). The file is evicted from the
// page cache whenever 32 MiB were read since the last eviction, so at most
// an eighth of the buffered reads can hit the cache.
func BenchmarkRead(b *testing.B) {
	const fileSize = 256 << 20
	for _, m := range modes {
		b.Run(m.name, func(b *testing.B) { benchRead(b, m.direct, fileSize) })
	}
}

func benchRead(b *testing.B, direct bool, fileSize int64) {
	be := benchOpen(b, direct)
	src := backendtest.Pattern(2, int(fileSize))
	if err := be.WriteBucket(context.Background(), 1, backendtest.Split(src, []int{1 << 20})); err != nil {
		b.Fatal(err)
	}
	path := filepath.Join(be.Dir(), backend.FileName(1))
	for _, c := range []struct {
		size, ops int
	}{{64 << 10, 1}, {1 << 20, 1}, {64 << 10, 16}} {
		name := fmt.Sprintf("%dKiB", c.size>>10)
		if c.ops > 1 {
			name += fmt.Sprintf("x%d", c.ops)
		}
		b.Run(name, func(b *testing.B) {
			r := rand.New(rand.NewPCG(1, 2))
			ops := make([]backend.ReadOp, c.ops)
			dropCache(b, path)
			var sinceDrop int64
			b.SetBytes(int64(c.size * c.ops))
			b.ResetTimer()
			for range b.N {
				for j := range ops {
					ops[j] = backend.ReadOp{Off: r.Int64N(fileSize/int64(c.size)) * int64(c.size), Len: c.size}
				}
				if err := backend.ReadFile(context.Background(), be, 1, ops); err != nil {
					b.Fatal(err)
				}
				for j := range ops {
					if ops[j].Err != nil {
						b.Fatal(ops[j].Err)
					}
				}
				if sinceDrop += int64(c.size * c.ops); sinceDrop >= 32<<20 && !direct {
					b.StopTimer()
					dropCache(b, path)
					sinceDrop = 0
					b.StartTimer()
				}
			}
		})
	}
}
