package master

import (
	"fmt"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tierstore/tierstore/masterapi"
)

// BenchmarkReRegister1M re-registers 1M SSD objects of one node into a
// new Service (the default shards), in process: chunks of 4096 (as a
// node sends them, node/reconcile.go) or 16384 in columns, 3 in flight, the
// first with the Expected hint. It reports the process's CPU time per key
// beside the wall time (docs/benchmarks.md, re-registration in columns).
func BenchmarkReRegister1M(b *testing.B) {
	for _, chunk := range []int{4096, 16384} {
		b.Run(fmt.Sprint("chunk=", chunk), func(b *testing.B) { benchReRegister(b, chunk) })
	}
}

func benchReRegister(b *testing.B, chunk int) {
	const keys, inFlight = 1_000_000, 3
	var chunks []masterapi.SSDColumns
	for lo := 0; lo < keys; lo += chunk {
		var c masterapi.SSDColumns
		for i := lo; i < min(lo+chunk, keys); i++ {
			k := benchKey(i) + "/b" + strconv.Itoa(i%1000)
			c.Keys = append(c.Keys, k...)
			c.Lens = append(c.Lens, uint32(len(k)))
			c.Sizes = append(c.Sizes, 64<<10)
			c.CRCs = append(c.CRCs, uint32(i))
		}
		chunks = append(chunks, c)
	}
	chunks[0].Expected = keys
	var cpu time.Duration
	for b.Loop() {
		b.StopTimer()
		s := quietService(b)
		if err := s.MountSegment(bg, masterapi.MountRequest{Node: "n", Endpoint: "e", Segment: "s", Size: 1 << 20}); err != nil {
			b.Fatal(err)
		}
		c0 := procCPU()
		b.StartTimer()
		var wg sync.WaitGroup
		next := make(chan int)
		for range inFlight {
			wg.Go(func() {
				for i := range next {
					if _, err := s.ReRegisterSSDColumns(bg, "n", chunks[i]); err != nil {
						b.Error(err)
					}
				}
			})
		}
		for i := range chunks {
			next <- i
		}
		close(next)
		wg.Wait()
		b.StopTimer()
		cpu += procCPU() - c0
		if got := s.cnt.ssdReplicas.Load(); got != keys {
			b.Fatalf("%d SSD replicas, want %d", got, keys)
		}
		s.Close()
		b.StartTimer()
	}
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N)/keys, "cpu-ns/key")
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/keys, "ns/key")
}

// procCPU is this process's user and system CPU time.
func procCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
