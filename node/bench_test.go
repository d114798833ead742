package node

import (
	"context"
	"fmt"
	"net"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tierstore/tierstore/client"
	"github.com/tierstore/tierstore/internal/grant"
	"github.com/tierstore/tierstore/internal/units"
	"github.com/tierstore/tierstore/internal/wire"
	"github.com/tierstore/tierstore/master"
	"github.com/tierstore/tierstore/masterapi"
)

// benchCluster: a master over gRPC on 127.0.0.1, one node with a real peer
// socket (and an SSD tier in a temp dir when ssd), and a client that has no
// local node, so every byte crosses loopback gRPC.
func benchCluster(b *testing.B, ssd bool) (*client.Client, *Node, *master.Service) {
	return benchClusterWith(b, ssd, true, "uring")
}

// benchClusterWith: remote=false is embedded mode (no sockets at all: the
// client reaches master and node in-process), which isolates the cost of
// the RPC layer.
func benchClusterWith(b *testing.B, ssd, remote bool, backendName string) (*client.Client, *Node, *master.Service) {
	return benchClusterGrants(b, ssd, remote, backendName, nil, nil)
}

// benchClusterGrants is benchClusterWith with read grant keys for the
// master and the node (nil: none).
func benchClusterGrants(b *testing.B, ssd, remote bool, backendName string, mk, nk *grant.Keys) (*client.Client, *Node, *master.Service) {
	b.Helper()
	mc := master.DefaultConfig()
	mc.Grants = mk
	mc.EnableOffload = ssd
	mc.Logger = quiet
	m, err := master.New(mc)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { m.Close() })
	nc := DefaultConfig()
	nc.Listen = "127.0.0.1:0"
	if !remote {
		nc.Listen = ""
	}
	nc.Memory = 512 << 20
	nc.Grants = nk
	nc.Logger = quiet
	nc.HeartbeatInterval = time.Hour
	nc.OffloadWake = false
	if ssd {
		nc.EnableOffload = true
		nc.SSDDir = b.TempDir()
		nc.Backend = backendName
		nc.DirectIO = true
	}
	n, err := Start(context.Background(), nc, m)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { n.Close() })
	cfg := client.Config{Master: m, LocalNode: n, Logger: quiet}
	if remote {
		cfg = client.Config{MasterAddr: serveMasterB(b, m), Logger: quiet}
	}
	c, err := client.New(context.Background(), cfg)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { c.Close() })
	return c, n, m
}

func serveMasterB(b *testing.B, m masterapi.API) string {
	b.Helper()
	lis, err := listenLoopback()
	if err != nil {
		b.Fatal(err)
	}
	srv := master.NewServer(m)
	go func() { _ = srv.Serve(lis) }()
	b.Cleanup(srv.Stop)
	return lis.Addr().String()
}

var benchSizes = []int{256 << 10, 1 << 20}

// cpuMeter sums this process's user+system CPU over a benchmark's timed
// sections (client, master and node all run in the process) and reports
// it per MiB moved, "cpu-us/MiB" (docs/benchmarks.md, "The put's CRC32C at
// PutEnd: tried and not merged").
type cpuMeter struct{ sum, at time.Duration }

func procCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func (m *cpuMeter) start() { m.at = procCPU() }
func (m *cpuMeter) stop()  { m.sum += procCPU() - m.at }

func (m *cpuMeter) report(b *testing.B, bytes int64) {
	b.ReportMetric(float64(m.sum.Microseconds())/(float64(bytes)/(1<<20)), "cpu-us/MiB")
}

// BenchmarkE2EPut: Put over loopback (PutStart, WriteRange stream, PutEnd).
// Each object is removed again so the segment never fills.
func BenchmarkE2EPut(b *testing.B) {
	for _, size := range benchSizes {
		b.Run(units.Format(int64(size)), func(b *testing.B) {
			c, _, _ := benchCluster(b, false)
			ctx := context.Background()
			val := rnd(size)
			b.SetBytes(int64(size))
			var cpu cpuMeter
			b.ResetTimer()
			cpu.start()
			for i := 0; i < b.N; i++ {
				k := fmt.Sprintf("put-%d", i)
				if err := c.Put(ctx, k, val); err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				cpu.stop()
				if err := c.Remove(ctx, k, true); err != nil {
					b.Fatal(err)
				}
				cpu.start()
				b.StartTimer()
			}
			cpu.stop()
			cpu.report(b, int64(b.N)*int64(size))
		})
	}
}

// BenchmarkE2EPutConcurrent: 8 goroutines putting 256 KiB objects through
// one client over loopback (an inference engine storing a prefix's blocks
// from several threads). The objects are removed every 256 puts (untimed)
// so the 512 MiB segment never fills.
func BenchmarkE2EPutConcurrent(b *testing.B) {
	c, _, _ := benchCluster(b, false)
	ctx := context.Background()
	val := rnd(256 << 10)
	b.SetBytes(int64(len(val)))
	b.ResetTimer()
	for done := 0; done < b.N; {
		round := min(256, b.N-done)
		var wg sync.WaitGroup
		for w := range 8 {
			wg.Go(func() {
				for i := w; i < round; i += 8 {
					if err := c.Put(ctx, fmt.Sprintf("put-%d", i), val); err != nil {
						b.Error(err)
						return
					}
				}
			})
		}
		wg.Wait()
		b.StopTimer()
		for i := range round {
			if err := c.Remove(ctx, fmt.Sprintf("put-%d", i), true); err != nil {
				b.Fatal(err)
			}
		}
		b.StartTimer()
		done += round
	}
}

// BenchmarkE2EGetDRAM: Get over loopback of objects in the node's DRAM.
func BenchmarkE2EGetDRAM(b *testing.B) {
	for _, size := range benchSizes {
		b.Run(units.Format(int64(size)), func(b *testing.B) {
			c, _, _ := benchCluster(b, false)
			keys := benchPut(b, c, size, 64)
			benchGet(b, c, keys, size)
			if rs := c.ReadStats(); rs.RemoteDRAM == 0 || rs.RemoteSSD != 0 {
				b.Fatalf("not served from DRAM: %+v", rs)
			}
		})
	}
}

// BenchmarkE2EGetSSD: Get over loopback of objects on the node's SSD (the
// DRAM replicas were dropped): ReadSSD stream -> tier.Load -> bucket read,
// O_DIRECT, per backend.
func BenchmarkE2EGetSSD(b *testing.B) {
	for _, be := range []string{"uring", "pwrite"} {
		for _, size := range benchSizes {
			b.Run(be+"/"+units.Format(int64(size)), func(b *testing.B) {
				benchGetSSD(b, true, be, size)
			})
		}
	}
}

// BenchmarkEmbeddedGetSSD: the same reads in embedded mode (no sockets):
// the difference to BenchmarkE2EGetSSD is the RPC layer.
func BenchmarkEmbeddedGetSSD(b *testing.B) {
	for _, size := range benchSizes {
		b.Run("uring/"+units.Format(int64(size)), func(b *testing.B) {
			benchGetSSD(b, false, "uring", size)
		})
	}
}

// BenchmarkEmbeddedGetDRAM: Get of DRAM objects in embedded mode.
func BenchmarkEmbeddedGetDRAM(b *testing.B) {
	for _, size := range benchSizes {
		b.Run(units.Format(int64(size)), func(b *testing.B) {
			c, _, _ := benchClusterWith(b, false, false, "")
			keys := benchPut(b, c, size, 64)
			benchGet(b, c, keys, size)
		})
	}
}

func benchGetSSD(b *testing.B, remote bool, be string, size int) {
	c, n, _ := benchClusterWith(b, true, remote, be)
	keys := benchPut(b, c, size, 64)
	ctx := context.Background()
	for n.Stats().OffloadPersisted < int64(len(keys)) {
		if n.OffloadNow() == 0 && n.Stats().OffloadPersisted < int64(len(keys)) {
			b.Fatalf("offload stalled: %+v", n.Stats())
		}
	}
	if d, err := c.EvictDRAM(ctx, keys, false); err != nil || d.Dropped != int64(len(keys)) {
		b.Fatalf("evict: %d %v", d, err)
	}
	benchGet(b, c, keys, size)
	rs := c.ReadStats()
	if rs.RemoteSSD+rs.LocalSSD == 0 || rs.RemoteDRAM+rs.LocalDRAM != 0 {
		b.Fatalf("not served from SSD: %+v", rs)
	}
}

func benchPut(b *testing.B, c *client.Client, size, n int) []string {
	b.Helper()
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("obj-%d", i)
		if err := c.Put(context.Background(), keys[i], rnd(size)); err != nil {
			b.Fatal(err)
		}
	}
	return keys
}

func benchGet(b *testing.B, c *client.Client, keys []string, size int) {
	b.Helper()
	ctx := context.Background()
	b.SetBytes(int64(size))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := c.Get(ctx, keys[i%len(keys)]); err != nil {
			b.Fatal(err)
		}
	}
}

func listenLoopback() (net.Listener, error) { return net.Listen("tcp", "127.0.0.1:0") }

// BenchmarkE2EPutToSSD: Put over loopback followed by the node's offload
// round that makes the objects durable on SSD (bucket write + fdatasync +
// index commit + notify), 16 objects per iteration: the throughput of
// getting bytes from a remote client onto the SSD tier.
func BenchmarkE2EPutToSSD(b *testing.B) {
	for _, size := range benchSizes {
		b.Run("uring/"+units.Format(int64(size)), func(b *testing.B) {
			c, n, _ := benchCluster(b, true)
			ctx := context.Background()
			const batch = 16
			val := rnd(size)
			b.SetBytes(int64(batch * size))
			want := int64(0)
			i := 0
			for b.Loop() {
				keys := make([]string, batch)
				for j := range keys {
					keys[j] = fmt.Sprintf("p-%d-%d", i, j)
					if err := c.Put(ctx, keys[j], val); err != nil {
						b.Fatal(err)
					}
				}
				i++
				want += batch
				for n.Stats().OffloadPersisted < want {
					if n.OffloadNow() == 0 && n.Stats().OffloadPersisted < want {
						b.Fatalf("offload stalled: %+v", n.Stats())
					}
				}
				// Free the DRAM for the next batch (the SSD copies stay).
				if _, err := c.EvictDRAM(ctx, keys, false); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkTierLoadOne: the tier engine alone, one key per Load, on the
// same objects and backend as BenchmarkE2EGetSSD/uring and
// BenchmarkEmbeddedGetSSD: the baseline the RPC and client layers add to.
func BenchmarkTierLoadOne(b *testing.B) {
	for _, size := range benchSizes {
		b.Run("uring/"+units.Format(int64(size)), func(b *testing.B) {
			c, n, _ := benchClusterWith(b, true, false, "uring")
			keys := benchPut(b, c, size, 64)
			for n.Stats().OffloadPersisted < int64(len(keys)) {
				if n.OffloadNow() == 0 && n.Stats().OffloadPersisted < int64(len(keys)) {
					b.Fatalf("offload stalled: %+v", n.Stats())
				}
			}
			ctx := context.Background()
			b.SetBytes(int64(size))
			i := 0
			for b.Loop() {
				r := n.tier.Load(ctx, [][]byte{[]byte(keys[i%len(keys)])})
				if r[0].Err != nil {
					b.Fatal(r[0].Err)
				}
				i++
			}
		})
	}
}

// BenchmarkE2EBatchPut: BatchPut of 64 objects of 1 MiB over loopback
// (one BatchPutStart, the writes, one BatchPutEnd); removed between
// batches, untimed.
func BenchmarkE2EBatchPut(b *testing.B) {
	c, _, _ := benchCluster(b, false)
	ctx := context.Background()
	const n, size = 64, 1 << 20
	keys := make([]string, n)
	vals := make([][]byte, n)
	for i := range keys {
		keys[i], vals[i] = fmt.Sprintf("bput-%d", i), rnd(size)
	}
	b.SetBytes(n * size)
	var cpu cpuMeter
	b.ResetTimer()
	cpu.start()
	for i := 0; i < b.N; i++ {
		for j, err := range c.BatchPut(ctx, keys, vals) {
			if err != nil {
				b.Fatal(j, err)
			}
		}
		b.StopTimer()
		cpu.stop()
		for _, err := range c.BatchRemove(ctx, keys, true) {
			if err != nil {
				b.Fatal(err)
			}
		}
		cpu.start()
		b.StartTimer()
	}
	cpu.stop()
	cpu.report(b, int64(b.N)*n*size)
}

// BenchmarkReadCheck: BenchmarkE2EGetDRAM with the node's check that a
// read is exactly a complete object's range (readcheck.go) on and off,
// side by side on one cluster (docs/benchmarks.md, Reads bound to
// objects).
func BenchmarkReadCheck(b *testing.B) {
	for _, size := range []int{4 << 10, 1 << 20} {
		c, _, _ := benchCluster(b, false)
		keys := benchPut(b, c, size, 64)
		for _, mode := range []string{"checked", "unchecked", "checked-again"} {
			b.Run(mode+"/"+units.Format(int64(size)), func(b *testing.B) {
				readCheck.Store(mode != "unchecked")
				defer readCheck.Store(true)
				benchGet(b, c, keys, size)
			})
		}
	}
}

// BenchmarkCheckReadRange: the read check alone (readcheck.go) on a node
// holding 4096 objects of 4 KiB, checked in turn.
func BenchmarkCheckReadRange(b *testing.B) {
	m, err := master.New(testMasterConfig())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { m.Close() })
	cfg := testNodeConfig("")
	cfg.Memory = 32 << 20
	n, err := Start(context.Background(), cfg, m)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { n.Close() })
	const objects, size = 4096, 4 << 10
	for i := range objects {
		off := int64(i * size)
		if err := n.claimRange(off, size, uint64(i+1)); err != nil {
			b.Fatal(err)
		}
		n.recordWrite(wire.Object{Key: fmt.Sprint(i)}, off, size, 0, uint64(i+1))
	}
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		if _, err := n.checkReadRange(int64(i%objects*size), size, 0); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkGrants: the cost of read and write grants (the master signs
// one per replica of a lookup and per range of a PutStart, the node checks
// it on every read and write; grants.go), grants off and on side by side
// in one run, on two clusters of one remote node each: a Get of 1 MiB, a
// BatchGetInto of 64 objects of 16 KiB, a Put of 1 MiB and a BatchPut of
// 64 objects of 16 KiB (each put removed untimed, as BenchmarkE2EPut;
// docs/benchmarks.md, Read grants, Write grants).
func BenchmarkGrants(b *testing.B) {
	path := filepath.Join(b.TempDir(), "grant.secret")
	writeGrantSecret(b, path)
	type cluster struct {
		name string
		c    *client.Client
	}
	var clusters []cluster
	for _, on := range []bool{false, true} {
		var mk, nk *grant.Keys
		name := "off"
		if on {
			mk, nk, name = loadKeys(b, path), loadKeys(b, path), "on"
		}
		c, _, _ := benchClusterGrants(b, false, true, "", mk, nk)
		clusters = append(clusters, cluster{name, c})
	}
	const batch, small = 64, 16 << 10
	keys := map[string][]string{}
	for _, cl := range clusters {
		keys[cl.name+"/big"] = benchPut(b, cl.c, 1<<20, 16)
		var ks []string
		for i := range batch {
			k := fmt.Sprintf("small-%d", i)
			if err := cl.c.Put(context.Background(), k, rnd(small)); err != nil {
				b.Fatal(err)
			}
			ks = append(ks, k)
		}
		keys[cl.name+"/small"] = ks
	}
	for _, cl := range clusters {
		b.Run("get-1MiB/grants-"+cl.name, func(b *testing.B) {
			benchGet(b, cl.c, keys[cl.name+"/big"], 1<<20)
		})
	}
	for _, cl := range clusters {
		b.Run(fmt.Sprintf("batchget-%dx16KiB/grants-%s", batch, cl.name), func(b *testing.B) {
			bufs := make([][]byte, batch)
			for i := range bufs {
				bufs[i] = make([]byte, small)
			}
			ctx := context.Background()
			b.SetBytes(batch * small)
			b.ResetTimer()
			for range b.N {
				_, errs := cl.c.BatchGetInto(ctx, keys[cl.name+"/small"], bufs)
				for _, err := range errs {
					if err != nil {
						b.Fatal(err)
					}
				}
			}
		})
	}
	ctx := context.Background()
	big := rnd(1 << 20)
	for _, cl := range clusters {
		b.Run("put-1MiB/grants-"+cl.name, func(b *testing.B) {
			b.SetBytes(int64(len(big)))
			for i := 0; b.Loop(); i++ {
				k := fmt.Sprintf("wput-%d", i)
				if err := cl.c.Put(ctx, k, big); err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				if err := cl.c.Remove(ctx, k, true); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
		})
	}
	bkeys := make([]string, batch)
	bvals := make([][]byte, batch)
	for i := range bkeys {
		bkeys[i], bvals[i] = fmt.Sprintf("wbput-%d", i), rnd(small)
	}
	for _, cl := range clusters {
		b.Run(fmt.Sprintf("batchput-%dx16KiB/grants-%s", batch, cl.name), func(b *testing.B) {
			b.SetBytes(batch * small)
			for b.Loop() {
				for _, err := range cl.c.BatchPut(ctx, bkeys, bvals) {
					if err != nil {
						b.Fatal(err)
					}
				}
				b.StopTimer()
				for _, err := range cl.c.BatchRemove(ctx, bkeys, true) {
					if err != nil {
						b.Fatal(err)
					}
				}
				b.StartTimer()
			}
		})
	}
}
