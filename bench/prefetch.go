package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/tierstore/tierstore/client"
)

// The prefetch scenario (issue 24 item 4): an engine looks a batch up
// (batch_exists) a scheduler step before it reads it. The figure is the
// time from the start of BatchExists to the end of the BatchGetInto that
// follows it after a 20 ms gap, for 128 objects of 2 MiB whose only copy
// is on SSD, with prefetch (the master's --prefetch_budget) and without
// (--prefetch_budget=0), against the same batch of objects in DRAM. One
// master and one node process per mode; the node's DRAM is full of
// fillers (put once, never read, offloaded) when the batches are read.
func init() {
	register(scenario{
		name: "prefetch",
		help: "batch_exists, 20 ms, batch get of 128 SSD-resident 2 MiB objects, with and without prefetch, vs the same batch from DRAM",
		run:  runPrefetch,
	})
}

const (
	pfSize  = 2 << 20
	pfBatch = 128
)

// pfGaps: the gap between batch_exists and the batch get: a scheduler step
// (20 ms, the issue's), and one long enough for this disk to load the
// batch (1 s). The rounds alternate between them.
var pfGaps = []time.Duration{20 * time.Millisecond, time.Second}

func runPrefetch(ctx context.Context, e *env) (*result, error) {
	started := time.Now()
	rounds, dram := 4, int64(1<<30)
	if e.quick {
		rounds = 2
	}
	bin := e.bin
	if bin == "" {
		bin = filepath.Join(e.dir, "bin")
		if err := buildBinaries(ctx, bin); err != nil {
			return nil, err
		}
	}
	res := &result{Options: map[string]string{
		"master": "--enable_offload --offload_admission_policy=tinylfu --dram_promotion_min_freq=2 (a put and the batch_exists) --put_start_max_wait=60s; --prefetch_budget=1024 (with) or 0 (without)",
		"node":   fmt.Sprintf("--memory=%s --enable_offload --ssd_capacity=16GiB --heartbeat_interval=1s (uring, O_DIRECT)", fmtBytes(dram)),
		"load": fmt.Sprintf("%d rounds of %d x %s objects put, then %s of fillers (DRAM full, the batches on SSD only); per round: batch_exists, a gap (20 ms or 1 s, alternating), batch get; DRAM: the same on the last %d fillers put",
			rounds, pfBatch, fmtBytes(pfSize), fmtBytes(dram*3/2), pfBatch),
	}}
	t := &table{Title: "batch_exists + 20 ms + batch get of 128 x 2 MiB (ms from the start of batch_exists to the end of the batch get)",
		Columns: []string{"mode", "gap", "batches", "p50 ms", "max ms", "x DRAM (p50)", "objects read from DRAM", "load avg", "goal 1.5x"}}
	var dramP50 float64
	type row struct {
		name       string
		gap        time.Duration
		lat        []float64
		fromDRAM   float64
		load       string
		isPrefetch bool
	}
	var rows []row
	for _, mode := range []struct {
		name   string
		budget int
	}{{"without prefetch", 0}, {"with prefetch", 1024}} {
		fmt.Fprintf(e.stderr, "prefetch: %s\n", mode.name)
		ssd, mem, err := prefetchOne(ctx, filepath.Join(e.dir, strings.ReplaceAll(mode.name, " ", "-")), bin, dram, rounds, mode.budget)
		if err != nil {
			return nil, fmt.Errorf("bench: prefetch %s: %w", mode.name, err)
		}
		for g, gap := range pfGaps {
			rows = append(rows, row{"SSD-resident, " + mode.name, gap, ssd[g].lat, ssd[g].fromDRAM, loadAvg(), mode.budget > 0})
		}
		if mode.budget > 0 {
			rows = append(rows, row{"DRAM-resident", pfGaps[0], mem.lat, mem.fromDRAM, loadAvg(), false})
			dramP50 = pfMedian(mem.lat)
		}
	}
	for _, r := range rows {
		x := pfMedian(r.lat) / dramP50
		goal := "-"
		if r.isPrefetch {
			goal = map[bool]string{true: "yes", false: "no"}[x <= 1.5]
		}
		t.add(r.name, r.gap.String(), len(r.lat), pfMedian(r.lat), slices.Max(r.lat), x, r.fromDRAM, r.load, goal)
	}
	res.Tables = []*table{t}
	res.Elapsed = time.Since(started).Seconds()
	return res, nil
}

type pfLat struct {
	lat      []float64 // ms per batch
	fromDRAM float64   // share of the objects read from DRAM
}

func pfMedian(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	return s[len(s)/2]
}

// prefetchOne runs one mode on a fresh master and node: the SSD batches,
// then (for comparison) batches of fillers that are in DRAM.
func prefetchOne(ctx context.Context, dir, bin string, dram int64, rounds, budget int) (ssd [2]pfLat, mem pfLat, err error) {
	cl := &cluster{}
	defer func() {
		if err != nil {
			err = fmt.Errorf("%w\n%s", err, cl.logTail())
		}
		cl.stop()
	}()
	if err := os.MkdirAll(filepath.Join(dir, "ssd"), 0o755); err != nil {
		return ssd, mem, err
	}
	line, err := cl.start(ctx, dir, filepath.Join(bin, "tierstore-master"), "tierstore-master listening on ",
		"--rpc_port=0", "--metrics_port=0", "--enable_offload=true", "--offload_admission_policy=tinylfu",
		"--dram_promotion_min_freq=2", fmt.Sprintf("--prefetch_budget=%d", budget), "--put_start_max_wait=60s", "--log_level=warn",
		"--state_dir="+filepath.Join(dir, "master-state"))
	if err != nil {
		return ssd, mem, err
	}
	addr := strings.Fields(line)[0]
	if _, err = cl.start(ctx, dir, filepath.Join(bin, "tierstore-node"), "tierstore-node listening on ",
		"--master="+addr, fmt.Sprintf("--memory=%d", dram), "--enable_offload", "--ssd_dir="+filepath.Join(dir, "ssd"),
		"--ssd_capacity=16GiB", "--heartbeat_interval=1s"); err != nil {
		return ssd, mem, err
	}
	c, err := client.New(ctx, client.Config{MasterAddr: addr, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return ssd, mem, err
	}
	defer c.Close()
	val := make([]byte, pfSize)
	for i := range val {
		val[i] = byte(i * 13)
	}
	putBatch := func(keys []string) error {
		vals := make([][]byte, len(keys))
		for i := range vals {
			vals[i] = val
		}
		for i, err := range c.BatchPut(ctx, keys, vals) {
			if err != nil {
				return fmt.Errorf("put %s: %w", keys[i], err)
			}
		}
		return nil
	}
	batches := make([][]string, rounds)
	for r := range batches {
		for i := range pfBatch {
			batches[r] = append(batches[r], fmt.Sprintf("pf-%d-%d", r, i))
		}
		if err := putBatch(batches[r]); err != nil {
			return ssd, mem, err
		}
	}
	var fillers []string
	for i := int64(0); i < dram*3/2/pfSize; i++ {
		fillers = append(fillers, fmt.Sprintf("fill-%d", i))
	}
	for i := 0; i < len(fillers); i += 16 {
		if err := putBatch(fillers[i:min(i+16, len(fillers))]); err != nil {
			return ssd, mem, err
		}
	}
	bufs := make([][]byte, pfBatch)
	for i := range bufs {
		bufs[i] = make([]byte, pfSize)
	}
	for r, b := range batches {
		g := r % len(pfGaps)
		if err := pfMeasure(ctx, c, b, bufs, pfGaps[g], &ssd[g], (rounds-g+1)/len(pfGaps)); err != nil {
			return ssd, mem, err
		}
	}
	dramRounds := min(rounds, 2)
	for r := range dramRounds {
		last := fillers[len(fillers)-pfBatch*(r+1) : len(fillers)-pfBatch*r]
		if err := pfMeasure(ctx, c, last, bufs, pfGaps[0], &mem, dramRounds); err != nil {
			return ssd, mem, err
		}
	}
	return ssd, mem, nil
}

// pfMeasure times one batch_exists, the gap, then the batch get of keys into
// bufs, adding the latency and the share of the keys read from DRAM (over
// of batches) to into.
func pfMeasure(ctx context.Context, c *client.Client, keys []string, bufs [][]byte, gap time.Duration, into *pfLat, of int) error {
	before := c.ReadStats()
	t0 := time.Now()
	ok, errs := c.BatchExists(ctx, keys)
	for i := range keys {
		if errs[i] != nil || !ok[i] {
			return fmt.Errorf("batch exists %s: %v %v", keys[i], ok[i], errs[i])
		}
	}
	time.Sleep(gap) // the scheduler step between the lookup and the read
	ns, gerrs := c.BatchGetInto(ctx, keys, bufs)
	el := time.Since(t0)
	for i := range keys {
		if gerrs[i] != nil || ns[i] != pfSize {
			return fmt.Errorf("batch get %s: %d bytes, %v", keys[i], ns[i], gerrs[i])
		}
	}
	after := c.ReadStats()
	into.lat = append(into.lat, float64(el.Microseconds())/1000)
	d := after.LocalDRAM + after.RemoteDRAM - before.LocalDRAM - before.RemoteDRAM
	into.fromDRAM += float64(d) / float64(len(keys)*of)
	return nil
}
