package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/tierstore/tierstore/masterapi"
)

// scenario is one benchmark.
type scenario struct {
	name string
	help string
	run  func(ctx context.Context, e *env) (*result, error)
}

// scenarios registered by the scenario files' init functions.
var scenarios []scenario

// allOrder is the order "all" runs the scenarios in.
var allOrder = []string{"throughput", "recovery", "churn", "peers", "master", "e2e", "replicas"}

func register(s scenario) { scenarios = append(scenarios, s) }

func findScenario(name string) (scenario, bool) {
	for _, s := range scenarios {
		if s.name == name {
			return s, true
		}
	}
	return scenario{}, false
}

// env is what a scenario gets: the parsed options and the output channels.
type env struct {
	dir          string // scratch directory for this scenario (exists, empty)
	quick        bool
	traceFile    string
	stderr       io.Writer
	progress     progressFactory
	sizes        []int64       // tests only: object sizes of throughput (nil: all)
	sizesFlag    string        // throughput: --sizes
	readers      int           // throughput: --readers
	perLoad      int           // throughput: --keys-per-load
	backends     string        // throughput: --backends
	objects      int           // recovery: --objects
	objSize      int64         // recovery: --object-size
	duration     time.Duration // soak: --duration (0: 60s, 10s with --quick)
	keys         int64         // reconcile: --keys (0: 10M, 100k with --quick)
	seed         int64         // churn: --seed (0: the fixed trace seeds)
	replicas     int           // crashloop: --replicas
	bin          string        // fullput, putcpu: --bin (prebuilt binaries; "": built from the tree)
	procProf     string        // fullput, putcpu, getcpu: --procprofile (directory of the processes' CPU profiles; "": none)
	scaleObjects string        // scale: --scale_objects ("": 1M,10M; 100k with --quick)
	scaleRSSCap  int64         // scale: --scale_rss_cap (0: 16 GiB)
	scaleFill    string        // scale: --scale_fill, "dram", "ssd" or "offload"
	// scaleLookupAll: --scale_lookup_all
	scaleLookupAll bool
}

func usage(w io.Writer, fs *flag.FlagSet) {
	names := make([]string, 0, len(scenarios))
	for _, s := range scenarios {
		names = append(names, s.name)
	}
	fmt.Fprintf(w, "usage: go run ./bench %s|all [flags]\n\nscenarios:\n", strings.Join(names, "|"))
	for _, s := range scenarios {
		fmt.Fprintf(w, "  %-11s %s\n", s.name, s.help)
	}
	fmt.Fprintln(w, "\nflags:")
	fs.SetOutput(w)
	fs.PrintDefaults()
}

// run is main without the process: it parses args (scenario first, flags
// after, or flags first), runs the scenarios and writes the report.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return runWith(ctx, args, stdout, stderr, nil)
}

// runWith is run with a hook that adjusts each scenario's env (tests).
func runWith(ctx context.Context, args []string, stdout, stderr io.Writer, adjust func(*env)) error {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	dir := fs.String("dir", "", "directory to benchmark on (default: a temporary directory under the working directory's disk)")
	quick := fs.Bool("quick", false, "small sizes: the whole run takes well under a minute")
	jsonFile := fs.String("json", "", "write every figure as JSON to this file")
	plotDir := fs.String("plot", "", "write PNG charts to this directory")
	traceFile := fs.String("trace", "", "churn: also replay this trace file (one \"key size\" per line)")
	keep := fs.Bool("keep", false, "keep the scratch directory")
	readers := fs.Int("readers", 4, "throughput: goroutines calling Load")
	perLoad := fs.Int("keys-per-load", 8, "throughput: keys per Load call")
	sizes := fs.String("sizes", "", "throughput: object sizes, comma-separated (default 64K,256K,1M)")
	backends := fs.String("backends", "", "throughput: backends, comma-separated (default uring+direct,pwrite,pwrite+direct; also uring+direct-noyield)")
	objects := fs.Int("objects", 0, "recovery: objects in the tier (default 100000 and 1000000; --quick 20000)")
	objSize := fs.String("object-size", "4K", "recovery: object size")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the whole run to this file (go tool pprof)")
	mutexProfile := fs.String("mutexprofile", "", "write a mutex contention profile of the whole run to this file")
	blockProfile := fs.String("blockprofile", "", "write a blocking profile of the whole run to this file")
	duration := fs.Duration("duration", 0, "soak: how long the clients run (default 60s, 10s with --quick)")
	keys := fs.Int64("keys", 0, "reconcile: SSD objects of the node (default 10000000, 100000 with --quick)")
	seed := fs.Int64("seed", 0, "churn: seed of the generated traces: conversations and mixed N, zipf-bursts N+1, the others N+2 (0: the fixed seeds 42, 7 and 11)")
	bin := fs.String("bin", "", "fullput, putcpu: directory of prebuilt tierstore-master and tierstore-node (default: built from this tree)")
	procProf := fs.String("procprofile", "", "fullput, putcpu, getcpu: write CPU profiles of each row's master and node processes into this directory (ROW-master.pprof, ROW-node.pprof); reconcile: the master's (reconcile-master.pprof)")
	scaleObjects := fs.String("scale_objects", "", "scale: master sizes to measure, comma-separated (default 1M,10M; --quick 100k; e.g. 1M,10M,50M)")
	scaleRSSCap := fs.String("scale_rss_cap", "16G", "scale: stop filling a master whose RSS grew by this much")
	scaleFill := fs.String("scale_fill", "dram", "scale: fill the master with put pairs (dram: DRAM objects), with a node's re-registration (ssd: SSD-only objects), or with put pairs copied to SSD and evicted from DRAM (offload: SSD-only objects put through DRAM)")
	scaleLookupAll := fs.Bool("scale_lookup_all", false, "scale: after the timed lookups, ExistKey every object held once and measure RSS again")
	replicas := fs.Int("replicas", 1, "crashloop: DRAM replicas of every put (more than 1: on 3 nodes, or as many as replicas)")

	names, help, err := parseArgs(fs, args)
	if help || err != nil {
		if help {
			usage(stdout, fs)
		}
		return err
	}
	todo, err := resolveScenarios(names)
	if err != nil {
		return err
	}
	if *duration < 0 {
		return fmt.Errorf("%w: --duration must not be negative", errUsage)
	}
	if *keys < 0 {
		return fmt.Errorf("%w: --keys must not be negative", errUsage)
	}
	if *replicas < 1 || *replicas > masterapi.MaxReplicas {
		return fmt.Errorf("%w: --replicas must be in 1..%d", errUsage, masterapi.MaxReplicas)
	}
	if *readers < 1 || *perLoad < 1 {
		return fmt.Errorf("%w: --readers and --keys-per-load must be >= 1", errUsage)
	}
	osize, err := parseSize(*objSize)
	if err != nil || osize < 1 || *objects < 0 {
		return fmt.Errorf("%w: --objects must be >= 0 and --object-size a positive size (e.g. 4K)", errUsage)
	}
	rssCap, err := parseSize(*scaleRSSCap)
	if err != nil || rssCap < 1 {
		return fmt.Errorf("%w: --scale_rss_cap must be a positive size (e.g. 16G)", errUsage)
	}
	if *scaleFill != "dram" && *scaleFill != "ssd" && *scaleFill != "offload" {
		return fmt.Errorf("%w: --scale_fill must be dram, ssd or offload, not %q", errUsage, *scaleFill)
	}
	if *traceFile != "" {
		if _, err := os.Stat(*traceFile); err != nil {
			return fmt.Errorf("%w: --trace: %v", errUsage, err)
		}
	}
	stopProfiles, err := startProfiles(*cpuProfile, *mutexProfile, *blockProfile)
	if err != nil {
		return err
	}
	defer stopProfiles()

	base, cleanup, err := scratchDir(*dir, *keep)
	if err != nil {
		return err
	}
	defer cleanup()
	prog := newProgressFactory(stderr)
	mkEnv := func(sdir string) *env {
		e := &env{dir: sdir, quick: *quick, traceFile: *traceFile, stderr: stderr, progress: prog,
			sizesFlag: *sizes, readers: *readers, perLoad: *perLoad, backends: *backends,
			objects: *objects, objSize: osize, duration: *duration, keys: *keys, seed: *seed, replicas: *replicas, bin: *bin, procProf: *procProf,
			scaleObjects: *scaleObjects, scaleRSSCap: rssCap, scaleFill: *scaleFill, scaleLookupAll: *scaleLookupAll}
		if adjust != nil {
			adjust(e)
		}
		return e
	}
	rep, err := runScenarios(ctx, todo, base, *quick, stdout, mkEnv)
	if err != nil {
		return err
	}
	return writeOutputs(rep, *jsonFile, *plotDir, stdout)
}

// parseArgs parses args into fs, accepting the scenario names before or
// after the flags. help is true when -h or --help was given.
func parseArgs(fs *flag.FlagSet, args []string) (names []string, help bool, err error) {
	rest := args
	for len(rest) > 0 {
		if err := fs.Parse(rest); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil, true, nil
			}
			return nil, false, fmt.Errorf("%w: %v", errUsage, err)
		}
		rest = fs.Args()
		if len(rest) > 0 {
			names = append(names, rest[0])
			rest = rest[1:]
		}
	}
	if len(names) == 0 {
		var b strings.Builder
		usage(&b, fs)
		return nil, false, fmt.Errorf("%w: name a scenario\n%s", errUsage, b.String())
	}
	return names, false, nil
}

// resolveScenarios maps names ("all" included) to scenarios.
func resolveScenarios(names []string) ([]scenario, error) {
	var todo []scenario
	for _, n := range names {
		if n == "all" {
			for _, name := range allOrder {
				if s, ok := findScenario(name); ok {
					todo = append(todo, s)
				}
			}
			continue
		}
		s, ok := findScenario(n)
		if !ok {
			valid := make([]string, 0, len(scenarios))
			for _, s := range scenarios {
				valid = append(valid, s.name)
			}
			sort.Strings(valid)
			return nil, fmt.Errorf("%w: unknown scenario %q (valid: %s, all)", errUsage, n, strings.Join(valid, ", "))
		}
		todo = append(todo, s)
	}
	return todo, nil
}

// startProfiles starts the CPU profile and enables the mutex and block
// profiles that have a file; stop writes and closes them.
func startProfiles(cpu, mutex, block string) (stop func(), err error) {
	var stops []func()
	stop = func() {
		for i := len(stops) - 1; i >= 0; i-- {
			stops[i]()
		}
	}
	if cpu != "" {
		f, err := os.Create(cpu)
		if err != nil {
			return nil, fmt.Errorf("%w: --cpuprofile: %v", errUsage, err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			f.Close()
			return nil, fmt.Errorf("bench: --cpuprofile: %w", err)
		}
		stops = append(stops, func() { pprof.StopCPUProfile(); f.Close() })
	}
	for _, p := range []struct {
		file, name string
		enable     func()
	}{
		{mutex, "mutex", func() { runtime.SetMutexProfileFraction(1) }},
		{block, "block", func() { runtime.SetBlockProfileRate(int(time.Microsecond)) }},
	} {
		if p.file == "" {
			continue
		}
		f, err := os.Create(p.file)
		if err != nil {
			stop()
			return nil, fmt.Errorf("%w: --%sprofile: %v", errUsage, p.name, err)
		}
		p.enable()
		stops = append(stops, func() {
			_ = pprof.Lookup(p.name).WriteTo(f, 0)
			f.Close()
		})
	}
	return stop, nil
}

// runScenarios runs todo, each in its own directory under base, printing
// each result as it comes.
func runScenarios(ctx context.Context, todo []scenario, base string, quick bool, stdout io.Writer, mkEnv func(dir string) *env) (*report, error) {
	hdr := collectHeader(base)
	rep := &report{Header: hdr}
	for _, s := range todo {
		sdir := filepath.Join(base, s.name)
		if err := os.MkdirAll(sdir, 0o755); err != nil {
			return nil, fmt.Errorf("bench: %w", err)
		}
		started := time.Now()
		res, err := s.run(ctx, mkEnv(sdir))
		os.RemoveAll(sdir)
		if err != nil {
			if errors.Is(err, errUnavailable) {
				fmt.Fprintf(stdout, "== %s: skipped: %v\n\n", s.name, err)
				rep.Skipped = append(rep.Skipped, skipped{Scenario: s.name, Reason: err.Error()})
				continue
			}
			if res != nil { // what was measured before the failure
				res.Scenario, res.Started = s.name, started
				printResult(stdout, hdr, res)
			}
			return nil, fmt.Errorf("scenario %s: %w", s.name, err)
		}
		res.Scenario = s.name
		res.Quick = quick
		res.Started = started
		if res.Elapsed == 0 {
			res.Elapsed = time.Since(started).Seconds()
		}
		printResult(stdout, hdr, res)
		rep.Results = append(rep.Results, res)
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
	}
	return rep, nil
}

// writeOutputs writes the JSON report and the charts, when asked for.
func writeOutputs(rep *report, jsonFile, plotDir string, stdout io.Writer) error {
	if jsonFile != "" {
		if err := writeJSON(jsonFile, rep); err != nil {
			return err
		}
	}
	if plotDir != "" {
		files, err := writePlots(plotDir, rep)
		if err != nil {
			return err
		}
		for _, f := range files {
			fmt.Fprintf(stdout, "chart: %s\n", f)
		}
	}
	return nil
}

// scratchDir returns the directory scenarios work in and a function that
// removes what bench created. With dir == "" it is a new temporary directory
// under the working directory (the same disk the operator runs from).
func scratchDir(dir string, keep bool) (string, func(), error) {
	if dir == "" {
		wd, err := os.Getwd()
		if err != nil {
			return "", nil, fmt.Errorf("bench: %w", err)
		}
		dir = wd
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", nil, fmt.Errorf("%w: --dir %q: %v", errUsage, dir, err)
	}
	st, err := os.Stat(abs)
	if err != nil || !st.IsDir() {
		return "", nil, fmt.Errorf("%w: --dir %q is not an existing directory", errUsage, dir)
	}
	base, err := os.MkdirTemp(abs, ".tierstore-bench-")
	if err != nil {
		return "", nil, fmt.Errorf("%w: --dir %q is not writable: %v", errUsage, dir, err)
	}
	return base, func() {
		if !keep {
			os.RemoveAll(base)
		}
	}, nil
}

func main() {
	if isRecoveryChild(os.Args[1:]) {
		if err := recoveryChild(os.Args[2:]); err != nil {
			fmt.Fprintln(os.Stderr, "bench: recovery child:", err)
			os.Exit(1)
		}
		return
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, err)
		if errors.Is(err, errUsage) {
			os.Exit(2)
		}
		os.Exit(1)
	}
}
