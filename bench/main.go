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
var allOrder = []string{"throughput", "churn", "peers", "master"}

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
	dir       string // scratch directory for this scenario (exists, empty)
	quick     bool
	traceFile string
	stderr    io.Writer
	progress  progressFactory
	sizes     []int64       // tests only: object sizes of throughput (nil: all)
	sizesFlag string        // throughput: --sizes
	readers   int           // throughput: --readers
	perLoad   int           // throughput: --keys-per-load
	duration  time.Duration // soak: --duration (0: 60s, 10s with --quick)
	keys      int64         // reconcile: --keys (0: 10M, 100k with --quick)
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
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the whole run to this file (go tool pprof)")
	mutexProfile := fs.String("mutexprofile", "", "write a mutex contention profile of the whole run to this file")
	blockProfile := fs.String("blockprofile", "", "write a blocking profile of the whole run to this file")
	duration := fs.Duration("duration", 0, "soak: how long the clients run (default 60s, 10s with --quick)")
	keys := fs.Int64("keys", 0, "reconcile: SSD objects of the node (default 10000000, 100000 with --quick)")

	// Accept the scenario name before or after the flags.
	var names []string
	rest := args
	for len(rest) > 0 {
		if err := fs.Parse(rest); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				usage(stdout, fs)
				return nil
			}
			return fmt.Errorf("%w: %v", errUsage, err)
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
		return fmt.Errorf("%w: name a scenario\n%s", errUsage, b.String())
	}
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
			return fmt.Errorf("%w: unknown scenario %q (valid: %s, all)", errUsage, n, strings.Join(valid, ", "))
		}
		todo = append(todo, s)
	}
	if *keys < 0 {
		return fmt.Errorf("%w: --keys must not be negative", errUsage)
	}
	if *duration < 0 {
		return fmt.Errorf("%w: --duration must not be negative", errUsage)
	}
	if *readers < 1 || *perLoad < 1 {
		return fmt.Errorf("%w: --readers and --keys-per-load must be >= 1", errUsage)
	}
	if *traceFile != "" {
		if _, err := os.Stat(*traceFile); err != nil {
			return fmt.Errorf("%w: --trace: %v", errUsage, err)
		}
	}

	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			return fmt.Errorf("%w: --cpuprofile: %v", errUsage, err)
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return fmt.Errorf("bench: --cpuprofile: %w", err)
		}
		defer pprof.StopCPUProfile()
	}

	for _, p := range []struct {
		file, name string
		enable     func()
	}{
		{*mutexProfile, "mutex", func() { runtime.SetMutexProfileFraction(1) }},
		{*blockProfile, "block", func() { runtime.SetBlockProfileRate(int(time.Microsecond)) }},
	} {
		if p.file == "" {
			continue
		}
		f, err := os.Create(p.file)
		if err != nil {
			return fmt.Errorf("%w: --%sprofile: %v", errUsage, p.name, err)
		}
		p.enable()
		defer func() {
			_ = pprof.Lookup(p.name).WriteTo(f, 0)
			f.Close()
		}()
	}

	base, cleanup, err := scratchDir(*dir, *keep)
	if err != nil {
		return err
	}
	defer cleanup()

	hdr := collectHeader(base)
	rep := &report{Header: hdr}
	prog := newProgressFactory(stderr)
	for _, s := range todo {
		sdir := filepath.Join(base, s.name)
		if err := os.MkdirAll(sdir, 0o755); err != nil {
			return fmt.Errorf("bench: %w", err)
		}
		e := &env{dir: sdir, quick: *quick, traceFile: *traceFile, stderr: stderr, progress: prog,
			sizesFlag: *sizes, readers: *readers, perLoad: *perLoad, duration: *duration, keys: *keys}
		if adjust != nil {
			adjust(e)
		}
		started := time.Now()
		res, err := s.run(ctx, e)
		os.RemoveAll(sdir)
		if err != nil {
			if errors.Is(err, errUnavailable) {
				fmt.Fprintf(stdout, "== %s: skipped: %v\n\n", s.name, err)
				rep.Skipped = append(rep.Skipped, skipped{Scenario: s.name, Reason: err.Error()})
				continue
			}
			return fmt.Errorf("scenario %s: %w", s.name, err)
		}
		res.Scenario = s.name
		res.Quick = *quick
		res.Started = started
		if res.Elapsed == 0 {
			res.Elapsed = time.Since(started).Seconds()
		}
		printResult(stdout, hdr, res)
		rep.Results = append(rep.Results, res)
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
	if *jsonFile != "" {
		if err := writeJSON(*jsonFile, rep); err != nil {
			return err
		}
	}
	if *plotDir != "" {
		files, err := writePlots(*plotDir, rep)
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
