package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tierstore/tierstore/client"
)

// The putcpu scenario (issue 24, stop 45): the CPU each process spends on
// one single put into a DRAM that does not fill. One master and one node
// process (built from cmd/, or --bin), one client in this process, values
// of 256 KiB and 2 MiB put by 1 and by 8 goroutines; CPU from getrusage
// (this process: the client) and the master's and node's threads'
// schedstat (fullPutCPU). A row's cluster is fresh; the
// first puts of a row (connections, the segment's first touch) are not
// counted.
func init() {
	register(scenario{
		name: "putcpu",
		help: "CPU per single put in the client, master and node processes (256 KiB and 2 MiB, 1 and 8 writers, DRAM never fills)",
		run:  runPutCPU,
	})
}

// putCPUMemory is the node's DRAM: more than a row puts.
const putCPUMemory = 640 << 20

type putCPURow struct {
	size    int
	writers int
	puts    int // counted puts (after the warm-up)
}

func runPutCPU(ctx context.Context, e *env) (*result, error) {
	started := time.Now()
	bin := e.bin
	if bin == "" {
		bin = filepath.Join(e.dir, "bin")
		if err := buildBinaries(ctx, bin); err != nil {
			return nil, err
		}
	}
	rows := []putCPURow{{256 << 10, 1, 1600}, {256 << 10, 8, 1600}, {2 << 20, 1, 200}, {2 << 20, 8, 200}}
	if e.quick {
		for i := range rows {
			rows[i].puts /= 2
		}
	}
	res := &result{Options: map[string]string{
		"binaries": bin,
		"master":   "--metrics_port=0 (no offload)",
		"node":     "--memory=640MiB (never fills; filled to 7/8 and emptied before a row, so that the rows' puts do not pay the first touch of its pages)",
		"load":     "one client in this process, single puts of new keys; the first tenth of a row's puts (at least 8 per writer) not counted",
	}}
	t := &table{Title: "CPU per single put (us), DRAM never fills",
		Columns: []string{"value", "writers", "puts", "us/put client", "master", "node", "switches/put client", "master", "node", "MB/s", "load avg"}}
	for i, r := range rows {
		fmt.Fprintf(e.stderr, "putcpu: %s x %d writers\n", fmtBytes(int64(r.size)), r.writers)
		prof := ""
		if e.procProf != "" {
			prof = filepath.Join(e.procProf, fmt.Sprintf("putcpu%d", i))
		}
		st, err := putCPUOne(ctx, filepath.Join(e.dir, fmt.Sprintf("row%d", i)), bin, r, prof)
		if err != nil {
			return nil, fmt.Errorf("bench: putcpu %s x %d: %w", fmtBytes(int64(r.size)), r.writers, err)
		}
		t.add(fmtBytes(int64(r.size)), r.writers, r.puts, st.cpu[0], st.cpu[1], st.cpu[2],
			st.switches[0], st.switches[1], st.switches[2], st.mbps, loadAvg())
	}
	res.Tables = []*table{t}
	res.Elapsed = time.Since(started).Seconds()
	return res, nil
}

type putCPUStats struct {
	cpu, switches [3]float64 // per put: us of CPU, context switches (client, master, node)
	mbps          float64
}

// cpuCluster starts in cl the master and node processes a CPU-per-call
// scenario measures (putcpu, getcpu): a master with a state directory in
// dir and a node of memory bytes, each writing a CPU profile beside prof
// when prof is not empty. It returns the master's address.
func cpuCluster(ctx context.Context, cl *cluster, dir, bin string, memory int64, prof string) (string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	var mprof, nprof []string
	if prof != "" {
		mprof, nprof = []string{"--cpuprofile=" + prof + "-master.pprof"}, []string{"--cpuprofile=" + prof + "-node.pprof"}
	}
	line, err := cl.start(ctx, dir, filepath.Join(bin, "tierstore-master"), "tierstore-master listening on ",
		append([]string{"--rpc_port=0", "--metrics_port=0", "--log_level=warn", "--state_dir=" + filepath.Join(dir, "master-state")}, mprof...)...)
	if err != nil {
		return "", err
	}
	addr := strings.Fields(line)[0]
	if _, err := cl.start(ctx, dir, filepath.Join(bin, "tierstore-node"), "tierstore-node listening on ",
		append([]string{"--master=" + addr, fmt.Sprintf("--memory=%d", memory)}, nprof...)...); err != nil {
		return "", err
	}
	return addr, nil
}

func putCPUOne(ctx context.Context, dir, bin string, r putCPURow, prof string) (st putCPUStats, err error) {
	cl := &cluster{}
	defer func() {
		if err != nil {
			err = fmt.Errorf("%w\n%s", err, cl.logTail())
		}
		cl.stop()
	}()
	addr, err := cpuCluster(ctx, cl, dir, bin, putCPUMemory, prof)
	if err != nil {
		return st, err
	}
	c, err := client.New(ctx, client.Config{MasterAddr: addr, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return st, err
	}
	defer c.Close()
	val := make([]byte, r.size)
	for i := range val {
		val[i] = byte(i * 7)
	}
	var next atomic.Int64
	run := func(n int64) error {
		end := next.Load() + n
		var wg sync.WaitGroup
		errs := make([]error, r.writers)
		for w := range r.writers {
			wg.Go(func() {
				for {
					i := next.Add(1)
					if i > end {
						return
					}
					if err := c.Put(ctx, fmt.Sprintf("pc-%d", i), val); err != nil {
						errs[w] = err
						return
					}
				}
			})
		}
		wg.Wait()
		return errors.Join(errs...)
	}
	// The segment's pages are touched once (a put into a fresh page pays
	// the kernel's page fault and zeroing, which a node in service paid
	// long ago): fill most of it, remove everything, then the warm-up.
	fill := make([]byte, 2<<20)
	for i := range putCPUMemory * 7 / 8 / len(fill) {
		if err := c.Put(ctx, fmt.Sprintf("pc-fill-%d", i), fill); err != nil {
			return st, fmt.Errorf("filling: %w", err)
		}
	}
	if _, err := c.RemoveAll(ctx, true); err != nil {
		return st, err
	}
	if err := run(int64(max(r.puts/10, 8*r.writers))); err != nil {
		return st, err
	}
	cpu0, sw0, err := fullPutCPU(cl)
	if err != nil {
		return st, err
	}
	t0 := time.Now()
	if err := run(int64(r.puts)); err != nil {
		return st, err
	}
	secs := time.Since(t0).Seconds()
	cpu1, sw1, err := fullPutCPU(cl)
	if err != nil {
		return st, err
	}
	for i := range st.cpu {
		st.cpu[i] = float64((cpu1[i] - cpu0[i]).Microseconds()) / float64(r.puts)
		st.switches[i] = float64(sw1[i]-sw0[i]) / float64(r.puts)
	}
	st.mbps = float64(r.puts) * float64(r.size) / mb / secs
	return st, nil
}
