package main

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tierstore/tierstore/backend"
	"github.com/tierstore/tierstore/backend/pwrite"
	"github.com/tierstore/tierstore/backend/uring"
	"github.com/tierstore/tierstore/bench/internal/fio"
	"github.com/tierstore/tierstore/bucket"
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

// optionalBackends run only when --backends names them: variants of a
// backend's options to compare side by side in one run.
var optionalBackends = []tierBackend{
	// uring+direct without the read priority: bucket writes keep
	// WriteDepth writes in flight even while reads wait.
	{"uring+direct-noyield", func(dir string, log *slog.Logger) (backend.Backend, error) {
		return uring.Open(dir, uring.Options{Direct: true, Logger: log,
			WriteDepthUnderReads: uring.DefaultWriteDepth})
	}},
}

type tpFigures struct {
	backend, size  string
	actual         string // backend.Name() after fallbacks
	writeMBps      float64
	offP50, offP99 float64 // ms per Offload call (one bucket)
	objects        int
	loads          []loadFig
}

// loadFig is one random-read phase: readers goroutines calling LoadInto
// with perLoad keys each (reusable aligned buffers), optionally while an
// Offload stream writes a bucket every streamEvery.
type loadFig struct {
	mode             string
	mbps, iops       float64
	p50, p99         float64 // ms per LoadInto call
	objects          int
	streamed         int // buckets offloaded during the phase
	streamP99        float64
	readers, perLoad int
	// timed: the phase reads random keys (with repeats) for this long,
	// instead of every key once in a random order.
	timed time.Duration
	// async: each reader keeps perLoad single-key LoadAsync calls in
	// flight (refilled as each completes) instead of calling LoadInto.
	async bool
}

// streamPhase is how long the timed phases around the Offload stream last.
func streamPhase(e *env) time.Duration {
	if e.quick {
		return time.Second
	}
	return 5 * time.Second
}

// streamEvery is the period of the concurrent Offload stream, and
// streamBucket the size of each of its buckets.
const (
	streamEvery  = 200 * time.Millisecond
	streamBucket = 8 << 20
)

func quietLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }

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
	backends, err := throughputBackends(e)
	if err != nil {
		return nil, err
	}
	fr := newFioRefs(res)
	var figs []tpFigures
	for _, s := range sizes {
		if err := fr.run(ctx, e.dir, s, s == sizes[0], total, bucketBytes, fioRuntime); err != nil {
			return nil, err
		}
		for _, b := range backends {
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
	wa, err := writeAmp(ctx, e, backends[0], min(total, 64<<20))
	if err != nil {
		return nil, err
	}
	res.Tables = append(res.Tables, wa)
	res.Notes = append(res.Notes,
		"write = Offload calls of one bucket each (encode, write, fdatasync, synced index commit); fio fdatasyncs at the same bucket size",
		fmt.Sprintf("load RxK = R goroutines calling LoadInto with K keys each into reusable aligned buffers (latency per call); RxK async = R goroutines each keeping K single-key LoadAsync calls in flight (latency per key); + offload stream = one %s bucket offloaded every %v meanwhile (buckets written, Offload p99)", fmtBytes(streamBucket), streamEvery),
		"reads follow posix_fadvise(DONTNEED) of every file, so the buffered backend starts cold too")
	res.Elapsed = time.Since(start).Seconds()
	res.charts = func(dir string) ([]string, error) { return throughputCharts(dir, figs, sizes, fr) }
	return res, nil
}

// throughputBackends returns the backends of --backends (default all).
func throughputBackends(e *env) ([]tierBackend, error) {
	if e.backends == "" {
		return tierBackends, nil
	}
	var out []tierBackend
next:
	for _, name := range strings.Split(e.backends, ",") {
		for _, b := range slices.Concat(tierBackends, optionalBackends) {
			if b.name == strings.TrimSpace(name) {
				out = append(out, b)
				continue next
			}
		}
		return nil, fmt.Errorf("%w: --backends: unknown backend %q (valid: uring+direct, pwrite, pwrite+direct, uring+direct-noyield)", errUsage, name)
	}
	return out, nil
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
		Title: "tier engine Offload (write) and LoadInto (random read); x fio = engine / fio; fio p99 is per read at iodepth 32",
		Columns: []string{"backend", "size", "load", "write MB/s", "write x fio", "read MB/s", "read IOPS", "read x fio",
			"offload p50 ms", "offload p99 ms", "load p50 ms", "load p99 ms", "fio p99 ms"},
	}
	for _, f := range figs {
		var w, r *fio.Result
		for _, s := range sizes {
			if sizeName(s) == f.size && fr.r[s] != nil {
				w, r = fr.w[s], fr.r[s]
			}
		}
		name := f.backend
		if f.actual != "" && f.actual != f.backend {
			name += " (as " + f.actual + ")"
		}
		// The write figures repeat on every load row of the same run.
		for _, l := range f.loads {
			var wx, rx, fp any
			if r != nil {
				wx, rx, fp = ratio(f.writeMBps, w.BytesPerSec/mb), ratio(l.mbps, r.BytesPerSec/mb), ms(r.LatP99)
			}
			t.add(name, f.size, l.mode, f.writeMBps, wx, l.mbps, l.iops, rx, f.offP50, f.offP99, l.p50, l.p99, fp)
		}
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
				if f.backend == b.name && f.size == g && len(f.loads) > 0 {
					vw, vr = f.writeMBps, f.loads[0].mbps
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
	// One Offload call = one bucket of bucketBytes, as fio fdatasyncs every
	// bucketBytes: the keys limit must not cut buckets of small objects.
	eng, err := tier.Open(dir, tier.Options{Backend: be, Logger: log, BucketBytesLimit: bucketBytes,
		BucketKeysLimit: int(max(bucketBytes/size, 1))})
	if err != nil {
		be.Close()
		return f, err
	}
	defer eng.Close()
	n := int(total / size)
	vs := newValueSource(int(size), uint64(size)+1)
	keys := make([][]byte, n)
	for i := range keys {
		keys[i] = fmt.Appendf(nil, "tp/%s/%08d", sizeName(size), i)
	}
	if err := tpWrite(ctx, e, eng, &f, keys, vs, size, bucketBytes); err != nil {
		return f, err
	}
	modes := []loadFig{{readers: readers, perLoad: perLoad}, {readers: readers, perLoad: perLoad, async: true}}
	if readers != 32 || perLoad != 1 {
		modes = append(modes, loadFig{readers: 32, perLoad: 1})
	}
	if strings.HasPrefix(tb.name, "uring+direct") {
		// Load latency with and without an Offload stream, each for a
		// fixed time over random keys.
		modes = append(modes, loadFig{readers: 32, perLoad: 1, timed: streamPhase(e)},
			loadFig{readers: 32, perLoad: 1, timed: streamPhase(e), streamed: -1})
	}
	for _, m := range modes {
		dropCache(dir)
		load := tpLoad
		if m.async {
			load = tpLoadAsync
		}
		l, err := load(ctx, e, eng, tb.name, keys, vs, size, readBudget, m)
		if err != nil {
			return f, err
		}
		f.loads = append(f.loads, l)
	}
	if st := eng.Stats(); st.ChecksumErrors != 0 {
		return f, fmt.Errorf("%w: %d checksum errors", errVerify, st.ChecksumErrors)
	}
	return f, nil
}

// tpWrite offloads keys in calls of one bucket each and records the write
// figures in f.
func tpWrite(ctx context.Context, e *env, eng *tier.Engine, f *tpFigures, keys [][]byte, vs *valueSource, size, bucketBytes int64) error {
	n := len(keys)
	// A bucket of bucketBytes holds a little less than bucketBytes/size
	// objects (header, trailer): one call is one full bucket.
	per := int(max((bucketBytes-2*bucket.Align-int64(len(keys[0])+bucket.EntryFixedSize)*(bucketBytes/size))/size, 1))
	notify := func(context.Context, []tier.Committed) error { return nil }
	bar := e.progress(fmt.Sprintf("throughput %s %s offload", f.backend, f.size), int64(n))
	defer bar.Finish()
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
				return fmt.Errorf("offload %s: %s: %w", o.Key, o.Status, o.Err)
			}
		}
		bar.Add(end - i)
	}
	f.objects = n
	f.writeMBps = mbps(int64(n)*size, time.Since(t0))
	f.offP50, f.offP99 = ms(olat.pct(50)), ms(olat.pct(99))
	return nil
}

// tpLoad runs one random-read phase of mode m over keys: m.readers
// goroutines calling LoadInto with m.perLoad keys and reusable aligned
// buffers, every value compared with what was written. With m.streamed < 0
// an Offload stream writes a bucket of streamBucket bytes every streamEvery
// meanwhile.
func tpLoad(ctx context.Context, e *env, eng *tier.Engine, backendName string, keys [][]byte, vs *valueSource,
	size int64, readBudget time.Duration, m loadFig) (loadFig, error) {
	m.mode = fmt.Sprintf("%dx%d", m.readers, m.perLoad)
	stream := m.streamed < 0
	if stream {
		m.mode += " + offload stream"
	}
	bufs := make(chan [][]byte, m.readers)
	for range m.readers {
		set := make([][]byte, m.perLoad)
		for i := range set {
			set[i] = tier.NewBuffer(int(size))
		}
		bufs <- set
	}
	sctx, stop := context.WithCancel(ctx)
	streamDone := make(chan streamResult, 1)
	if stream {
		go func() { streamDone <- offloadStream(sctx, eng, vs, size) }()
	}
	if m.timed > 0 {
		m.mode += fmt.Sprintf(" for %v", m.timed)
	}
	phase := readPhase
	if m.timed > 0 {
		phase = timedPhase(m.timed)
	}
	b := e.progress(fmt.Sprintf("throughput %s %s load %s", backendName, sizeName(size), m.mode), int64(len(keys)))
	done, llat, read, err := phase(ctx, len(keys), m.readers, m.perLoad, 11, time.Now().Add(readBudget), b,
		func(ctx context.Context, objs []int) error {
			set := <-bufs
			defer func() { bufs <- set }()
			batch := make([][]byte, len(objs))
			for j, o := range objs {
				batch[j] = keys[o]
			}
			for j, r := range eng.LoadInto(ctx, batch, set[:len(objs)]) {
				if r.Err != nil {
					return fmt.Errorf("load %s: %w", batch[j], r.Err)
				}
				if !bytes.Equal(r.Value, vs.value(objs[j])) {
					return fmt.Errorf("%w: %s", errVerify, batch[j])
				}
			}
			return nil
		})
	stop()
	if stream {
		sr := <-streamDone
		if err == nil {
			err = sr.err
		}
		m.streamed, m.streamP99 = sr.buckets, ms(sr.lat.pct(99))
		m.mode += fmt.Sprintf(" (%d buckets, p99 %.0f ms)", m.streamed, m.streamP99)
	}
	if err != nil {
		return m, err
	}
	m.objects = int(done)
	m.mbps = mbps(done*size, read)
	m.iops = float64(done) / read.Seconds()
	m.p50, m.p99 = ms(llat.pct(50)), ms(llat.pct(99))
	return m, nil
}

type streamResult struct {
	buckets int
	lat     latencies
	err     error
}

// offloadStream offloads one bucket of new objects (streamBucket bytes)
// every streamEvery until ctx ends.
func offloadStream(ctx context.Context, eng *tier.Engine, vs *valueSource, size int64) streamResult {
	var r streamResult
	per := int(max(streamBucket/size, 1))
	t := time.NewTicker(streamEvery)
	defer t.Stop()
	for n := 0; ; n++ {
		select {
		case <-ctx.Done():
			return r
		case <-t.C:
		}
		tasks := make([]tier.Task, per)
		for i := range tasks {
			tasks[i] = tier.Task{Key: fmt.Appendf(nil, "stream/%d/%d", n, i), Value: vs.value(n*per + i)}
		}
		c0 := time.Now()
		for _, o := range eng.Offload(context.WithoutCancel(ctx), tasks, nil) {
			if o.Status != tier.Persisted {
				r.err = fmt.Errorf("stream offload %s: %s: %w", o.Key, o.Status, o.Err)
				return r
			}
		}
		r.lat = append(r.lat, time.Since(c0))
		r.buckets++
	}
}

// tpLoadAsync is tpLoad's every-key-once phase with LoadAsync: m.readers
// goroutines each keep m.perLoad single-key loads in flight, starting the
// next as soon as one completes, into reusable aligned buffers. Latencies
// are per key, submission to completion.
func tpLoadAsync(ctx context.Context, e *env, eng *tier.Engine, backendName string, keys [][]byte, vs *valueSource,
	size int64, readBudget time.Duration, m loadFig) (loadFig, error) {
	m.mode = fmt.Sprintf("%dx%d async", m.readers, m.perLoad)
	n := len(keys)
	order := rand.New(rand.NewPCG(uint64(n), 12)).Perm(n)
	deadline := time.Now().Add(readBudget)
	var next, count atomic.Int64
	var mu sync.Mutex // guards lat and first
	var lat latencies
	var first error
	b := e.progress(fmt.Sprintf("throughput %s %s load %s", backendName, sizeName(size), m.mode), int64(n))
	var wg sync.WaitGroup
	t0 := time.Now()
	for range m.readers {
		wg.Go(func() {
			slots := make(chan []byte, m.perLoad)
			for range m.perLoad {
				slots <- tier.NewBuffer(int(size))
			}
			var inflight sync.WaitGroup
			for ctx.Err() == nil && time.Now().Before(deadline) {
				i := int(next.Add(1) - 1)
				if i >= n {
					break
				}
				buf := <-slots
				obj := order[i]
				c0 := time.Now()
				inflight.Add(1)
				eng.LoadAsync(ctx, [][]byte{keys[obj]}, [][]byte{buf}, func(res []tier.LoadResult) {
					defer inflight.Done()
					d := time.Since(c0)
					err := res[0].Err
					if err == nil && !bytes.Equal(res[0].Value, vs.value(obj)) {
						err = fmt.Errorf("%w: %s", errVerify, keys[obj])
					}
					mu.Lock()
					lat = append(lat, d)
					first = cmp.Or(first, err)
					mu.Unlock()
					count.Add(1)
					b.Add(1)
					slots <- buf
				})
			}
			inflight.Wait()
		})
	}
	wg.Wait()
	read := time.Since(t0)
	b.Finish()
	if err := cmp.Or(first, ctx.Err()); err != nil {
		return m, err
	}
	done := count.Load()
	m.objects = int(done)
	m.mbps = mbps(done*size, read)
	m.iops = float64(done) / read.Seconds()
	m.p50, m.p99 = ms(lat.pct(50)), ms(lat.pct(99))
	return m, nil
}

// timedPhase returns a read phase with readPhase's signature that reads
// random objects (repeats allowed) for d, ignoring the deadline.
func timedPhase(d time.Duration) func(ctx context.Context, n, readers, perCall int, seed uint64, _ time.Time, b bar,
	read func(ctx context.Context, objs []int) error) (int64, latencies, time.Duration, error) {
	return func(ctx context.Context, n, readers, perCall int, seed uint64, _ time.Time, b bar,
		read func(ctx context.Context, objs []int) error) (int64, latencies, time.Duration, error) {
		defer b.Finish()
		var count atomic.Int64
		var mu sync.Mutex // guards lat and first
		var lat latencies
		var first error
		var wg sync.WaitGroup
		t0 := time.Now()
		end := t0.Add(d)
		for r := range readers {
			wg.Go(func() {
				rng := rand.New(rand.NewPCG(seed, uint64(r)))
				objs := make([]int, perCall)
				var mine latencies
				for ctx.Err() == nil && time.Now().Before(end) {
					for i := range objs {
						objs[i] = rng.IntN(n)
					}
					c0 := time.Now()
					err := read(ctx, objs)
					mine = append(mine, time.Since(c0))
					if err != nil {
						mu.Lock()
						first = cmp.Or(first, err)
						mu.Unlock()
						break
					}
					count.Add(int64(perCall))
				}
				mu.Lock()
				lat = append(lat, mine...)
				mu.Unlock()
			})
		}
		wg.Wait()
		return count.Load(), lat, time.Since(t0), cmp.Or(first, ctx.Err())
	}
}

// waSizes are the object sizes of the write amplification table.
var waSizes = []int64{64 << 10, 16 << 10, 4 << 10, 1 << 10}

// writeAmp measures, per object size, the bytes the process makes the
// device write (/proc/self/io write_bytes: bucket files, pebble's WAL,
// flushes and compactions, up to the tier's Close) against the value bytes
// offloaded, with backend tb.
func writeAmp(ctx context.Context, e *env, tb tierBackend, total int64) (*table, error) {
	t := &table{
		Title:   "write amplification per object size (" + tb.name + "): device bytes written / value bytes; the bucket part is the 4 KiB alignment floor, the index part pebble",
		Columns: []string{"size", "objects", "value MiB", "bucket MiB", "index+WAL MiB", "bucket x", "index x", "total x", "index B/object"},
	}
	for _, size := range waSizes {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		dir := filepath.Join(e.dir, "wa-"+sizeName(size))
		row, err := waRun(ctx, tb, dir, size, total)
		os.RemoveAll(dir)
		if err != nil {
			return nil, fmt.Errorf("write amplification %s: %w", sizeName(size), err)
		}
		t.add(row...)
	}
	return t, nil
}

func waRun(ctx context.Context, tb tierBackend, dir string, size, total int64) ([]any, error) {
	n := int(total / size)
	vs := newValueSource(int(size), uint64(size)+3)
	before, err := procWriteBytes()
	if err != nil {
		return nil, err
	}
	be, err := tb.open(filepath.Join(dir, "buckets"), quietLogger())
	if err != nil {
		return nil, err
	}
	eng, err := tier.Open(dir, tier.Options{Backend: be, Logger: quietLogger()})
	if err != nil {
		be.Close()
		return nil, err
	}
	const per = 500
	for i := 0; i < n; i += per {
		tasks := make([]tier.Task, 0, per)
		for j := i; j < min(i+per, n); j++ {
			tasks = append(tasks, tier.Task{Key: fmt.Appendf(nil, "wa/%s/%08d", sizeName(size), j), Value: vs.value(j)})
		}
		for _, o := range eng.Offload(ctx, tasks, nil) {
			if o.Status != tier.Persisted {
				eng.Close()
				return nil, fmt.Errorf("offload %s: %s: %w", o.Key, o.Status, o.Err)
			}
		}
	}
	buckets := eng.Stats().BytesWritten
	if err := eng.Close(); err != nil {
		return nil, err
	}
	after, err := procWriteBytes()
	if err != nil {
		return nil, err
	}
	value := int64(n) * size
	device := after - before
	index := max(device-buckets, 0)
	const mib = 1 << 20
	return []any{sizeName(size), n, float64(value) / mib, float64(buckets) / mib, float64(index) / mib,
		float64(buckets) / float64(value), float64(index) / float64(value), float64(device) / float64(value),
		float64(index) / float64(n)}, nil
}

// procWriteBytes is this process's write_bytes from /proc/self/io: bytes it
// caused to be sent to storage.
func procWriteBytes() (int64, error) {
	b, err := os.ReadFile("/proc/self/io")
	if err != nil {
		return 0, fmt.Errorf("%w: /proc/self/io: %v", errUnavailable, err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "write_bytes: "); ok {
			return strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		}
	}
	return 0, fmt.Errorf("%w: no write_bytes in /proc/self/io", errUnavailable)
}
