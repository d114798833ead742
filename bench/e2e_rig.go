package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/tierstore/tierstore/admission"
	"github.com/tierstore/tierstore/backend/uring"
	"github.com/tierstore/tierstore/client"
	"github.com/tierstore/tierstore/internal/tlsconf"
	"github.com/tierstore/tierstore/master"
	"github.com/tierstore/tierstore/node"
	"github.com/tierstore/tierstore/tier"
	"google.golang.org/grpc"
)

// ssdPrefix marks the keys the e2e master queues for offload at PutEnd;
// every other put stays in DRAM (see prefixAdmission).
const ssdPrefix = "ssd/"

// prefixAdmission queues only keys under ssdPrefix, so that the put rows'
// objects are not pinned by offload tasks the node is not asked to run.
type prefixAdmission struct{}

func (prefixAdmission) Name() string                     { return "bench-prefix" }
func (prefixAdmission) AtPutEnd(o admission.Object) bool { return strings.HasPrefix(o.Key, ssdPrefix) }
func (prefixAdmission) WantsLookups() bool               { return false }
func (prefixAdmission) OnLookup(*admission.Object) bool  { return false }
func (prefixAdmission) OnEvict(admission.Object) bool    { return false }

// e2eRig is the cluster of the e2e scenario, in this process: a master
// served over gRPC on 127.0.0.1, one store node with a real listener and
// an SSD tier (io_uring, O_DIRECT) the rig also holds (for tier.Load of
// the same objects), remote clients that reach both over loopback, and an
// embedded client that reaches both without a socket.
type e2eRig struct {
	m       *master.Service
	srv     interface{ Stop() }
	addr    string
	eng     *tier.Engine
	n       *node.Node
	remote  []*client.Client // no local node: every byte crosses loopback
	embeded *client.Client   // master and node in-process

	tlsClient *tlsconf.Source // the tls scenario's TLS cluster: a client's certificate (nil: plaintext)
}

func newE2ERig(ctx context.Context, dir string, clients int, memory int64) (_ *e2eRig, err error) {
	r := &e2eRig{}
	defer func() {
		if err != nil {
			r.close()
		}
	}()
	log := quietLogger()
	mc := master.DefaultConfig()
	mc.EnableOffload = true
	mc.Admission = prefixAdmission{}
	mc.Logger = log
	if r.m, r.srv, r.addr, err = serveMaster(mc); err != nil {
		return nil, err
	}

	be, err := uring.Open(filepath.Join(dir, "buckets"), uring.Options{Direct: true, Logger: log})
	if err != nil {
		return nil, err
	}
	if r.eng, err = tier.Open(dir, tier.Options{Backend: be, Logger: log}); err != nil {
		be.Close()
		return nil, err
	}
	nc := node.DefaultConfig()
	nc.Listen, nc.Memory, nc.Logger = "127.0.0.1:0", memory, log
	nc.HeartbeatInterval, nc.ReconcileInterval = time.Hour, time.Hour
	if r.n, err = node.Start(ctx, nc, r.m, node.WithTier(r.eng)); err != nil {
		r.eng.Close()
		r.eng = nil
		return nil, err
	}
	if r.remote, err = remoteClients(ctx, r.addr, clients); err != nil {
		return nil, err
	}
	r.embeded, err = client.New(ctx, client.Config{Master: r.m, LocalNode: r.n, Logger: log})
	return r, err
}

// serveMaster starts a master with mc and serves it over gRPC on
// 127.0.0.1; it returns the master, its server and its address.
func serveMaster(mc master.Config) (*master.Service, interface{ Stop() }, string, error) {
	return serveMasterWith(mc)
}

// serveMasterWith is serveMaster with the gRPC server's options (TLS).
func serveMasterWith(mc master.Config, opts ...grpc.ServerOption) (*master.Service, interface{ Stop() }, string, error) {
	m, err := master.New(mc)
	if err != nil {
		return nil, nil, "", err
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		m.Close()
		return nil, nil, "", err
	}
	srv := master.NewServer(m, opts...)
	go func() { _ = srv.Serve(lis) }()
	return m, srv, lis.Addr().String(), nil
}

// remoteClients connects n clients without a local node to the master at
// addr (every byte they move crosses loopback). On failure it closes the
// ones it made.
func remoteClients(ctx context.Context, addr string, n int) ([]*client.Client, error) {
	var out []*client.Client
	for range n {
		c, err := client.New(ctx, client.Config{MasterAddr: addr, Logger: quietLogger()})
		if err != nil {
			for _, c := range out {
				c.Close()
			}
			return nil, err
		}
		out = append(out, c)
	}
	return out, nil
}

func (r *e2eRig) close() {
	for _, c := range append(r.remote, r.embeded) {
		if c != nil {
			c.Close()
		}
	}
	if r.n != nil {
		r.n.Close() // closes the tier it was given
	} else if r.eng != nil {
		r.eng.Close()
	}
	if r.srv != nil {
		r.srv.Stop()
	}
	if r.m != nil {
		r.m.Close()
	}
}

// populate puts n objects of size under prefix and returns their keys and
// values; with ssd they are offloaded and their DRAM replicas dropped, so
// that reads are served by the SSD tier.
func (r *e2eRig) populate(ctx context.Context, prefix string, n int, size int64, ssd bool) ([]string, [][]byte, error) {
	src := newValueSource(int(size), uint64(n)+uint64(len(prefix)))
	keys := make([]string, n)
	vals := make([][]byte, n)
	for i := range keys {
		keys[i], vals[i] = fmt.Sprintf("%s%s/%d", prefix, sizeName(size), i), src.value(i)
		if err := r.remote[0].Put(ctx, keys[i], vals[i]); err != nil {
			return nil, nil, err
		}
	}
	if !ssd {
		return keys, vals, nil
	}
	for want := r.n.Stats().OffloadPersisted + int64(n); r.n.Stats().OffloadPersisted < want; {
		if r.n.OffloadNow() == 0 && r.n.Stats().OffloadPersisted < want {
			return nil, nil, fmt.Errorf("bench: offload stalled: %+v", r.n.Stats())
		}
	}
	if d, err := r.remote[0].EvictDRAM(ctx, keys, false); err != nil || d.Dropped != int64(n) {
		return nil, nil, fmt.Errorf("bench: dropping the DRAM copies: %d of %d: %v", d.Dropped, n, err)
	}
	return keys, vals, nil
}

// figure is one measured row: throughput over the whole run, the median
// latency of one operation, and the CPU time the whole process (client,
// node, master) spent per MiB moved.
type figure struct {
	mbps      float64
	p50       time.Duration
	ops       int
	cpuPerMiB time.Duration
}

// processCPU is the user+system CPU time this process has used.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// perMiB is the CPU time cpu spread over bytes.
func perMiB(cpu time.Duration, bytes int64) time.Duration {
	if bytes <= 0 {
		return 0
	}
	return time.Duration(float64(cpu) / (float64(bytes) / (1 << 20)))
}

// measure runs op on k goroutines (w is the goroutine, i its operation
// count) until d has passed, and returns the bytes moved per second over
// the wall time of the whole run and the median operation latency.
func measure(ctx context.Context, k int, d time.Duration, bytesPerOp int64, op func(w, i int) error) (figure, error) {
	var mu sync.Mutex
	var lat latencies
	var firstErr error
	cpu0 := processCPU()
	start := time.Now()
	deadline := start.Add(d)
	var wg sync.WaitGroup
	for w := range k {
		wg.Go(func() {
			var mine latencies
			for i := 0; time.Now().Before(deadline) && ctx.Err() == nil; i++ {
				t0 := time.Now()
				if err := op(w, i); err != nil {
					mu.Lock()
					firstErr = cmpOr(firstErr, err)
					mu.Unlock()
					return
				}
				mine = append(mine, time.Since(t0))
			}
			mu.Lock()
			lat = append(lat, mine...)
			mu.Unlock()
		})
	}
	wg.Wait()
	el, cpu := time.Since(start), processCPU()-cpu0
	if firstErr == nil {
		firstErr = ctx.Err()
	}
	moved := int64(len(lat)) * bytesPerOp
	return figure{mbps: mbps(moved, el), p50: lat.pct(50), ops: len(lat), cpuPerMiB: perMiB(cpu, moved)}, firstErr
}

func cmpOr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

// measureRounds is measure for operations that fill memory: rounds of
// perRound operations on each of k goroutines, timed from a common start
// to the last one's end, with cleanup (untimed) after each round, until d
// of timed work has passed.
func measureRounds(ctx context.Context, k, perRound int, d time.Duration, bytesPerOp int64, op func(w, i int) error, cleanup func() error) (figure, error) {
	var total, cpu time.Duration
	var all latencies
	for total < d && ctx.Err() == nil {
		lats := make([]latencies, k)
		errs := make([]error, k)
		cpu0 := processCPU()
		start := time.Now()
		var wg sync.WaitGroup
		for w := range k {
			wg.Go(func() {
				for i := range perRound {
					t0 := time.Now()
					if errs[w] = op(w, i); errs[w] != nil {
						return
					}
					lats[w] = append(lats[w], time.Since(t0))
				}
			})
		}
		wg.Wait()
		total += time.Since(start)
		cpu += processCPU() - cpu0
		if err := errors.Join(errs...); err != nil {
			return figure{}, err
		}
		for _, l := range lats {
			all = append(all, l...)
		}
		if err := cleanup(); err != nil {
			return figure{}, err
		}
	}
	moved := int64(len(all)) * bytesPerOp
	return figure{mbps: mbps(moved, total), p50: all.pct(50), ops: len(all), cpuPerMiB: perMiB(cpu, moved)}, ctx.Err()
}

// rawTCP is the baseline: k plain TCP connections over loopback, each with
// a Go sender writing size-byte messages back to back and a Go receiver
// reading each into a buffer, for d. The sender cycles through src and
// receiver w through dst[w] (one buffer each: all in cache; 64 of each:
// the working set of the rows it is compared with). It returns the
// received bytes per second over the wall time until every receiver saw
// its stream end.
func rawTCP(ctx context.Context, src [][]byte, dst [][][]byte, d time.Duration) (figure, error) {
	k, size := len(dst), len(src[0])
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return figure{}, err
	}
	defer lis.Close()
	msgs := make([]int, k)
	errc := make(chan error, 2*k)
	var wg sync.WaitGroup
	cpu0 := processCPU()
	start := time.Now()
	deadline := start.Add(d)
	for w := range k {
		send, err := net.Dial("tcp", lis.Addr().String())
		if err != nil {
			return figure{}, err
		}
		recv, err := lis.Accept()
		if err != nil {
			send.Close()
			return figure{}, err
		}
		wg.Go(func() {
			defer send.Close()
			for i := 0; time.Now().Before(deadline) && ctx.Err() == nil; i++ {
				if _, err := send.Write(src[(i+w)%len(src)]); err != nil {
					errc <- err
					return
				}
			}
		})
		wg.Go(func() {
			defer recv.Close()
			for i := 0; ; i++ {
				if _, err := io.ReadFull(recv, dst[w][i%len(dst[w])][:size]); err != nil {
					if err != io.EOF {
						errc <- err
					}
					return
				}
				msgs[w]++
			}
		})
	}
	wg.Wait()
	el, cpu := time.Since(start), processCPU()-cpu0
	close(errc)
	if err := <-errc; err != nil {
		return figure{}, fmt.Errorf("bench: raw tcp: %w", err)
	}
	n := 0
	for _, m := range msgs {
		n += m
	}
	moved := int64(n) * int64(size)
	return figure{mbps: mbps(moved, el), p50: el / time.Duration(max(1, n/k)), ops: n, cpuPerMiB: perMiB(cpu, moved)}, nil
}

// verifyEach checks that got equals want for a sample of reads.
func verifyEach(got, want []byte, key string) error {
	if !slices.Equal(got, want) {
		return fmt.Errorf("%w: %s", errVerify, key)
	}
	return nil
}
