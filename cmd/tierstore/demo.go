package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/tierstore/tierstore/client"
	"github.com/tierstore/tierstore/embedded"
	"github.com/tierstore/tierstore/internal/units"
)

// demoResult is what the demo measured; PASS needs every check to hold.
type demoResult struct {
	objects, size     int
	putDRAMBytes      int64
	ssdBytes          int64
	dramAfterEvict    int64
	ssdAfterEvict     int64
	dropped           int64
	buckets           int64
	reads             client.ReadStats
	matched           int
	writeBytes        int64
	writeDur, readDur time.Duration
	readBytes         int64
	backend, dir      string
	failures          []string
}

func (r *demoResult) failf(format string, a ...any) {
	r.failures = append(r.failures, fmt.Sprintf(format, a...))
}

func throughput(n int64, d time.Duration) string {
	if d <= 0 {
		return "n/a"
	}
	return fmt.Sprintf("%.1f MiB/s (%s in %v)", float64(n)/float64(1<<20)/d.Seconds(), units.Human(n), d.Round(time.Microsecond))
}

func runDemo(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("demo")
	dir := fs.String("dir", "", "SSD directory (created if missing; default: a temporary directory, removed afterwards)")
	objects := fs.Int("objects", 11, "number of objects (1..100000, at most 8GiB in total)")
	size := fs.String("size", "1MiB", "object size (1MiB, 256KiB or bytes; 1 byte .. 64MiB)")
	backendName := fs.String("backend", "uring", "bucket I/O backend: uring (falls back to pwrite) or pwrite")
	timeout := fs.Duration("timeout", 2*time.Minute, "bound on the whole demo (> 0)")
	verbose := fs.Bool("v", false, "log the master's and node's activity to stderr")
	if code, done := parseCmd(fs, "[--dir D] [--objects N] [--size S] [--backend B] [--timeout T] [-v]", args, stdout, stderr); done {
		return code
	}
	bad := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "tierstore demo: %s\n", fmt.Sprintf(format, a...))
		return 2
	}
	if fs.NArg() > 0 {
		return bad("unexpected argument %q (the demo takes only flags)", fs.Arg(0))
	}
	sz, err := units.Parse(*size)
	if err != nil {
		return bad("--size: %v", err)
	}
	if sz <= 0 || sz > 64<<20 {
		return bad("--size: %s is outside 1 byte .. 64MiB", *size)
	}
	if *objects <= 0 || *objects > 100000 || int64(*objects)*sz > 8<<30 {
		return bad("--objects %d: want 1..100000 and at most 8GiB in total", *objects)
	}
	switch *backendName {
	case "uring", "pwrite":
	default:
		return bad("--backend: %q is not one of uring, pwrite", *backendName)
	}
	if *timeout <= 0 {
		return bad("--timeout: must be positive, got %v", *timeout)
	}
	if *dir != "" {
		if st, err := os.Stat(*dir); err == nil && !st.IsDir() {
			return bad("--dir: %q is not a directory", *dir)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	res, err := demo(ctx, *dir, *objects, int(sz), *backendName, *verbose, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "tierstore demo: %v\n", err)
		fmt.Fprintln(stdout, "FAIL")
		return 1
	}
	printDemo(stdout, res)
	if len(res.failures) > 0 {
		return 1
	}
	return 0
}

func demo(ctx context.Context, dir string, objects, size int, backendName string, verbose bool, stderr io.Writer) (*demoResult, error) {
	cfg, err := demoConfig(dir, objects, size, backendName, verbose, stderr)
	if err != nil {
		return nil, err
	}
	e, err := embedded.New(ctx, cfg)
	if err != nil {
		return nil, err
	}
	defer e.Close()
	r := &demoResult{objects: objects, size: size, backend: e.Node.Stats().Backend, dir: e.SSDDir}
	keys, sums, err := r.put(ctx, e)
	if err != nil {
		return nil, err
	}
	if err := r.offload(ctx, e); err != nil {
		return nil, err
	}
	if err := r.evict(ctx, e, keys); err != nil {
		return nil, err
	}
	r.readBack(ctx, e, keys, sums)
	r.check(int64(objects) * int64(size))
	return r, nil
}

// demoConfig is the embedded configuration of the demo: room for every
// object at well under the DRAM eviction watermark, the SSD tier in dir
// (a temporary directory when "").
func demoConfig(dir string, objects, size int, backendName string, verbose bool, stderr io.Writer) (embedded.Config, error) {
	cfg := embedded.DefaultConfig()
	level := slog.LevelWarn
	if verbose {
		level = slog.LevelInfo
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
	cfg.Master.Logger = log
	cfg.Node.Logger = log
	cfg.Node.Backend = backendName
	total := int64(objects) * int64(size)
	cfg.Node.Memory = max(64<<20, 2*total+16<<20)
	if dir != "" {
		abs, err := filepath.Abs(dir)
		if err != nil {
			return cfg, fmt.Errorf("--dir %q: %w", dir, err)
		}
		if err := os.MkdirAll(abs, 0o755); err != nil {
			return cfg, fmt.Errorf("--dir %q: %w", dir, err)
		}
		cfg.Node.SSDDir = abs
	}
	return cfg, nil
}

// put stores the objects with known SHA-256. Keys are unique to this run
// so that a reused --dir cannot satisfy the checks with old objects.
func (r *demoResult) put(ctx context.Context, e *embedded.Embedded) ([]string, [][32]byte, error) {
	run := make([]byte, 4)
	_, _ = rand.Read(run)
	keys := make([]string, r.objects)
	sums := make([][32]byte, r.objects)
	for i := range keys {
		keys[i] = fmt.Sprintf("demo-%x-%04d", run, i)
		val := make([]byte, r.size)
		_, _ = rand.Read(val)
		sums[i] = sha256.Sum256(val)
		if err := e.Client.Put(ctx, keys[i], val); err != nil {
			return nil, nil, fmt.Errorf("put %s: %w", keys[i], err)
		}
	}
	st, err := e.Client.Stats(ctx)
	if err != nil {
		return nil, nil, err
	}
	r.putDRAMBytes = st.DRAMBytes
	return keys, sums, nil
}

// offload waits until every object is on SSD, running offload rounds now
// rather than waiting for heartbeat ticks.
func (r *demoResult) offload(ctx context.Context, e *embedded.Embedded) error {
	before := e.Node.Stats()
	start := time.Now()
	for {
		e.Node.OffloadNow()
		ns := e.Node.Stats()
		if ns.OffloadPersisted-before.OffloadPersisted >= int64(r.objects) {
			break
		}
		if ctx.Err() != nil {
			return fmt.Errorf("only %d of %d objects reached SSD before the deadline (%d failed tasks)",
				ns.OffloadPersisted-before.OffloadPersisted, r.objects, ns.OffloadFailed-before.OffloadFailed)
		}
		time.Sleep(20 * time.Millisecond) // poll interval of a bounded wait
	}
	r.writeDur = time.Since(start)
	after := e.Node.Stats()
	r.writeBytes = after.Tier.BytesWritten - before.Tier.BytesWritten
	r.buckets = after.Tier.BucketsWritten - before.Tier.BucketsWritten
	st, err := e.Client.Stats(ctx)
	if err != nil {
		return err
	}
	r.ssdBytes = st.SSDBytes
	return nil
}

// evict drops every DRAM replica (they all have an SSD replica now).
func (r *demoResult) evict(ctx context.Context, e *embedded.Embedded, keys []string) error {
	res, err := e.Client.EvictDRAM(ctx, keys, false)
	if err != nil {
		return err
	}
	r.dropped = res.Dropped
	st, err := e.Client.Stats(ctx)
	if err != nil {
		return err
	}
	r.dramAfterEvict, r.ssdAfterEvict = st.DRAMBytes, st.SSDBytes
	return nil
}

// readBack reads every object back and verifies its SHA-256.
func (r *demoResult) readBack(ctx context.Context, e *embedded.Embedded, keys []string, sums [][32]byte) {
	c := e.Client
	r0 := c.ReadStats()
	start := time.Now()
	for i, k := range keys {
		val, err := c.Get(ctx, k)
		if err != nil {
			r.failf("get %s: %v", k, err)
			continue
		}
		r.readBytes += int64(len(val))
		if sha256.Sum256(val) == sums[i] && len(val) == r.size {
			r.matched++
		} else {
			r.failf("get %s: SHA-256 mismatch", k)
		}
	}
	r.readDur = time.Since(start)
	r1 := c.ReadStats()
	r.reads = client.ReadStats{
		LocalDRAM: r1.LocalDRAM - r0.LocalDRAM, RemoteDRAM: r1.RemoteDRAM - r0.RemoteDRAM,
		LocalSSD: r1.LocalSSD - r0.LocalSSD, RemoteSSD: r1.RemoteSSD - r0.RemoteSSD,
		Fallbacks: r1.Fallbacks - r0.Fallbacks, ChecksumFailures: r1.ChecksumFailures - r0.ChecksumFailures,
	}
}

// check records every way the run fell short of the demo's promise.
func (r *demoResult) check(total int64) {
	objects := int64(r.objects)
	if r.dropped != objects {
		r.failf("evict dropped %d DRAM replicas, want %d", r.dropped, objects)
	}
	if r.dramAfterEvict != 0 {
		r.failf("%d DRAM bytes left after the evict", r.dramAfterEvict)
	}
	if r.ssdAfterEvict < total {
		r.failf("master counts %d SSD bytes, want at least %d", r.ssdAfterEvict, total)
	}
	if r.reads.LocalSSD != objects {
		r.failf("%d reads served from SSD, want %d", r.reads.LocalSSD, objects)
	}
	if r.buckets < 1 {
		r.failf("no bucket written")
	}
}

func printDemo(w io.Writer, r *demoResult) {
	var b bytes.Buffer
	fmt.Fprintf(&b, "tierstore demo: %d objects x %s, backend %s, SSD dir %s\n", r.objects, units.Human(int64(r.size)), r.backend, r.dir)
	row := func(name, format string, a ...any) { fmt.Fprintf(&b, "  %-28s %s\n", name, fmt.Sprintf(format, a...)) }
	row("objects", "%d", r.objects)
	row("bytes in DRAM after put", "%s", units.Human(r.putDRAMBytes))
	row("bytes on SSD (master)", "%s", units.Human(r.ssdBytes))
	row("buckets written", "%d", r.buckets)
	row("DRAM replicas dropped", "%d", r.dropped)
	row("bytes in DRAM after evict", "%s", units.Human(r.dramAfterEvict))
	row("reads: local/remote DRAM", "%d / %d", r.reads.LocalDRAM, r.reads.RemoteDRAM)
	row("reads: local/remote SSD", "%d / %d", r.reads.LocalSSD, r.reads.RemoteSSD)
	row("SSD write throughput", "%s", throughput(r.writeBytes, r.writeDur))
	row("SSD read throughput", "%s", throughput(r.readBytes, r.readDur))
	row("SHA-256 verified", "%d / %d", r.matched, r.objects)
	for _, f := range r.failures {
		fmt.Fprintf(&b, "  FAILED: %s\n", f)
	}
	if len(r.failures) == 0 {
		b.WriteString("PASS\n")
	} else {
		b.WriteString("FAIL\n")
	}
	_, _ = w.Write(b.Bytes())
}
