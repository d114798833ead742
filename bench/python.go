package main

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/tierstore/tierstore/client"
)

func init() {
	register(scenario{
		name: "python",
		help: "the Python package (MooncakeDistributedStore via python3 -m tierstore.bench) against the Go client, same cluster, same run",
		run:  runPython,
	})
}

// pyFigures are the figures of one pass, in MB/s, by name; the Python
// side prints the same names (python/tierstore/bench.py).
type pyFigures map[string]float64

// The figures, in print order.
var pyFigureNames = []string{
	"batch_get_into 128 x 2 MiB",
	"batch_put_from 128 x 2 MiB",
	"get_into 1 MiB",
	"get_into 1 MiB, 8 threads",
}

// pyGoOnly are Go figures without a Python counterpart: the plain batch
// calls, beside the parts forms the Python calls reach.
var pyGoOnly = []string{
	"Go BatchGetInto 128 x 2 MiB",
	"Go BatchPut 128 x 2 MiB",
}

// pyBenchKeys are the keys both sides read: bench.py's names.
const (
	pyBatchKeys  = 128
	pyBatchSize  = 2 << 20
	pySmallSize  = 1 << 20
	pyThreads    = 8
	pyPasses     = 3
	pyPython     = "/usr/bin/python3"
	pyLibRelPath = "python/tierstore/_lib/libtierstore.so"
)

func pyGetKey(i int) string   { return fmt.Sprintf("pybench/get/%d", i) }
func pySmallKey(i int) string { return fmt.Sprintf("pybench/small/%d", i) }

func runPython(ctx context.Context, e *env) (*result, error) {
	started := time.Now()
	d := 3 * time.Second
	if e.quick {
		d = 500 * time.Millisecond
	}
	repo, err := pyRepo()
	if err != nil {
		return nil, err
	}
	if err := pyBuildLib(ctx, repo); err != nil {
		return nil, err
	}
	// The master and the node are processes of their own, so that the Go
	// client here and the Python one in its process each share a CPU with
	// nothing of the cluster's.
	bin := filepath.Join(e.dir, "bin")
	if err := buildBinaries(ctx, bin); err != nil {
		return nil, err
	}
	cl := &cluster{}
	defer cl.stop()
	line, err := cl.start(ctx, e.dir, filepath.Join(bin, "tierstore-master"), "tierstore-master listening on ",
		"--rpc_port=0", "--metrics_port=0", "--log_level=warn")
	if err != nil {
		return nil, fmt.Errorf("bench: python: master: %w\n%s", err, cl.logTail())
	}
	addr := strings.Fields(line)[0]
	if _, err := cl.start(ctx, e.dir, filepath.Join(bin, "tierstore-node"), "tierstore-node listening on ",
		"--master="+addr, "--memory=1GiB"); err != nil {
		return nil, fmt.Errorf("bench: python: node: %w\n%s", err, cl.logTail())
	}
	cs, err := remoteClients(ctx, addr, 1)
	if err != nil {
		return nil, fmt.Errorf("bench: python: client: %w", err)
	}
	c := cs[0]
	defer c.Close()
	if err := pyPopulate(ctx, c); err != nil {
		return nil, err
	}

	passes := pyPasses
	if e.sizes != nil { // tests: one short pass
		passes, d = 1, 200*time.Millisecond
	}
	var goPasses, pyPassesOut []pyFigures
	for p := range passes {
		g, err := pyGoPass(ctx, c, d, p)
		if err != nil {
			return nil, fmt.Errorf("bench: python: Go pass: %w", err)
		}
		goPasses = append(goPasses, g)
		py, err := pyPythonPass(ctx, repo, addr, d)
		if err != nil {
			return nil, fmt.Errorf("bench: python: Python pass: %w", err)
		}
		pyPassesOut = append(pyPassesOut, py)
	}

	res := &result{Options: map[string]string{
		"cluster":  "tierstore-master and one tierstore-node (1 GiB DRAM) processes on 127.0.0.1, built from cmd/; every byte crosses loopback",
		"go":       "one client.Client without a local node, in the bench process: BatchGetIntoParts, BatchPutParts (what the Python batch calls reach), GetInto; and BatchGetInto, BatchPut",
		"python":   pyPython + " -m tierstore.bench: MooncakeDistributedStore (global_segment_size=0) on the tierstore.Client C library, in its own process",
		"per_pass": fmt.Sprintf("%v of timed work per figure; %d passes alternating Go and Python; the median pass, ratio the median of per-pass ratios", d, passes),
	}}
	t := &table{Title: "Python (MooncakeDistributedStore) against the Go client, same cluster, same run",
		Columns: []string{"figure", "Go MB/s", "Python MB/s", "Python / Go"}}
	for _, name := range pyFigureNames {
		var gs, ps, rs []float64
		for i := range goPasses {
			gs, ps = append(gs, goPasses[i][name]), append(ps, pyPassesOut[i][name])
			if goPasses[i][name] > 0 {
				rs = append(rs, pyPassesOut[i][name]/goPasses[i][name])
			}
		}
		t.add(name, median(gs), median(ps), median(rs))
	}
	for _, name := range pyGoOnly {
		var gs, rs []float64
		for i := range goPasses {
			gs = append(gs, goPasses[i][name])
			if goPasses[i][name] > 0 {
				rs = append(rs, pyPassesOut[i][strings.Replace(strings.Replace(name, "Go BatchGetInto", "batch_get_into", 1), "Go BatchPut", "batch_put_from", 1)]/goPasses[i][name])
			}
		}
		t.add(name, median(gs), nil, median(rs))
	}
	res.Tables = []*table{t}
	res.Notes = append(res.Notes,
		"batch_get_into: one call reads 128 objects of 2 MiB into 128 buffers (Go: BatchGetIntoParts, one part per key, the call the Python one reaches); MB/s over the time inside the calls",
		"batch_put_from: one call puts 128 new objects of 2 MiB from 128 buffers (Go: BatchPutParts); they are removed after each call (untimed)",
		"Go BatchGetInto, Go BatchPut: the plain Go batch calls on the same work; their Python / Go column is the Python figure of the same work over them",
		"get_into 1 MiB: one caller reading one 1 MiB object after another; 8 threads: 8 Python threads sharing one store against 8 goroutines sharing one client, MB/s over the wall time",
		"goal: every Python figure >= 0.9 x the Go figure")
	res.Elapsed = time.Since(started).Seconds()
	return res, nil
}

// pyRepo is the repository root (the bench runs from it: go run ./bench).
func pyRepo() (string, error) {
	wd, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for dir := wd; ; dir = filepath.Dir(dir) {
		if _, err := os.Stat(filepath.Join(dir, "python", "tierstore", "__init__.py")); err == nil {
			return dir, nil
		}
		if filepath.Dir(dir) == dir {
			return "", fmt.Errorf("bench: python: no python/tierstore above %s: run from the repository", wd)
		}
	}
}

// pyBuildLib builds the C library the Python package loads (as make python does).
func pyBuildLib(ctx context.Context, repo string) error {
	cmd := exec.CommandContext(ctx, "go", "build", "-buildmode=c-shared", "-o", pyLibRelPath, "./python/capi")
	cmd.Dir = repo
	cmd.Env = append(os.Environ(), "CGO_ENABLED=1")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("bench: python: building %s: %v\n%s", pyLibRelPath, err, out)
	}
	return nil
}

// pyPopulate stores the objects both sides read.
func pyPopulate(ctx context.Context, c *client.Client) error {
	var keys []string
	var vals [][]byte
	src := newValueSource(pyBatchSize, 31)
	for i := range pyBatchKeys {
		keys, vals = append(keys, pyGetKey(i)), append(vals, src.value(i))
	}
	small := newValueSource(pySmallSize, 32)
	for i := range pyThreads {
		keys, vals = append(keys, pySmallKey(i)), append(vals, small.value(i))
	}
	for i, err := range c.BatchPut(ctx, keys, vals) {
		if err != nil {
			return fmt.Errorf("bench: python: populate %s: %w", keys[i], err)
		}
	}
	return nil
}

// pyGoPass measures the four figures with the Go client.
func pyGoPass(ctx context.Context, c *client.Client, d time.Duration, pass int) (pyFigures, error) {
	f := pyFigures{}
	keys := make([]string, pyBatchKeys)
	bufs := make([][]byte, pyBatchKeys)
	for i := range keys {
		keys[i], bufs[i] = pyGetKey(i), make([]byte, pyBatchSize)
	}
	var err error
	parts := make([][][]byte, pyBatchKeys)
	for i := range parts {
		parts[i] = [][]byte{bufs[i]}
	}
	// The calls the Python ones reach (ts_batch_get_into and
	// ts_batch_put_parts call the parts forms), then the plain Go ones.
	f[pyFigureNames[0]], err = pyTimed(d, pyBatchKeys*pyBatchSize, func(int) error {
		_, errs := c.BatchGetIntoParts(ctx, keys, parts)
		return firstErr(errs)
	}, nil)
	if err != nil {
		return nil, err
	}
	f[pyGoOnly[0]], err = pyTimed(d, pyBatchKeys*pyBatchSize, func(int) error {
		_, errs := c.BatchGetInto(ctx, keys, bufs)
		return firstErr(errs)
	}, nil)
	if err != nil {
		return nil, err
	}
	src := newValueSource(pyBatchSize, 33)
	vals := make([][]byte, pyBatchKeys)
	for i := range vals {
		vals[i] = src.value(i)
	}
	valParts := make([][][]byte, pyBatchKeys)
	for i := range vals {
		valParts[i] = [][]byte{vals[i]}
	}
	put := make([]string, pyBatchKeys)
	cleanup := func() error {
		_, err := c.RemoveByRegex(ctx, "^pybench/goput/", true)
		return err
	}
	f[pyFigureNames[1]], err = pyTimed(d, pyBatchKeys*pyBatchSize, func(round int) error {
		for i := range put {
			put[i] = fmt.Sprintf("pybench/goput/%d/%d/%d", pass, round, i)
		}
		return firstErr(c.BatchPutParts(ctx, put, valParts, client.PutOptions{}))
	}, cleanup)
	if err != nil {
		return nil, err
	}
	f[pyGoOnly[1]], err = pyTimed(d, pyBatchKeys*pyBatchSize, func(round int) error {
		for i := range put {
			put[i] = fmt.Sprintf("pybench/goput/%d/b%d/%d", pass, round, i)
		}
		return firstErr(c.BatchPut(ctx, put, vals))
	}, cleanup)
	if err != nil {
		return nil, err
	}
	one := make([]byte, pySmallSize)
	f[pyFigureNames[2]], err = pyTimed(d, pySmallSize, func(int) error {
		_, err := c.GetInto(ctx, pySmallKey(0), one)
		return err
	}, nil)
	if err != nil {
		return nil, err
	}
	fig, err := measure(ctx, pyThreads, d, pySmallSize, func(w, _ int) error {
		_, err := c.GetInto(ctx, pySmallKey(w), pyThreadBuf(w))
		return err
	})
	f[pyFigureNames[3]] = fig.mbps
	return f, err
}

var pyThreadBufs = sync.OnceValue(func() [][]byte {
	b := make([][]byte, pyThreads)
	for i := range b {
		b[i] = make([]byte, pySmallSize)
	}
	return b
})

func pyThreadBuf(w int) []byte { return pyThreadBufs()[w] }

// pyTimed calls op (with its round number) once untimed to warm up, then
// until d of time inside op has passed, running cleanup (untimed) after
// each; MB/s over the time inside op.
func pyTimed(d time.Duration, bytesPerOp int64, op func(round int) error, cleanup func() error) (float64, error) {
	var in time.Duration
	var moved int64
	for round := -1; in < d; round++ { // round -1 warms up, untimed
		if round < 0 {
			if err := op(1 << 30); err != nil {
				return 0, err
			}
			if cleanup != nil {
				if err := cleanup(); err != nil {
					return 0, err
				}
			}
			continue
		}
		t0 := time.Now()
		if err := op(round); err != nil {
			return 0, err
		}
		in += time.Since(t0)
		moved += bytesPerOp
		if cleanup != nil {
			if err := cleanup(); err != nil {
				return 0, err
			}
		}
	}
	return mbps(moved, in), nil
}

func firstErr(errs []error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// pyPythonPass runs python3 -m tierstore.bench against the cluster and
// reads its figures (one JSON object on its last stdout line).
func pyPythonPass(ctx context.Context, repo, addr string, d time.Duration) (pyFigures, error) {
	cmd := exec.CommandContext(ctx, pyPython, "-m", "tierstore.bench", "--master", addr,
		"--duration", fmt.Sprintf("%.3f", d.Seconds()), "--json")
	cmd.Dir = repo
	cmd.Env = append(os.Environ(), "PYTHONPATH="+filepath.Join(repo, "python"))
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("%s -m tierstore.bench: %v\n%s", pyPython, err, stderr.String())
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	var f pyFigures
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &f); err != nil {
		return nil, fmt.Errorf("%s -m tierstore.bench printed no figures (%v): %q", pyPython, err, out)
	}
	for _, name := range pyFigureNames {
		if _, ok := f[name]; !ok {
			return nil, fmt.Errorf("%s -m tierstore.bench: no figure %q in %v", pyPython, name, slices.Sorted(maps.Keys(f)))
		}
	}
	return f, nil
}
