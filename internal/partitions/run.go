//go:build linux

package partitions

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/tierstore/tierstore/internal/cluster"
	"github.com/tierstore/tierstore/internal/netlab"
	"github.com/tierstore/tierstore/internal/netlab/history"
)

// Result is one scenario's outcome.
type Result struct {
	Name    string
	About   string
	Skipped string // why it did not run ("" when it ran)
	Err     error  // the harness failed (a process did not start, ...)
	Report  *history.Report
	Notes   []string // what the scenario saw besides the history
	Elapsed time.Duration
}

// OK reports whether the scenario was skipped, or ran and kept every
// promise.
func (r Result) OK() bool {
	return r.Skipped != "" || (r.Err == nil && r.Report != nil && r.Report.OK())
}

// scenario is one fault scenario.
type scenario struct {
	name, about string
	// needs returns why the lab cannot run it ("" when it can).
	needs func(netlab.Caps) string
	run   func(ctx context.Context, r *rig) error
}

// Names lists the scenarios in the order Run runs them.
func Names() []string {
	var n []string
	for _, s := range all {
		n = append(n, s.name)
	}
	return n
}

// Run builds the binaries (unless cfg.Bins) and runs the scenarios, each
// in a lab of its own. It returns an error only when nothing can run (no
// root, a tool missing: netlab.ErrUnavailable) or the build fails; a
// scenario's own failure is in its Result.
func Run(ctx context.Context, cfg Config) ([]Result, error) {
	if cfg.Log == nil {
		cfg.Log = io.Discard
	}
	for _, n := range cfg.Only {
		if !slices.Contains(Names(), n) {
			return nil, fmt.Errorf("partitions: unknown scenario %q (have %s)", n, strings.Join(Names(), ", "))
		}
	}
	if err := netlab.Available(); err != nil {
		return nil, err
	}
	// The temporary directories of this run go with it, also when the
	// process is killed (the labs' own reapers take the namespaces and
	// processes).
	sweep, err := netlab.NewSweeper()
	if err != nil {
		return nil, err
	}
	defer sweep.Close()
	if cfg.Bins == nil {
		b, err := buildBinaries(ctx, cfg.Race, sweep)
		if err != nil {
			return nil, err
		}
		defer b.Close()
		cfg.Bins = b
	}
	if cfg.Dir == "" {
		d, err := os.MkdirTemp("", "tierstore-partitions-*")
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(d)
		if err := sweep.Add(d); err != nil {
			return nil, err
		}
		cfg.Dir = d
	}
	var out []Result
	for _, s := range all {
		if len(cfg.Only) > 0 && !slices.Contains(cfg.Only, s.name) {
			continue
		}
		if err := ctx.Err(); err != nil {
			return out, err
		}
		out = append(out, runOne(ctx, cfg, s))
	}
	return out, nil
}

// buildBinaries builds the binaries the scenarios start (master, node,
// etcd and ClientBinary) into a new temporary directory that sweep removes
// even if the process is killed during the build.
func buildBinaries(ctx context.Context, race bool, sweep *netlab.Sweeper) (*cluster.Binaries, error) {
	dir, err := os.MkdirTemp("", "tierstore-bin-*")
	if err != nil {
		return nil, fmt.Errorf("partitions: %w", err)
	}
	if err := sweep.Add(dir); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	b := &cluster.Binaries{Dir: dir}
	root, err := cluster.ModuleRoot()
	if err != nil {
		b.Close()
		return nil, err
	}
	args := []string{"build", "-o", dir + "/"}
	if race {
		args = append(args, "-race")
	}
	// go's work directory is swept too.
	work, err := os.MkdirTemp("", "tierstore-gotmp-*")
	if err == nil {
		err = sweep.Add(work)
	}
	if err != nil {
		b.Close()
		return nil, fmt.Errorf("partitions: %w", err)
	}
	defer os.RemoveAll(work)
	cmd := exec.CommandContext(ctx, "go", append(args, "./cmd/tierstore-master", "./cmd/tierstore-node", "./cmd/tierstore-etcd", clientPackage)...)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "GOTMPDIR="+work)
	// A run killed during the build kills the build too, which would
	// otherwise finish and write the binaries into the directory again
	// after the sweeper removed it (go finishes its build on SIGINT).
	cluster.DieWithParent(cmd)
	if out, err := cmd.CombinedOutput(); err != nil {
		b.Close()
		return nil, fmt.Errorf("partitions: go build: %w\n%s", err, out)
	}
	return b, nil
}

// runOne runs s in a new lab and checks its history.
func runOne(ctx context.Context, cfg Config, s scenario) Result {
	res := Result{Name: s.name, About: s.about}
	fmt.Fprintf(cfg.Log, "=== %s: %s\n", s.name, s.about)
	start := time.Now()
	defer func() { res.Elapsed = time.Since(start) }()
	lab, err := netlab.New(cfg.Bins)
	if errors.Is(err, netlab.ErrUnavailable) {
		res.Skipped = err.Error() // no namespaces here (a container without CAP_SYS_ADMIN)
		return res
	} else if err != nil {
		res.Err = err
		return res
	}
	defer lab.Close()
	if why := s.needs(lab.Caps); why != "" {
		res.Skipped = why
		fmt.Fprintf(cfg.Log, "    skipped: %s\n", why)
		return res
	}
	r := &rig{cfg: cfg, lab: lab, dir: filepath.Join(cfg.Dir, s.name), log: cfg.Log, procHost: map[*cluster.Proc]*netlab.Host{}}
	if err := os.MkdirAll(r.dir, 0o755); err != nil {
		res.Err = err
		return res
	}
	sctx, cancel := context.WithTimeout(ctx, r.dur(4*time.Minute, 10*time.Minute))
	defer cancel()
	res.Err = s.run(sctx, r)
	r.saveLogs()
	if res.Err == nil {
		res.Report, res.Err = r.check()
	}
	res.Notes = r.notes
	if !res.OK() {
		if res.Report != nil {
			fmt.Fprintf(cfg.Log, "    %s\n", res.Report)
			res.Report.WriteViolations(cfg.Log, 5)
		}
		if res.Err != nil {
			fmt.Fprintf(cfg.Log, "    error: %v\n", res.Err)
		}
		r.dumpLogs(cfg.Log)
	}
	return res
}

// Table prints one row per scenario: calls made, puts acknowledged, lost,
// stale reads, wrong bytes, calls past their deadline, time to recover
// after the heal; then the notes.
func Table(w io.Writer, results []Result) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "scenario\tops\tacknowledged\ton SSD\tlost\tstale\twrong bytes\tpast deadline\trecovery\t")
	for _, r := range results {
		switch {
		case r.Skipped != "":
			fmt.Fprintf(tw, "%s\tskipped: %s\t\t\t\t\t\t\t\t\n", r.Name, r.Skipped)
		case r.Report == nil:
			fmt.Fprintf(tw, "%s\tfailed: %v\t\t\t\t\t\t\t\t\n", r.Name, firstLine(r.Err))
		default:
			p := r.Report
			rec := "never"
			if p.Recovered {
				rec = p.Recovery.Round(10 * time.Millisecond).String()
			}
			fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%s\t\n", r.Name, p.Ops, p.Acknowledged, p.OnSSD, p.Lost, p.Stale, p.Wrong, p.PastDeadline, rec)
		}
	}
	tw.Flush()
	for _, r := range results {
		for _, n := range r.Notes {
			fmt.Fprintf(w, "%s: %s\n", r.Name, n)
		}
	}
}

func firstLine(err error) string {
	if err == nil {
		return ""
	}
	s, _, _ := strings.Cut(err.Error(), "\n")
	return s
}
