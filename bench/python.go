package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
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
	pyBatchKeys   = 128
	pyBatchSize   = 2 << 20
	pySmallSize   = 1 << 20
	pyThreads     = 8
	pyPasses      = 5
	pyQuickPasses = 3
	pyPython      = "/usr/bin/python3"
	pyLibRelPath  = "python/tierstore/_lib/libtierstore.so"
)

func pyGetKey(i int) string   { return fmt.Sprintf("pybench/get/%d", i) }
func pySmallKey(i int) string { return fmt.Sprintf("pybench/small/%d", i) }

func runPython(ctx context.Context, e *env) (*result, error) {
	started := time.Now()
	d := 2 * time.Second
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
	cl := &cluster{}
	defer cl.stop()
	addr, err := pyCluster(ctx, e.dir, cl)
	if err != nil {
		return nil, err
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
	if e.quick {
		passes = pyQuickPasses
	}
	if e.sizes != nil { // tests: one short pass
		passes, d = 1, 200*time.Millisecond
	}
	goPasses, pyPassesOut, err := pyRunPasses(ctx, c, repo, addr, passes, d)
	if err != nil {
		return nil, err
	}

	res := &result{Options: map[string]string{
		"cluster":  "tierstore-master and one tierstore-node (1 GiB DRAM) processes on 127.0.0.1, built from cmd/; every byte crosses loopback",
		"go":       "one client.Client without a local node, in the bench process: BatchGetIntoParts, BatchPutParts (what the Python batch calls reach), GetInto; and BatchGetInto, BatchPut",
		"python":   pyPython + " -m tierstore.bench: MooncakeDistributedStore (global_segment_size=0) on the tierstore.Client C library, in its own process",
		"per_pass": fmt.Sprintf("%v of timed work per figure; %d passes, Go and Python taking turns figure by figure (who goes first alternates by pass) against one long-lived Python store; the median pass, ratio the median of per-pass ratios", d, passes),
	}}
	t := &table{Title: "Python (MooncakeDistributedStore) against the Go client, same cluster, same run",
		Columns: []string{"figure", "Go MB/s", "Python MB/s", "Python / Go"}}
	// row adds Python figure pyName against Go figure goName: the median
	// passes and the median of the per-pass ratios.
	row := func(label, goName, pyName string) {
		var gs, ps, rs []float64
		for i := range goPasses {
			gs, ps = append(gs, goPasses[i][goName]), append(ps, pyPassesOut[i][pyName])
			if goPasses[i][goName] > 0 {
				rs = append(rs, pyPassesOut[i][pyName]/goPasses[i][goName])
			}
		}
		t.add(label, median(gs), median(ps), median(rs))
	}
	for _, name := range pyFigureNames {
		row(name, name, name)
	}
	row(pyDirectName, pyThreadsName, pyDirectName)
	for _, name := range pyGoOnly {
		var gs, rs []float64
		pyName, _ := pyCounterpart(name)
		for i := range goPasses {
			gs = append(gs, goPasses[i][name])
			if goPasses[i][name] > 0 {
				rs = append(rs, pyPassesOut[i][pyName]/goPasses[i][name])
			}
		}
		t.add(name, median(gs), nil, median(rs))
	}
	res.Tables = []*table{t}
	res.Notes = append(res.Notes,
		"batch_get_into: one call reads 128 objects of 2 MiB into 128 buffers (Go: BatchGetIntoParts, one part per key, the call the Python one reaches); MB/s over the time inside the calls",
		"batch_put_from: one call puts 128 new objects of 2 MiB from 128 buffers of its own (Go: BatchPutParts, from 128 buffers of its own too); they are removed after each call (untimed)",
		"Go BatchGetInto, Go BatchPut: the plain Go batch calls on the same work; their Python / Go column is the Python figure of the same work over them",
		"get_into 1 MiB: one caller reading one 1 MiB object after another; 8 threads: 8 Python threads sharing one store against 8 goroutines sharing one client, MB/s over the wall time",
		"calls not queued: the 8 threads from a second Python process whose library runs every call on its caller's thread (TIERSTORE_CALLS=direct), against the same Go figure of the pass: what the call queue (docs/python.md, Threads) buys; not a figure of the goal",
		"goal: every Python figure >= 0.9 x the Go figure")
	res.Elapsed = time.Since(started).Seconds()
	return res, nil
}

// pyCluster builds and starts the master and one node of 1 GiB DRAM as
// processes of cl; it returns the master's address.
func pyCluster(ctx context.Context, dir string, cl *cluster) (string, error) {
	// The master and the node are processes of their own, so that the Go
	// client here and the Python one in its process each share a CPU with
	// nothing of the cluster's.
	bin := filepath.Join(dir, "bin")
	if err := buildBinaries(ctx, bin); err != nil {
		return "", err
	}
	line, err := cl.start(ctx, dir, filepath.Join(bin, "tierstore-master"), "tierstore-master listening on ",
		"--rpc_port=0", "--metrics_port=0", "--log_level=warn")
	if err != nil {
		return "", fmt.Errorf("bench: python: master: %w\n%s", err, cl.logTail())
	}
	addr := strings.Fields(line)[0]
	if _, err := cl.start(ctx, dir, filepath.Join(bin, "tierstore-node"), "tierstore-node listening on ",
		"--master="+addr, "--memory=1GiB"); err != nil {
		return "", fmt.Errorf("bench: python: node: %w\n%s", err, cl.logTail())
	}
	return addr, nil
}

// pyRunPasses measures every figure passes times, d of timed work each: Go
// in this process and Python in one long-lived server process, taking
// turns figure by figure (who goes first alternates by pass), so that each
// ratio compares two measures taken seconds apart on a machine whose load
// drifts.
func pyRunPasses(ctx context.Context, c *client.Client, repo, addr string, passes int, d time.Duration) (goPasses, pyPassesOut []pyFigures, err error) {
	py, err := startPyServer(ctx, repo, addr, "")
	if err != nil {
		return nil, nil, fmt.Errorf("bench: python: %w", err)
	}
	defer py.close()
	// The 8 threads once more from a process whose calls all run on their
	// caller's thread: what the library's call queue buys, in the same run.
	direct, err := startPyServer(ctx, repo, addr, "direct")
	if err != nil {
		return nil, nil, fmt.Errorf("bench: python (TIERSTORE_CALLS=direct): %w", err)
	}
	defer direct.close()
	goFig := pyGoFigures(ctx, c)
	goPasses, pyPassesOut = make([]pyFigures, passes), make([]pyFigures, passes)
	for p := range passes {
		goPasses[p], pyPassesOut[p] = pyFigures{}, pyFigures{}
		for _, name := range append(slices.Clone(pyFigureNames), pyGoOnly...) {
			pyName, both := pyCounterpart(name)
			turns := []func() error{func() error {
				v, err := goFig[name](d, p)
				if err != nil {
					return fmt.Errorf("bench: python: Go %s: %w", name, err)
				}
				goPasses[p][name] = v
				return nil
			}}
			if both {
				turns = append(turns, func() error {
					v, err := py.measure(pyName, d)
					if err != nil {
						return fmt.Errorf("bench: python: Python %s: %w", pyName, err)
					}
					pyPassesOut[p][pyName] = v
					return nil
				})
			}
			if name == pyThreadsName {
				turns = append(turns, func() error {
					v, err := direct.measure(pyName, d)
					if err != nil {
						return fmt.Errorf("bench: python: Python (TIERSTORE_CALLS=direct) %s: %w", pyName, err)
					}
					pyPassesOut[p][pyDirectName] = v
					return nil
				})
			}
			// Who goes first turns with the pass.
			for i := range turns {
				if err := turns[(i+p)%len(turns)](); err != nil {
					return nil, nil, err
				}
			}
		}
	}
	return goPasses, pyPassesOut, nil
}

// pyThreadsName is the 8-thread figure; pyDirectName its measure by a
// Python process with TIERSTORE_CALLS=direct (no call queue).
var (
	pyThreadsName = pyFigureNames[3]
	pyDirectName  = pyThreadsName + ", calls not queued (TIERSTORE_CALLS=direct)"
)

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

// pyCounterpart is the Python figure compared with Go figure name, and
// whether the Python side measures name itself (false for the plain Go
// calls of pyGoOnly, compared with the Python figure of the same work).
func pyCounterpart(name string) (string, bool) {
	switch name {
	case pyGoOnly[0]:
		return pyFigureNames[0], false
	case pyGoOnly[1]:
		return pyFigureNames[1], false
	}
	return name, true
}

// pyGoFigure measures one figure with the Go client for d of timed work
// (pass keeps the keys of different passes apart).
type pyGoFigure func(d time.Duration, pass int) (float64, error)

// pyPutValues are the values the Go side's batch puts send: each its own
// buffer, as the Python side's 128 bytearrays. Windows of one shared
// source (as the gets' populate uses) would put from a few MiB the CPU
// caches hold against Python's 256 MiB read from memory: the Go figure was
// 10 to 20 % higher for that alone (TestPyPutValuesOwnMemory).
func pyPutValues() [][]byte {
	src := newValueSource(pyBatchSize, 33)
	vals := make([][]byte, pyBatchKeys)
	for i := range vals {
		vals[i] = slices.Clone(src.value(i))
	}
	return vals
}

// pyGoFigures are the Go side's figures, by name: pyFigureNames and pyGoOnly.
func pyGoFigures(ctx context.Context, c *client.Client) map[string]pyGoFigure {
	keys := make([]string, pyBatchKeys)
	bufs := make([][]byte, pyBatchKeys)
	parts := make([][][]byte, pyBatchKeys)
	vals := pyPutValues()
	valParts := make([][][]byte, pyBatchKeys)
	for i := range keys {
		keys[i], bufs[i] = pyGetKey(i), make([]byte, pyBatchSize)
		parts[i], valParts[i] = [][]byte{bufs[i]}, [][]byte{vals[i]}
	}
	put := make([]string, pyBatchKeys)
	cleanup := func() error {
		_, err := c.RemoveByRegex(ctx, "^pybench/goput/", true)
		return err
	}
	name := func(form string, pass, round int) {
		for i := range put {
			put[i] = fmt.Sprintf("pybench/goput/%d/%s%d/%d", pass, form, round, i)
		}
	}
	one := make([]byte, pySmallSize)
	return map[string]pyGoFigure{
		// The calls the Python ones reach (ts_batch_get_into and
		// ts_batch_put_parts call the parts forms), then the plain Go ones.
		pyFigureNames[0]: func(d time.Duration, _ int) (float64, error) {
			return pyTimed(d, pyBatchKeys*pyBatchSize, func(int) error {
				_, errs := c.BatchGetIntoParts(ctx, keys, parts)
				return firstErr(errs)
			}, nil)
		},
		pyGoOnly[0]: func(d time.Duration, _ int) (float64, error) {
			return pyTimed(d, pyBatchKeys*pyBatchSize, func(int) error {
				_, errs := c.BatchGetInto(ctx, keys, bufs)
				return firstErr(errs)
			}, nil)
		},
		pyFigureNames[1]: func(d time.Duration, pass int) (float64, error) {
			return pyTimed(d, pyBatchKeys*pyBatchSize, func(round int) error {
				name("p", pass, round)
				return firstErr(c.BatchPutParts(ctx, put, valParts, client.PutOptions{}))
			}, cleanup)
		},
		pyGoOnly[1]: func(d time.Duration, pass int) (float64, error) {
			return pyTimed(d, pyBatchKeys*pyBatchSize, func(round int) error {
				name("b", pass, round)
				return firstErr(c.BatchPut(ctx, put, vals))
			}, cleanup)
		},
		pyFigureNames[2]: func(d time.Duration, _ int) (float64, error) {
			return pyTimed(d, pySmallSize, func(int) error {
				_, err := c.GetInto(ctx, pySmallKey(0), one)
				return err
			}, nil)
		},
		pyFigureNames[3]: func(d time.Duration, _ int) (float64, error) {
			fig, err := measure(ctx, pyThreads, d, pySmallSize, func(w, _ int) error {
				_, err := c.GetInto(ctx, pySmallKey(w), pyThreadBuf(w))
				return err
			})
			return fig.mbps, err
		},
	}
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

// pyServer is python3 -m tierstore.bench --serve against the cluster: one
// store, set up once, measuring one figure per request.
type pyServer struct {
	cmd    *exec.Cmd
	in     io.WriteCloser
	out    *bufio.Scanner
	stderr *strings.Builder
}

// startPyServer starts the Python side with the library's call mode
// (TIERSTORE_CALLS: "" for the default).
func startPyServer(ctx context.Context, repo, addr, calls string) (*pyServer, error) {
	cmd := exec.CommandContext(ctx, pyPython, "-m", "tierstore.bench", "--master", addr, "--serve")
	cmd.Dir = repo
	cmd.Env = append(os.Environ(), "PYTHONPATH="+filepath.Join(repo, "python"))
	if calls != "" {
		cmd.Env = append(cmd.Env, "TIERSTORE_CALLS="+calls)
	}
	p := &pyServer{cmd: cmd, stderr: &strings.Builder{}}
	cmd.Stderr = p.stderr
	var err error
	if p.in, err = cmd.StdinPipe(); err != nil {
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	p.out = bufio.NewScanner(out)
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("%s -m tierstore.bench --serve: %w", pyPython, err)
	}
	var ready struct{ Ready bool }
	if err := p.read(&ready); err != nil || !ready.Ready {
		p.close()
		return nil, fmt.Errorf("%s -m tierstore.bench --serve did not start (%v): %s", pyPython, err, p.stderr)
	}
	return p, nil
}

// read decodes the next answer line into v.
func (p *pyServer) read(v any) error {
	if !p.out.Scan() {
		return fmt.Errorf("no answer (%v); stderr: %s", p.out.Err(), p.stderr)
	}
	return json.Unmarshal(p.out.Bytes(), v)
}

// measure asks for figure name over d of timed work: MB/s.
func (p *pyServer) measure(name string, d time.Duration) (float64, error) {
	req, _ := json.Marshal(map[string]any{"figure": name, "seconds": d.Seconds()})
	if _, err := p.in.Write(append(req, '\n')); err != nil {
		return 0, fmt.Errorf("asking for %q: %w; stderr: %s", name, err, p.stderr)
	}
	var ans struct {
		Figure string
		MBps   float64 `json:"mbps"`
		Error  string
	}
	if err := p.read(&ans); err != nil {
		return 0, err
	}
	if ans.Error != "" || ans.Figure != name {
		return 0, fmt.Errorf("asked for %q, answered %q: %s", name, ans.Figure, ans.Error)
	}
	return ans.MBps, nil
}

// close ends the server (end of input) and waits for it.
func (p *pyServer) close() {
	p.in.Close()
	done := make(chan struct{})
	go func() { _ = p.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		_ = p.cmd.Process.Kill()
		<-done
	}
}
