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
	"time"

	"github.com/tierstore/tierstore/bench/internal/fio"
	"github.com/tierstore/tierstore/client"
)

// The prefetch scenario (issue 24 item 4): an engine looks a batch up
// (batch_exists) a scheduler step before it reads it. The figure is the
// time from the start of BatchExists to the end of the BatchGetInto that
// follows it after a gap (20 ms, and 1 s), for 128 objects of 2 MiB whose
// only copy is on SSD, with prefetch (the master's --prefetch_budget) and
// without (--prefetch_budget=0), against a batch of objects in DRAM read
// with the same gap. One master and one node process per mode; the
// node's DRAM is full of fillers (put once, never read; on SSD only once
// evicted) when each batch is read, put anew before each round, so a
// prefetch's room must first be offloaded. fio's random read and sequential write on the same directory
// give the disk's bound: the batch cannot come from DRAM before it was
// read from SSD, nor before as many bytes of victims were written.
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
var pfGaps = [pfNGaps]time.Duration{20 * time.Millisecond, time.Second}

const pfNGaps = 2

func runPrefetch(ctx context.Context, e *env) (*result, error) {
	started := time.Now()
	rounds, dram, fioSize := 4, int64(1<<30), int64(1<<30)
	if e.quick {
		rounds, fioSize = 2, 512<<20
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
		"load": fmt.Sprintf("%d rounds of %d x %s objects put; per round: %s of new fillers (DRAM full of objects not on SSD, the batches on SSD only), then once no offload is queued or in flight: batch_exists, a gap (20 ms or 1 s, alternating), batch get; DRAM: the same on %d objects put last",
			rounds, pfBatch, fmtBytes(pfSize), fmtBytes(dram), pfBatch),
		"fio": "randread bs 2 MiB, iodepth 16, O_DIRECT, and sequential write bs 1 MiB, iodepth 16, O_DIRECT, fdatasync every 32 MiB, on the same directory before the modes",
	}}
	fr, fw := pfFio(ctx, e, fioSize, res)
	t := &table{Title: "batch_exists + gap + batch get of 128 x 2 MiB (ms from the start of batch_exists to the end of the batch get)",
		Columns: []string{"mode", "gap", "batches", "p50 ms", "max ms", "x DRAM (p50, same gap)", "objects read from DRAM", "load avg", "goal 1.5x"}}
	type row struct {
		name       string
		gap        int
		lat        []float64
		fromDRAM   float64
		load       string
		isPrefetch bool
	}
	var rows []row
	var dramP50 [pfNGaps]float64
	for _, mode := range []struct {
		name   string
		budget int
	}{{"without prefetch", 0}, {"with prefetch", 1024}} {
		bar := e.progress("prefetch "+mode.name, 1)
		ssd, mem, err := prefetchOne(ctx, filepath.Join(e.dir, strings.ReplaceAll(mode.name, " ", "-")), bin, dram, rounds, mode.budget)
		bar.Add(1)
		bar.Finish()
		if err != nil {
			return nil, fmt.Errorf("bench: prefetch %s: %w", mode.name, err)
		}
		for g := range pfGaps {
			rows = append(rows, row{"SSD-resident, " + mode.name, g, ssd[g].lat, ssd[g].fromDRAM, loadAvg(), mode.budget > 0})
		}
		if mode.budget > 0 {
			for g := range pfGaps {
				rows = append(rows, row{"DRAM-resident", g, mem[g].lat, mem[g].fromDRAM, loadAvg(), false})
				dramP50[g] = pfMedian(mem[g].lat)
			}
		}
	}
	for _, r := range rows {
		x := pfMedian(r.lat) / dramP50[r.gap]
		goal := "-"
		if r.isPrefetch {
			goal = map[bool]string{true: "yes", false: "no"}[x <= 1.5]
		}
		t.add(r.name, pfGaps[r.gap].String(), len(r.lat), pfMedian(r.lat), slices.Max(r.lat), x, r.fromDRAM, r.load, goal)
	}
	// The disk's bound: the batch cannot be read from DRAM before it was
	// read from SSD (at fio's randread rate), nor, when its room must first
	// be made by offloading as many bytes of victims (DRAM full of objects
	// not on SSD yet), before those were written (at fio's write rate).
	if fr > 0 {
		batch := float64(pfBatch * pfSize)
		for g, gap := range pfGaps {
			read := batch / (fr * mb) * 1000
			t.add("disk bound: read the batch (fio randread "+fmt.Sprintf("%.0f MB/s)", fr), gap.String(), "", max(read, dramP50[g]), "", max(read, dramP50[g])/dramP50[g], "", "", "")
			if fw > 0 {
				both := read + batch/(fw*mb)*1000
				t.add("disk bound: write as many victims, then read ("+fmt.Sprintf("fio write %.0f MB/s)", fw), gap.String(), "", max(both, dramP50[g]), "", max(both, dramP50[g])/dramP50[g], "", "", "")
			}
		}
	}
	res.Tables = []*table{t}
	res.Elapsed = time.Since(started).Seconds()
	ss := make([]series, 0, len(rows)/pfNGaps)
	for i := 0; i+pfNGaps <= len(rows); i += pfNGaps {
		s := series{name: rows[i].name}
		for g := range pfNGaps {
			s.values = append(s.values, pfMedian(rows[i+g].lat))
		}
		ss = append(ss, s)
	}
	res.charts = func(dir string) ([]string, error) {
		path := filepath.Join(dir, "prefetch.png")
		groups := make([]string, pfNGaps)
		for g, gap := range pfGaps {
			groups[g] = "gap " + gap.String()
		}
		return []string{path}, groupedBars(path, "batch_exists + gap + batch get of 128 x 2 MiB, p50", "ms", groups, ss, nil)
	}
	return res, nil
}

// pfFio measures the disk under the bench's directory: random 2 MiB reads
// and sequential writes, in MB/s (0 when fio is missing or fails: noted).
func pfFio(ctx context.Context, e *env, size int64, res *result) (read, write float64) {
	dir := filepath.Join(e.dir, "fio")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		res.Notes = append(res.Notes, "fio: "+err.Error())
		return 0, 0
	}
	defer os.RemoveAll(dir)
	w, err := fio.Run(ctx, fio.Job{Name: "seqwrite", Dir: dir, FileName: "data", RW: "write", BlockSize: 1 << 20,
		IODepth: 16, Direct: true, Size: size, FdatasyncEvery: 32, EndFsync: true})
	if err != nil {
		res.Notes = append(res.Notes, "fio: "+err.Error())
		return 0, 0
	}
	r, err := fio.Run(ctx, fio.Job{Name: "randread", Dir: dir, FileName: "data", RW: "randread", BlockSize: pfSize,
		IODepth: 16, Direct: true, Size: size})
	if err != nil {
		res.Notes = append(res.Notes, "fio: "+err.Error())
		return 0, w.BytesPerSec / mb
	}
	return r.BytesPerSec / mb, w.BytesPerSec / mb
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
func prefetchOne(ctx context.Context, dir, bin string, dram int64, rounds, budget int) (ssd, mem [pfNGaps]pfLat, err error) {
	cl := &cluster{}
	defer func() {
		if err != nil {
			err = fmt.Errorf("%w\n%s", err, cl.logTail())
		}
		cl.stop()
	}()
	c, err := pfStart(ctx, cl, dir, bin, dram, budget)
	if err != nil {
		return ssd, mem, err
	}
	defer c.Close()
	w := newPFWriter(c)
	warm := pfKeys("warm", pfBatch) // read once, untimed, before the rounds
	if err := w.put(ctx, warm); err != nil {
		return ssd, mem, err
	}
	batches := make([][]string, rounds)
	for r := range batches {
		batches[r] = pfKeys(fmt.Sprintf("pf-%d", r), pfBatch)
		if err := w.put(ctx, batches[r]); err != nil {
			return ssd, mem, err
		}
	}
	bufs := make([][]byte, pfBatch)
	for i := range bufs {
		bufs[i] = make([]byte, pfSize)
	}
	// Warm-up: the first batch get of a process ran 2 to 4 times slower
	// than the next ones, whatever its gap and tier (the round's position,
	// not its gap, made it slow), so an untimed one of an SSD-resident
	// batch goes first.
	if err := w.fillAndSettle(ctx, dram); err != nil {
		return ssd, mem, err
	}
	if _, errs := c.BatchGetInto(ctx, warm, bufs); errors.Join(errs...) != nil {
		return ssd, mem, fmt.Errorf("warm-up batch get: %w", errors.Join(errs...))
	}
	for r, b := range batches {
		g := r % len(pfGaps)
		// Each round finds DRAM full of fillers not on SSD yet (room for a
		// prefetch is made by offloading some), whatever the rounds
		// before it promoted.
		if err := w.fillAndSettle(ctx, dram); err != nil {
			return ssd, mem, err
		}
		if err := pfMeasure(ctx, c, b, bufs, pfGaps[g], &ssd[g], (rounds-g+1)/len(pfGaps)); err != nil {
			return ssd, mem, err
		}
	}
	// The DRAM reference: a batch put last (the most recently used
	// objects; the prefetches above evicted older ones), read at each gap.
	last := pfKeys("dram", pfBatch)
	if err := w.put(ctx, last); err != nil {
		return ssd, mem, err
	}
	for g := range pfGaps {
		if err := pfSettle(ctx, c); err != nil {
			return ssd, mem, err
		}
		if err := pfMeasure(ctx, c, last, bufs, pfGaps[g], &mem[g], 1); err != nil {
			return ssd, mem, err
		}
	}
	return ssd, mem, nil
}

// pfStart starts prefetchOne's master (prefetch budget in MB/s) and node
// (dram bytes of DRAM, an SSD tier) in cl, and returns a client of them.
func pfStart(ctx context.Context, cl *cluster, dir, bin string, dram int64, budget int) (*client.Client, error) {
	if err := os.MkdirAll(filepath.Join(dir, "ssd"), 0o755); err != nil {
		return nil, err
	}
	line, err := cl.start(ctx, dir, filepath.Join(bin, "tierstore-master"), "tierstore-master listening on ",
		"--rpc_port=0", "--metrics_port=0", "--enable_offload=true", "--offload_admission_policy=tinylfu",
		"--dram_promotion_min_freq=2", fmt.Sprintf("--prefetch_budget=%d", budget), "--put_start_max_wait=60s", "--log_level=warn",
		"--state_dir="+filepath.Join(dir, "master-state"))
	if err != nil {
		return nil, err
	}
	addr := strings.Fields(line)[0]
	if _, err = cl.start(ctx, dir, filepath.Join(bin, "tierstore-node"), "tierstore-node listening on ",
		"--master="+addr, fmt.Sprintf("--memory=%d", dram), "--enable_offload", "--ssd_dir="+filepath.Join(dir, "ssd"),
		"--ssd_capacity=16GiB", "--heartbeat_interval=1s"); err != nil {
		return nil, err
	}
	return client.New(ctx, client.Config{MasterAddr: addr, Logger: slog.New(slog.DiscardHandler)})
}

// pfKeys are the n keys prefix-0 .. prefix-(n-1).
func pfKeys(prefix string, n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("%s-%d", prefix, i)
	}
	return keys
}

// pfWriter puts prefetchOne's objects, each the same pfSize bytes.
type pfWriter struct {
	c     *client.Client
	val   []byte
	fills int // fillers put so far (the next filler's number)
}

func newPFWriter(c *client.Client) *pfWriter {
	val := make([]byte, pfSize)
	for i := range val {
		val[i] = byte(i * 13)
	}
	return &pfWriter{c: c, val: val}
}

// put puts keys in one batch.
func (w *pfWriter) put(ctx context.Context, keys []string) error {
	vals := make([][]byte, len(keys))
	for i := range vals {
		vals[i] = w.val
	}
	for i, err := range w.c.BatchPut(ctx, keys, vals) {
		if err != nil {
			return fmt.Errorf("put %s: %w", keys[i], err)
		}
	}
	return nil
}

// fillAndSettle puts n bytes of fillers (put once, never read), in batches
// of 16: the least recently used objects leave DRAM (tinylfu queues them
// for offload); then it waits for the offload to settle (pfSettle).
func (w *pfWriter) fillAndSettle(ctx context.Context, n int64) error {
	fillers := make([]string, n/pfSize)
	for i := range fillers {
		fillers[i] = fmt.Sprintf("fill-%d", w.fills)
		w.fills++
	}
	for i := 0; i < len(fillers); i += 16 {
		if err := w.put(ctx, fillers[i:min(i+16, len(fillers))]); err != nil {
			return err
		}
	}
	return pfSettle(ctx, w.c)
}

// pfSettle waits (up to a minute) until the master has no offload task
// queued or in flight: a round is not timed against the tail of the
// previous puts' offload.
func pfSettle(ctx context.Context, c *client.Client) error {
	deadline := time.Now().Add(time.Minute)
	for {
		st, err := c.Stats(ctx)
		if err != nil {
			return err
		}
		if st.OffloadQueued+st.OffloadInFlight == 0 || time.Now().After(deadline) {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
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
