package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/tierstore/tierstore/bench/internal/fio"
	"github.com/tierstore/tierstore/client"
	"github.com/tierstore/tierstore/node"
)

// The fullput scenario (issue 24 item 3): sustained puts into a node whose
// DRAM is full, against fio's sequential write on the same disk. One
// master and one node process (built from cmd/, or --bin), eager offload,
// 8 writers of 256 KiB values with new keys; a put finds DRAM full and
// waits for room, which only offloaded objects (evictable once on SSD) can
// make. The figure is the put rate after the first 2x DRAM bytes (DRAM
// full, steady state), at two heartbeat intervals, and with a DRAM that
// never fills (the same writers, a DRAM larger than what they put).
func init() {
	register(scenario{
		name: "fullput",
		help: "puts into a full DRAM (one node process, eager offload, 8 writers of 256 KiB) at heartbeat 1s and 50ms vs fio sequential write on the same disk",
		run:  runFullPut,
	})
}

const (
	fullPutWriters = 8
	fullPutSize    = 256 << 10
	fullPutDRAM    = 32 << 20
)

type fullPutRow struct {
	name      string
	heartbeat time.Duration
	wake      bool // --offload_wake
	memory    int64
	limit     int64 // stop after this many bytes (0: the duration only)
}

func runFullPut(ctx context.Context, e *env) (*result, error) {
	started := time.Now()
	dur, fioSize := 12*time.Second, int64(2<<30)
	if e.quick {
		dur, fioSize = 3*time.Second, 256<<20
	}
	if e.duration > 0 {
		dur = e.duration
	}
	bin := e.bin
	if bin == "" {
		bin = filepath.Join(e.dir, "bin")
		if err := buildBinaries(ctx, bin); err != nil {
			return nil, err
		}
	}
	rows := []fullPutRow{
		{"full DRAM, ticks only", time.Second, false, fullPutDRAM, 0},
		{"full DRAM, ticks only", 50 * time.Millisecond, false, fullPutDRAM, 0},
		{"full DRAM, woken", time.Second, true, fullPutDRAM, 0},
		{"full DRAM, woken", 50 * time.Millisecond, true, fullPutDRAM, 0},
		{"full DRAM, woken", time.Hour, true, fullPutDRAM, 0},
		{"DRAM never fills (1 GiB)", time.Second, true, 1 << 30, 3 << 28},
	}
	res := &result{Options: map[string]string{
		"binaries": bin,
		"master":   "--enable_offload --offload_admission_policy=eager",
		"node":     fmt.Sprintf("--memory=%s (1 GiB for the last row) --enable_offload --ssd_capacity=16GiB (uring, O_DIRECT); ticks only: --offload_wake=false (offload on the heartbeat tick only, as before issue 24 item 3)", fmtBytes(fullPutDRAM)),
		"load":     fmt.Sprintf("%d writers, %s values, new keys, %v per row; MB/s counted after the first %s put (the last row: all of it)", fullPutWriters, fmtBytes(fullPutSize), dur, fmtBytes(2*fullPutDRAM)),
		"fio":      "sequential write, bs 1 MiB, iodepth 16, O_DIRECT, fdatasync every 32 MiB, on the same directory, before and after the rows (their mean is the reference)",
	}}
	ssdBase := filepath.Join(e.dir, "fio")
	if err := os.MkdirAll(ssdBase, 0o755); err != nil {
		return nil, err
	}
	fioJob := fio.Job{Name: "seqwrite", Dir: ssdBase, FileName: "data", RW: "write", BlockSize: 1 << 20,
		IODepth: 16, Direct: true, Size: fioSize, FdatasyncEvery: 32, EndFsync: true}
	var fioRates []float64
	runFio := func() {
		r, err := fio.Run(ctx, fioJob)
		_ = os.Remove(filepath.Join(ssdBase, "data"))
		if err != nil {
			res.Notes = append(res.Notes, "fio: "+err.Error())
			fmt.Fprintf(e.stderr, "fullput: fio: %v\n", err)
			return
		}
		fioRates = append(fioRates, r.BytesPerSec/mb)
	}
	runFio()
	type measured struct {
		row  fullPutRow
		st   fullPutStats
		load string
	}
	var got []measured
	for i, r := range rows {
		fmt.Fprintf(e.stderr, "fullput: %s\n", r.name)
		prof := ""
		if e.procProf != "" {
			prof = filepath.Join(e.procProf, fmt.Sprintf("row%d", i))
		}
		st, err := fullPutOne(ctx, filepath.Join(e.dir, fmt.Sprintf("row%d", i)), bin, r, dur, prof)
		if err != nil {
			return nil, fmt.Errorf("bench: fullput %s: %w", r.name, err)
		}
		got = append(got, measured{r, st, loadAvg()})
	}
	runFio()
	var fioMean float64
	for _, f := range fioRates {
		fioMean += f / float64(len(fioRates))
	}
	t := &table{Title: "puts into a full DRAM vs fio sequential write on the same disk (MB/s = 10^6 B/s)",
		Columns: []string{"row", "heartbeat", "MB/s", "x fio write", "put p50 ms", "put p99 ms", "put failures", "SSD MiB written", "cpu ms/MiB client", "master", "node", "switches/put client", "master", "node", "load avg", "goal 0.8x"}}
	for i, f := range fioRates {
		t.add(fmt.Sprintf("fio seq write (%s)", []string{"before", "after"}[min(i, 1)]), "-", f, f/fioMean, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, "")
	}
	for _, m := range got {
		x := m.st.mbps / fioMean
		goal := "-"
		if m.row.memory == fullPutDRAM {
			goal = map[bool]string{true: "yes", false: "no"}[x >= 0.8]
		}
		t.add(m.row.name, m.row.heartbeat.String(), m.st.mbps, x, m.st.p50, m.st.p99, m.st.failures,
			float64(m.st.ssdBytes)/(1<<20), m.st.cpu[0], m.st.cpu[1], m.st.cpu[2],
			m.st.switches[0], m.st.switches[1], m.st.switches[2], m.load, goal)
	}
	res.Tables = []*table{t}
	res.Elapsed = time.Since(started).Seconds()
	return res, nil
}

type fullPutStats struct {
	mbps, p50, p99 float64
	failures       int64
	ssdBytes       int64
	// cpu: CPU ms per MiB put (all of the row's puts) of the load
	// generator (this process, client library), the master and the node;
	// switches: their context switches per put.
	cpu, switches [3]float64
}

// fullPutOne runs one row: a fresh master and node, the writers for dur.
// prof, when not empty, is the prefix of the processes' CPU profiles.
func fullPutOne(ctx context.Context, dir, bin string, r fullPutRow, dur time.Duration, prof string) (st fullPutStats, err error) {
	cl := &cluster{}
	defer func() {
		if err != nil {
			err = fmt.Errorf("%w\n%s", err, cl.logTail())
		}
		cl.stop()
	}()
	addr, endpoint, err := fullPutCluster(ctx, cl, dir, bin, r, prof)
	if err != nil {
		return st, err
	}
	log := slog.New(slog.DiscardHandler)
	clients := make([]*client.Client, fullPutWriters)
	for i := range clients {
		if clients[i], err = client.New(ctx, client.Config{MasterAddr: addr, Logger: log}); err != nil {
			return st, err
		}
		defer clients[i].Close()
	}
	cpu0, sw0, err := fullPutCPU(cl)
	if err != nil {
		return st, err
	}
	w := fullPutWrite(ctx, clients, r, dur)
	if w.err != nil {
		return st, w.err
	}
	cpu1, sw1, err := fullPutCPU(cl)
	if err != nil {
		return st, err
	}
	if mib := float64(w.total) / (1 << 20); mib > 0 {
		puts := float64(w.total) / float64(fullPutSize)
		for i := range st.cpu {
			st.cpu[i] = float64((cpu1[i] - cpu0[i]).Milliseconds()) / mib
			st.switches[i] = float64(sw1[i]-sw0[i]) / puts
		}
	}
	secs := w.end.Sub(w.fullAt).Seconds()
	st.failures = w.failures
	st.p50, st.p99 = math.NaN(), math.NaN() // no put ended after DRAM filled: "-"
	if w.after > 0 && secs > 0 {
		st.mbps = float64(w.after) / mb / secs
		slices.Sort(w.lats)
		st.p50, st.p99 = w.lats[len(w.lats)/2], w.lats[min(len(w.lats)-1, len(w.lats)*99/100)]
	}
	ps, err := node.PeerStats(ctx, endpoint)
	if err != nil {
		return st, err
	}
	st.ssdBytes = ps.Tier.BytesWritten
	return st, nil
}

// fullPutCluster starts a master and a node of row r in cl: the master's
// address and the node's endpoint.
func fullPutCluster(ctx context.Context, cl *cluster, dir, bin string, r fullPutRow, prof string) (addr, endpoint string, err error) {
	if err := os.MkdirAll(filepath.Join(dir, "ssd"), 0o755); err != nil {
		return "", "", err
	}
	var mprof, nprof []string
	if prof != "" {
		mprof, nprof = []string{"--cpuprofile=" + prof + "-master.pprof"}, []string{"--cpuprofile=" + prof + "-node.pprof"}
	}
	margs := append([]string{"--rpc_port=0", "--metrics_port=0", "--enable_offload=true", "--offload_admission_policy=eager", "--log_level=warn",
		"--state_dir=" + filepath.Join(dir, "master-state")}, mprof...)
	line, err := cl.start(ctx, dir, filepath.Join(bin, "tierstore-master"), "tierstore-master listening on ", margs...)
	if err != nil {
		return "", "", err
	}
	addr = strings.Fields(line)[0]
	nargs := append([]string{"--master=" + addr, fmt.Sprintf("--memory=%d", r.memory), "--enable_offload", "--ssd_dir=" + filepath.Join(dir, "ssd"),
		"--ssd_capacity=16GiB", fmt.Sprintf("--heartbeat_interval=%v", r.heartbeat), fmt.Sprintf("--offload_wake=%v", r.wake)}, nprof...)
	line, err = cl.start(ctx, dir, filepath.Join(bin, "tierstore-node"), "tierstore-node listening on ", nargs...)
	if err != nil {
		return "", "", err
	}
	return addr, strings.Fields(line)[0], nil
}

// fullPutWritten is what the writers of one row did.
type fullPutWritten struct {
	total, after, failures int64     // bytes put, bytes put once DRAM was full, puts refused
	fullAt, end            time.Time // when total passed 2x DRAM (the start without a warm-up), when the writers ended
	lats                   []float64 // ms of each put once DRAM was full
	err                    error     // the first error other than a refusal
}

// fullPutWrite runs one writer per client for dur (or until r.limit bytes).
func fullPutWrite(ctx context.Context, clients []*client.Client, r fullPutRow, dur time.Duration) fullPutWritten {
	val := make([]byte, fullPutSize)
	for i := range val {
		val[i] = byte(i * 7)
	}
	var (
		total, after, failures atomic.Int64
		fullAt                 atomic.Int64 // unix ns when total passed 2x DRAM
		mu                     sync.Mutex   // protects lats and firstErr
		lats                   []float64
		firstErr               error
	)
	warm := int64(2 * fullPutDRAM)
	if r.limit > 0 {
		warm = 0
	}
	begin := time.Now()
	fullAt.Store(begin.UnixNano())
	deadline := begin.Add(dur)
	var wg sync.WaitGroup
	for w := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var mine []float64
			for i := 0; time.Now().Before(deadline) && ctx.Err() == nil; i++ {
				if r.limit > 0 && total.Load() >= r.limit {
					break
				}
				t0 := time.Now()
				perr := clients[w].Put(ctx, fmt.Sprintf("fp-%d-%d", w, i), val)
				el := time.Since(t0)
				switch {
				case errors.Is(notStored(perr), errNotStored):
					failures.Add(1)
					continue
				case perr != nil:
					mu.Lock()
					if firstErr == nil {
						firstErr = perr
					}
					mu.Unlock()
					return
				}
				n := total.Add(fullPutSize)
				if warm > 0 && n-fullPutSize < warm && n >= warm {
					fullAt.Store(time.Now().UnixNano())
				}
				if n > warm {
					after.Add(fullPutSize)
					mine = append(mine, float64(el.Microseconds())/1000)
				}
			}
			mu.Lock()
			lats = append(lats, mine...)
			mu.Unlock()
		}()
	}
	wg.Wait()
	return fullPutWritten{total: total.Load(), after: after.Load(), failures: failures.Load(),
		fullAt: time.Unix(0, fullAt.Load()), end: time.Now(), lats: lats, err: firstErr}
}

// loadAvg is /proc/loadavg's 1-minute figure.
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	return strings.Fields(string(b))[0]
}

// fullPutCPU returns the CPU time (user + system) used so far by this
// process, the master and the node of cl (theirs to the nanosecond,
// procThreads), and their context switches.
func fullPutCPU(cl *cluster) (out [3]time.Duration, sw [3]int64, err error) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return out, sw, err
	}
	out[0] = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	sw[0] = ru.Nvcsw + ru.Nivcsw
	for i, p := range cl.procs[:2] {
		if out[i+1], sw[i+1], err = procThreads(p.Process.Pid); err != nil {
			return out, sw, err
		}
	}
	return out, sw, nil
}
