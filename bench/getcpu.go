package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tierstore/tierstore/client"
)

// The getcpu scenario (issue 24, stop 46): the CPU each process spends on
// one single get of a 2 MiB object in a remote node's DRAM, scattered into
// 64 buffers of 32 KiB (GetIntoParts, a vLLM block), as bench serve's vllm
// single gets make it. One master and one node process (built from cmd/,
// or --bin), one client in this process (the location cache on: every
// counted get of a key read before is a cache hit; and off: every get
// looks its key up), 1 and 4 readers, the 4 on one client or each on its
// own (bench serve's workers); CPU from getrusage (this process:
// the client) and the master's and node's threads' schedstat (fullPutCPU).
// TIERSTORE_GETCPU_ROWS=0,2 runs only those rows (for perf or pprof of
// one shape).
func init() {
	register(scenario{
		name: "getcpu",
		help: "CPU per single get of 2 MiB into 64 parts in the client, master and node processes (location cache on and off, 1 and 4 readers)",
		run:  runGetCPU,
	})
}

// getCPU's shape: objects of getCPUSize, each read into getCPULayers
// buffers; getCPUKeys of them (a DRAM that does not fill).
const (
	getCPUSize   = 2 << 20
	getCPULayers = 64
	getCPUKeys   = 64
	getCPUMemory = 640 << 20
)

type getCPURow struct {
	readers int
	noCache bool
	gets    int
	clients bool // a client per reader (bench serve's shape), not one for all
}

func runGetCPU(ctx context.Context, e *env) (*result, error) {
	started := time.Now()
	bin := e.bin
	if bin == "" {
		bin = filepath.Join(e.dir, "bin")
		if err := buildBinaries(ctx, bin); err != nil {
			return nil, err
		}
	}
	rows := []getCPURow{{1, false, 600, false}, {4, false, 600, false}, {1, true, 600, false}, {4, true, 600, false},
		{4, false, 600, true}, {4, true, 600, true}}
	if e.quick {
		for i := range rows {
			rows[i].gets /= 3
		}
	}
	res := &result{Options: map[string]string{
		"binaries": bin,
		"master":   "--metrics_port=0 (no offload)",
		"node":     "--memory=640MiB (never fills)",
		"load": fmt.Sprintf("one client in this process, %d objects of %s put from %d parts, read at random with GetIntoParts into %d buffers; the first %d gets of a row not counted",
			getCPUKeys, fmtBytes(getCPUSize), getCPULayers, getCPULayers, getCPUKeys),
	}}
	t := &table{Title: "CPU per single get (us), 2 MiB into 64 parts, remote DRAM",
		Columns: []string{"location cache", "readers", "clients", "gets", "us/get client", "master", "node", "switches/get client", "master", "node", "MB/s", "p50 ms", "load avg"}}
	for i, r := range rows {
		if only := os.Getenv("TIERSTORE_GETCPU_ROWS"); only != "" && !slices.Contains(strings.Split(only, ","), fmt.Sprint(i)) {
			continue
		}
		cache := "on"
		if r.noCache {
			cache = "off"
		}
		fmt.Fprintf(e.stderr, "getcpu: cache %s x %d readers\n", cache, r.readers)
		prof := ""
		if e.procProf != "" {
			prof = filepath.Join(e.procProf, fmt.Sprintf("getcpu%d", i))
		}
		st, err := getCPUOne(ctx, filepath.Join(e.dir, fmt.Sprintf("row%d", i)), bin, r, prof)
		if err != nil {
			return nil, fmt.Errorf("bench: getcpu cache %s x %d: %w", cache, r.readers, err)
		}
		clients := 1
		if r.clients {
			clients = r.readers
		}
		t.add(cache, r.readers, clients, r.gets, st.cpu[0], st.cpu[1], st.cpu[2],
			st.switches[0], st.switches[1], st.switches[2], st.mbps, st.p50, loadAvg())
	}
	res.Tables = []*table{t}
	res.Elapsed = time.Since(started).Seconds()
	return res, nil
}

type getCPUStats struct {
	cpu, switches [3]float64 // per get: us of CPU, context switches (client, master, node)
	mbps, p50     float64
}

func getCPUOne(ctx context.Context, dir, bin string, r getCPURow, prof string) (st getCPUStats, err error) {
	cl := &cluster{}
	defer func() {
		if err != nil {
			err = fmt.Errorf("%w\n%s", err, cl.logTail())
		}
		cl.stop()
	}()
	addr, err := cpuCluster(ctx, cl, dir, bin, getCPUMemory, prof)
	if err != nil {
		return st, err
	}
	cfg := client.Config{MasterAddr: addr, Logger: slog.New(slog.DiscardHandler)}
	if r.noCache {
		cfg.LocationCacheEntries = -1
	}
	c, err := client.New(ctx, cfg)
	if err != nil {
		return st, err
	}
	defer c.Close()
	readerClient := func(int) *client.Client { return c }
	if r.clients {
		cs := make([]*client.Client, r.readers)
		for i := range cs {
			if cs[i], err = client.New(ctx, cfg); err != nil {
				return st, err
			}
			defer cs[i].Close()
		}
		readerClient = func(w int) *client.Client { return cs[w] }
	}
	val := make([]byte, getCPUSize)
	for i := range val {
		val[i] = byte(i * 7)
	}
	for i := range getCPUKeys {
		if err := c.PutParts(ctx, fmt.Sprintf("gc-%d", i), splitParts(val, getCPULayers), client.PutOptions{}); err != nil {
			return st, fmt.Errorf("putting: %w", err)
		}
	}
	g := &getCPUReads{r: r, client: readerClient}
	if err := g.run(ctx, getCPUKeys*int64(max(1, r.readers/2)), false); err != nil { // the caches hold every key (most of them)
		return st, err
	}
	cpu0, sw0, err := fullPutCPU(cl)
	if err != nil {
		return st, err
	}
	t0 := time.Now()
	if err := g.run(ctx, int64(r.gets), true); err != nil {
		return st, err
	}
	secs := time.Since(t0).Seconds()
	cpu1, sw1, err := fullPutCPU(cl)
	if err != nil {
		return st, err
	}
	for i := range st.cpu {
		st.cpu[i] = float64((cpu1[i] - cpu0[i]).Microseconds()) / float64(r.gets)
		st.switches[i] = float64(sw1[i]-sw0[i]) / float64(r.gets)
	}
	st.mbps = float64(r.gets) * getCPUSize / mb / secs
	slices.Sort(g.lats)
	if len(g.lats) > 0 {
		st.p50 = float64(g.lats[len(g.lats)/2].Microseconds()) / 1000
	}
	return st, nil
}

// getCPUReads is a row's readers: each reads random keys of the row's
// objects into its own parts through its client until n gets in all were
// made (next counts them), keeping the latencies when asked.
type getCPUReads struct {
	r      getCPURow
	client func(reader int) *client.Client
	next   atomic.Int64
	mu     sync.Mutex      // protects lats
	lats   []time.Duration // the kept gets' latencies
}

// run makes n more gets over the row's readers; keep keeps their latencies.
func (g *getCPUReads) run(ctx context.Context, n int64, keep bool) error {
	r := g.r
	end := g.next.Load() + n
	var wg sync.WaitGroup
	errs := make([]error, r.readers)
	for w := range r.readers {
		wg.Go(func() {
			buf := make([]byte, getCPUSize)
			parts := splitParts(buf, getCPULayers)
			var mine []time.Duration
			for {
				i := g.next.Add(1)
				if i > end {
					break
				}
				key := fmt.Sprintf("gc-%d", (i*37+int64(w))%getCPUKeys)
				t0 := time.Now()
				n, err := g.client(w).GetIntoParts(ctx, key, parts)
				if err == nil && n != getCPUSize {
					err = fmt.Errorf("get %s: %d bytes", key, n)
				}
				if err != nil {
					errs[w] = err
					break
				}
				mine = append(mine, time.Since(t0))
			}
			if keep {
				g.mu.Lock()
				g.lats = append(g.lats, mine...)
				g.mu.Unlock()
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// splitParts cuts b into n parts of equal length (the last takes the rest).
func splitParts(b []byte, n int) [][]byte {
	parts := make([][]byte, n)
	each := len(b) / n
	for i := range parts {
		end := (i + 1) * each
		if i == n-1 {
			end = len(b)
		}
		parts[i] = b[i*each : end]
	}
	return parts
}
