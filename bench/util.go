package main

import (
	"context"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// latencies collects durations and reports percentiles.
type latencies []time.Duration

func (l latencies) pct(p float64) time.Duration {
	if len(l) == 0 {
		return 0
	}
	s := slices.Clone(l)
	slices.Sort(s)
	i := int(p / 100 * float64(len(s)-1))
	return s[i]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// diskUsage sums the allocated bytes (st_blocks*512) of every file under dir.
func diskUsage(dir string) int64 {
	var n int64
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return nil
		}
		if info, err := d.Info(); err == nil {
			if st, ok := info.Sys().(*syscall.Stat_t); ok {
				n += st.Blocks * 512
			}
		}
		return nil
	})
	return n
}

// dropCache asks the kernel to drop the page cache of every file under dir
// (posix_fadvise DONTNEED), so reads that follow come from the disk, not
// from memory, for buffered and direct I/O alike. Dirty pages are written
// first (fdatasync) since DONTNEED skips them.
func dropCache(dir string) {
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return nil
		}
		f, err := os.Open(p)
		if err != nil {
			return nil
		}
		_ = unix.Fdatasync(int(f.Fd()))
		_ = unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED)
		f.Close()
		return nil
	})
}

// valueSource hands out incompressible values without allocating one per
// object: value i is a window of a random buffer, so every object is
// distinct and checkable.
type valueSource struct {
	buf  []byte
	size int
}

func newValueSource(size int, seed uint64) *valueSource {
	buf := make([]byte, 2*size+64<<10)
	r := rand.New(rand.NewPCG(seed, 1))
	for i := 0; i+8 <= len(buf); i += 8 {
		v := r.Uint64()
		for j := 0; j < 8; j++ {
			buf[i+j] = byte(v >> (8 * j))
		}
	}
	return &valueSource{buf: buf, size: size}
}

// value returns object i's bytes (shared; do not modify).
func (v *valueSource) value(i int) []byte {
	off := (i * 4093) % (len(v.buf) - v.size)
	return v.buf[off : off+v.size]
}

func runtimeProcs() int { return runtime.GOMAXPROCS(0) }

func mkdir(dir string) error { return os.MkdirAll(dir, 0o755) }

// residentBytes is how many bytes of the files under dir are in the page
// cache (mincore over a read-only mapping of each file). It tells whether a
// read phase will come from memory rather than the disk.
func residentBytes(dir string) int64 {
	var total, resident int64
	page := int64(os.Getpagesize())
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return nil
		}
		f, err := os.Open(p)
		if err != nil {
			return nil
		}
		defer f.Close()
		st, err := f.Stat()
		if err != nil || st.Size() == 0 {
			return nil
		}
		m, err := unix.Mmap(int(f.Fd()), 0, int(st.Size()), unix.PROT_READ, unix.MAP_SHARED)
		if err != nil {
			return nil
		}
		defer unix.Munmap(m)
		vec := make([]byte, (st.Size()+page-1)/page)
		if _, _, e := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(&m[0])), uintptr(len(m)),
			uintptr(unsafe.Pointer(&vec[0]))); e != 0 {
			return nil
		}
		for i, v := range vec {
			n := page
			if i == len(vec)-1 {
				n = st.Size() - int64(i)*page
			}
			total += n
			if v&1 != 0 {
				resident += n
			}
		}
		return nil
	})
	return resident
}

// parseSize reads a byte count: plain digits or a K/M/G suffix (binary).
func parseSize(s string) (int64, error) {
	s = strings.TrimSpace(strings.ToUpper(s))
	mult := int64(1)
	switch {
	case strings.HasSuffix(s, "K"):
		mult, s = 1<<10, strings.TrimSuffix(s, "K")
	case strings.HasSuffix(s, "M"):
		mult, s = 1<<20, strings.TrimSuffix(s, "M")
	case strings.HasSuffix(s, "G"):
		mult, s = 1<<30, strings.TrimSuffix(s, "G")
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, err
	}
	return n * mult, nil
}

// readPhase has readers goroutines read objects 0..n-1 in a random order
// (seeded), perCall objects per call of read, until every object is read,
// the deadline passes (zero: none), ctx ends or a call fails. It returns how
// many objects were read, the latency of every call, the elapsed time, and
// the first error (ctx's error if ctx ended first).
func readPhase(ctx context.Context, n, readers, perCall int, seed uint64, deadline time.Time, b bar,
	read func(ctx context.Context, objs []int) error) (done int64, lat latencies, elapsed time.Duration, err error) {
	order := rand.New(rand.NewPCG(uint64(n), seed)).Perm(n)
	var next, count atomic.Int64
	var mu sync.Mutex // protects lat and err
	var wg sync.WaitGroup
	t0 := time.Now()
	for range readers {
		wg.Go(func() {
			var mine latencies
			for ctx.Err() == nil && (deadline.IsZero() || time.Now().Before(deadline)) {
				i := int(next.Add(int64(perCall)) - int64(perCall))
				if i >= n {
					break
				}
				objs := order[i:min(i+perCall, n)]
				c0 := time.Now()
				rerr := read(ctx, objs)
				mine = append(mine, time.Since(c0))
				if rerr != nil {
					mu.Lock()
					if err == nil {
						err = rerr
					}
					mu.Unlock()
					break
				}
				count.Add(int64(len(objs)))
				b.Add(len(objs))
			}
			mu.Lock()
			lat = append(lat, mine...)
			mu.Unlock()
		})
	}
	wg.Wait()
	elapsed = time.Since(t0)
	b.Finish()
	if err == nil {
		err = ctx.Err()
	}
	return count.Load(), lat, elapsed, err
}
