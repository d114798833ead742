package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/tierstore/tierstore/backend"
	"github.com/tierstore/tierstore/backend/pwrite"
	"github.com/tierstore/tierstore/backend/uring"
	"github.com/tierstore/tierstore/bench/internal/fio"
	"github.com/tierstore/tierstore/tier"
)

func init() {
	register(scenario{
		name: "throughput",
		help: "tier engine Offload/Load of 64K/256K/1M objects per backend, as ratios to fio on the same directory",
		run:  runThroughput,
	})
}

// tierBackend names a backend configuration and opens it.
type tierBackend struct {
	name string
	open func(dir string, log *slog.Logger) (backend.Backend, error)
}

var tierBackends = []tierBackend{
	{"uring+direct", func(dir string, log *slog.Logger) (backend.Backend, error) {
		return uring.Open(dir, uring.Options{Direct: true, Logger: log})
	}},
	{"pwrite", func(dir string, log *slog.Logger) (backend.Backend, error) {
		return pwrite.Open(dir, pwrite.Options{Logger: log})
	}},
	{"pwrite+direct", func(dir string, log *slog.Logger) (backend.Backend, error) {
		return pwrite.Open(dir, pwrite.Options{Direct: true, Logger: log})
	}},
}

type tpFigures struct {
	backend, size        string
	actual               string // backend.Name() after fallbacks
	writeMBps, readMBps  float64
	readIOPS             float64
	offP50, offP99       float64 // ms per Offload call (one bucket)
	loadP50, loadP99     float64 // ms per Load call
	objects, readObjects int
}

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func runThroughput(ctx context.Context, e *env) (*result, error) {
	start := time.Now()
	total := int64(512 << 20)
	bucketBytes := int64(64 << 20)
	readBudget := 15 * time.Second
	fioRuntime := 5 * time.Second
	if e.quick {
		total, bucketBytes, readBudget, fioRuntime = 16<<20, 4<<20, 500*time.Millisecond, 500*time.Millisecond
	}
	// Default 4 readers x 8 keys: 32 object reads in flight, as fio's
	// iodepth 32.
	readers, perLoad := e.readers, e.perLoad
	sizes, err := throughputSizes(e)
	if err != nil {
		return nil, err
	}
	res := &result{Options: map[string]string{
		"bytes_per_run": fmtBytes(total),
		"bucket":        fmtBytes(bucketBytes) + " (one Offload call = one bucket)",
		"readers":       fmt.Sprintf("%d goroutines x %d keys per Load", readers, perLoad),
		"read_budget":   readBudget.String(),
		"compression":   "none",
	}}

	// For each object size: fio on the same directory (sequential write,
	// then random reads at the object size on the file it wrote), right
	// before the engine runs of that size, so that each ratio compares
	// figures taken minutes apart at most on a disk that may be shared.
	fr := newFioRefs(res)
	var figs []tpFigures
	for _, s := range sizes {
		if err := fr.run(ctx, e.dir, s, s == sizes[0], total, bucketBytes, fioRuntime); err != nil {
			return nil, err
		}
		for _, b := range tierBackends {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			dir := filepath.Join(e.dir, b.name+"-"+sizeName(s))
			f, err := tpRun(ctx, e, b, dir, s, total, bucketBytes, readBudget, readers, perLoad)
			os.RemoveAll(dir)
			if err != nil {
				return nil, fmt.Errorf("%s %s: %w", b.name, sizeName(s), err)
			}
			figs = append(figs, f)
		}
	}
	res.Tables = append(res.Tables, throughputTable(figs, sizes, fr))
	if len(fr.table.Rows) > 0 {
		res.Tables = append(res.Tables, fr.table)
	}
	res.Notes = append(res.Notes,
		"write = Offload calls of one bucket each (encode, write, fdatasync, synced index commit); fio fdatasyncs at the same bucket size",
		"reads follow posix_fadvise(DONTNEED) of every file, so the buffered backend starts cold too")
	res.Elapsed = time.Since(start).Seconds()
	res.charts = func(dir string) ([]string, error) { return throughputCharts(dir, figs, sizes, fr) }
	return res, nil
}

// throughputSizes returns the object sizes of the run: --sizes, the test
// override, or 64K, 256K and 1M.
func throughputSizes(e *env) ([]int64, error) {
	sizes := []int64{64 << 10, 256 << 10, 1 << 20}
	if e.sizes != nil {
		sizes = e.sizes
	}
	if e.sizesFlag != "" {
		sizes = nil
		for _, f := range strings.Split(e.sizesFlag, ",") {
			n, err := parseSize(f)
			if err != nil || n <= 0 || n%4096 != 0 {
				return nil, fmt.Errorf("%w: --sizes: %q is not a positive multiple of 4K (e.g. 64K,1M)", errUsage, f)
			}
			sizes = append(sizes, n)
		}
	}
	return sizes, nil
}

// fioRefs holds fio's figures per object size, and the table of them.
type fioRefs struct {
	res   *result
	w, r  map[int64]*fio.Result
	table *table
	err   error // fio missing or failing here: absolute figures only
}

func newFioRefs(res *result) *fioRefs {
	fr := &fioRefs{res: res, w: map[int64]*fio.Result{}, r: map[int64]*fio.Result{},
		table: &table{Title: "fio on the same directory, run before each size group (commands below)",
			Columns: []string{"job", "for size", "MB/s", "IOPS", "p50 ms", "p99 ms"}}}
	_, version, err := fio.Available()
	if err != nil {
		res.Notes = append(res.Notes, "fio is not installed: absolute figures only (install fio for ratios)")
		fr.err = err
	} else {
		res.Options["fio"] = version
	}
	return fr
}

// run measures fio's write and randread at size s, unless fio is missing
// or already failed here. Only a cancelled ctx is an error.
func (fr *fioRefs) run(ctx context.Context, dir string, s int64, first bool, total, bucketBytes int64, runtime time.Duration) error {
	if fr.err != nil {
		return nil
	}
	w, r, err := fioPair(ctx, filepath.Join(dir, "fio"), s, total, bucketBytes, runtime)
	switch {
	case err != nil && ctx.Err() != nil:
		return ctx.Err()
	case err != nil:
		// fio is there but cannot run here (no io_uring, no O_DIRECT on
		// this file system...): say so, carry on with absolute figures.
		fr.res.Notes = append(fr.res.Notes, fmt.Sprintf("fio failed on this directory, absolute figures only: %v", err))
		fr.err = err
		return nil
	}
	fr.w[s], fr.r[s] = w, r
	fr.table.add("write 1M qd16 direct", sizeName(s), w.BytesPerSec/mb, w.IOPS, ms(w.LatP50), ms(w.LatP99))
	fr.table.add("randread "+sizeName(s)+" qd32 direct", sizeName(s), r.BytesPerSec/mb, r.IOPS, ms(r.LatP50), ms(r.LatP99))
	if first {
		fr.res.Notes = append(fr.res.Notes, "fio: "+joinArgs(w.Args))
	}
	fr.res.Notes = append(fr.res.Notes, "fio: "+joinArgs(r.Args))
	return nil
}

// throughputTable is the main table: engine figures and their ratios to fio.
func throughputTable(figs []tpFigures, sizes []int64, fr *fioRefs) *table {
	t := &table{
		Title: "tier engine Offload (write) and Load (random read); x fio = engine / fio",
		Columns: []string{"backend", "size", "write MB/s", "write x fio", "read MB/s", "read IOPS", "read x fio",
			"offload p50 ms", "offload p99 ms", "load p50 ms", "load p99 ms"},
	}
	for _, f := range figs {
		var wx, rx any
		for _, s := range sizes {
			if sizeName(s) == f.size && fr.r[s] != nil {
				wx = ratio(f.writeMBps, fr.w[s].BytesPerSec/mb)
				rx = ratio(f.readMBps, fr.r[s].BytesPerSec/mb)
			}
		}
		name := f.backend
		if f.actual != "" && f.actual != f.backend {
			name += " (as " + f.actual + ")"
		}
		t.add(name, f.size, f.writeMBps, wx, f.readMBps, f.readIOPS, rx, f.offP50, f.offP99, f.loadP50, f.loadP99)
	}
	return t
}

// throughputCharts draws the write and read bar charts into dir.
func throughputCharts(dir string, figs []tpFigures, sizes []int64, fr *fioRefs) ([]string, error) {
	var groups []string
	for _, s := range sizes {
		groups = append(groups, sizeName(s))
	}
	var ws, rs []series
	for _, b := range tierBackends {
		sw, sr := series{name: b.name}, series{name: b.name}
		for _, g := range groups {
			vw, vr := math.NaN(), math.NaN()
			for _, f := range figs {
				if f.backend == b.name && f.size == g {
					vw, vr = f.writeMBps, f.readMBps
				}
			}
			sw.values = append(sw.values, vw)
			sr.values = append(sr.values, vr)
		}
		ws = append(ws, sw)
		rs = append(rs, sr)
	}
	var wref, rref []refLine
	if len(fr.w) > 0 {
		l := refLine{name: "fio write 1M qd16 (run before the group)"}
		r := refLine{name: "fio randread at the size, qd32"}
		for _, s := range sizes {
			lv, rv := math.NaN(), math.NaN()
			if fr.w[s] != nil {
				lv, rv = fr.w[s].BytesPerSec/mb, fr.r[s].BytesPerSec/mb
			}
			l.values = append(l.values, lv)
			r.values = append(r.values, rv)
		}
		wref, rref = []refLine{l}, []refLine{r}
	}
	p1 := filepath.Join(dir, "throughput-write.png")
	if err := groupedBars(p1, "throughput: Offload per object size and backend", "MB/s", groups, ws, wref); err != nil {
		return nil, err
	}
	p2 := filepath.Join(dir, "throughput-read.png")
	if err := groupedBars(p2, "throughput: random Load per object size and backend", "MB/s", groups, rs, rref); err != nil {
		return nil, err
	}
	return []string{p1, p2}, nil
}

// fioPair runs fio's sequential write (1 MiB, qd16, O_DIRECT, fdatasync at
// the bucket size) and then random reads at size (qd32, O_DIRECT) on the
// written file, in dir, and removes the file.
func fioPair(ctx context.Context, dir string, size, total, bucketBytes int64, runtime time.Duration) (*fio.Result, *fio.Result, error) {
	if err := mkdir(dir); err != nil {
		return nil, nil, err
	}
	defer os.RemoveAll(dir)
	w, err := fio.Run(ctx, fio.Job{Name: "seqwrite", Dir: dir, FileName: "data", RW: "write", BlockSize: 1 << 20,
		IODepth: 16, Direct: true, Size: total, FdatasyncEvery: int(max(bucketBytes>>20, 1)), EndFsync: true})
	if err != nil {
		return nil, nil, err
	}
	r, err := fio.Run(ctx, fio.Job{Name: "randread" + sizeName(size), Dir: dir, FileName: "data", RW: "randread",
		BlockSize: size, IODepth: 32, Direct: true, Size: total, Runtime: runtime})
	if err != nil {
		return nil, nil, err
	}
	return &w, &r, nil
}

func joinArgs(a []string) string {
	var b bytes.Buffer
	for i, s := range a {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(s)
	}
	return b.String()
}

func tpRun(ctx context.Context, e *env, tb tierBackend, dir string, size, total, bucketBytes int64,
	readBudget time.Duration, readers, perLoad int) (tpFigures, error) {
	f := tpFigures{backend: tb.name, size: sizeName(size)}
	log := quietLogger()
	be, err := tb.open(filepath.Join(dir, "buckets"), log)
	if err != nil {
		return f, err
	}
	f.actual = be.Name()
	eng, err := tier.Open(dir, tier.Options{Backend: be, Logger: log, BucketBytesLimit: bucketBytes})
	if err != nil {
		be.Close()
		return f, err
	}
	defer eng.Close()
	n := int(total / size)
	per := int(min(int64(500), bucketBytes/size))
	vs := newValueSource(int(size), uint64(size)+1)
	keys := make([][]byte, n)
	for i := range keys {
		keys[i] = fmt.Appendf(nil, "tp/%s/%08d", sizeName(size), i)
	}
	notify := func(context.Context, []tier.Committed) error { return nil }
	bar := e.progress(fmt.Sprintf("throughput %s %s offload", tb.name, sizeName(size)), int64(n))
	var olat latencies
	t0 := time.Now()
	for i := 0; i < n; i += per {
		end := min(i+per, n)
		tasks := make([]tier.Task, 0, end-i)
		for j := i; j < end; j++ {
			tasks = append(tasks, tier.Task{Key: keys[j], Value: vs.value(j)})
		}
		c0 := time.Now()
		out := eng.Offload(ctx, tasks, notify)
		olat = append(olat, time.Since(c0))
		for _, o := range out {
			if o.Status != tier.Persisted {
				bar.Finish()
				return f, fmt.Errorf("offload %s: %s: %w", o.Key, o.Status, o.Err)
			}
		}
		bar.Add(end - i)
	}
	write := time.Since(t0)
	bar.Finish()
	f.objects = n
	f.writeMBps = mbps(int64(n)*size, write)
	f.offP50, f.offP99 = ms(olat.pct(50)), ms(olat.pct(99))

	dropCache(dir)
	b := e.progress(fmt.Sprintf("throughput %s %s load", tb.name, sizeName(size)), int64(n))
	done, llat, read, err := readPhase(ctx, n, readers, perLoad, 11, time.Now().Add(readBudget), b,
		func(ctx context.Context, objs []int) error {
			batch := make([][]byte, len(objs))
			for j, o := range objs {
				batch[j] = keys[o]
			}
			for j, r := range eng.Load(ctx, batch) {
				if r.Err != nil {
					return fmt.Errorf("load %s: %w", batch[j], r.Err)
				}
				if !bytes.Equal(r.Value, vs.value(objs[j])) {
					return fmt.Errorf("%w: %s", errVerify, batch[j])
				}
			}
			return nil
		})
	if err != nil {
		return f, err
	}
	f.readObjects = int(done)
	f.readMBps = mbps(done*size, read)
	f.readIOPS = float64(done) / read.Seconds()
	f.loadP50, f.loadP99 = ms(llat.pct(50)), ms(llat.pct(99))
	if st := eng.Stats(); st.ChecksumErrors != 0 {
		return f, fmt.Errorf("%w: %d checksum errors", errVerify, st.ChecksumErrors)
	}
	return f, nil
}
