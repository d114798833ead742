package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestSmoke runs every scenario (in parallel: figures are not checked) with --quick and checks that the output is
// well formed: a table with the machine header on stdout, every figure in the
// JSON, PNG charts. It says nothing about speed.
func TestSmoke(t *testing.T) {
	for _, name := range []string{"throughput", "churn", "peers", "master", "prefetch"} {
		s, ok := findScenario(name)
		t.Run(name, func(t *testing.T) {
			// Scenarios mostly wait on fsync: run them side by side.
			t.Parallel()
			if !ok {
				t.Fatalf("scenario %s is not registered", name)
			}
			dir := t.TempDir()
			jsonPath := filepath.Join(dir, "out.json")
			plotDir := filepath.Join(dir, "plots")
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute) // a bound, not a speed check: a loaded machine is slow
			defer cancel()
			var stdout, stderr bytes.Buffer
			args := []string{s.name, "--quick", "--dir", dir, "--json", jsonPath, "--plot", plotDir}
			if name == "churn" {
				args = append(args, "--trace", writeTraceFile(t))
			}
			err := run(ctx, args, &stdout, &stderr)
			if err != nil {
				t.Fatalf("run: %v\nstdout:\n%s\nstderr:\n%s", err, stdout.String(), stderr.String())
			}
			out := stdout.String()
			var rep report
			b, err := os.ReadFile(jsonPath)
			if err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal(b, &rep); err != nil {
				t.Fatalf("json: %v", err)
			}
			if len(rep.Skipped) == 1 && len(rep.Results) == 0 {
				if !strings.Contains(out, "skipped") {
					t.Errorf("skipped scenario not reported on stdout:\n%s", out)
				}
				t.Skipf("scenario %s unavailable: %s", s.name, rep.Skipped[0].Reason)
			}
			for _, want := range []string{"== " + s.name, "machine: ", "disk: ", "go: ", "options: "} {
				if !strings.Contains(out, want) {
					t.Errorf("stdout lacks %q:\n%s", want, out)
				}
			}
			if stderr.Len() != 0 {
				t.Errorf("stderr is not a terminal, yet got output:\n%s", stderr.String())
			}
			checkReport(t, &rep, s.name)
			for _, tb := range rep.Results[0].Tables {
				if !strings.Contains(out, tb.Title) {
					t.Errorf("table %q not printed", tb.Title)
				}
			}
			pngs, _ := filepath.Glob(filepath.Join(plotDir, "*.png"))
			for _, p := range pngs {
				b, err := os.ReadFile(p)
				if err != nil || len(b) < 1000 || !bytes.HasPrefix(b, []byte("\x89PNG\r\n\x1a\n")) {
					t.Errorf("chart %s is not a PNG (%d bytes, %v)", p, len(b), err)
				}
				if !strings.Contains(out, "chart: "+p) {
					t.Errorf("chart %s not announced on stdout", p)
				}
			}
			if s.name != "master" && len(pngs) == 0 {
				t.Errorf("no chart written to %s", plotDir)
			}
			if name == "churn" && !strings.Contains(out, "file:") {
				t.Errorf("the --trace file was not replayed:\n%s", out)
			}
			// Scratch data is removed.
			left, _ := filepath.Glob(filepath.Join(dir, ".tierstore-bench-*"))
			if len(left) != 0 {
				t.Errorf("scratch directory left behind: %v", left)
			}
		})
	}
}

// The e2e scenario (small objects, short rows): every row the docs name is
// in the JSON table, with a ratio to raw TCP where it has one, and each
// goal row says whether it was met.
func TestE2ESmoke(t *testing.T) {
	dir := t.TempDir()
	jsonPath := filepath.Join(dir, "out.json")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute) // a bound, not a speed check: a loaded machine is slow
	defer cancel()
	var stdout, stderr bytes.Buffer
	err := runWith(ctx, []string{"e2e", "--quick", "--dir", dir, "--json", jsonPath}, &stdout, &stderr,
		func(e *env) { e.sizes = []int64{64 << 10} })
	if err != nil {
		t.Fatalf("run: %v\n%s", err, stdout.String())
	}
	rep := readReport(t, jsonPath, "e2e")
	tb := rep.Results[0].Tables[0]
	col := map[string]int{}
	for i, c := range tb.Columns {
		col[c] = i
	}
	if _, ok := col["x raw tcp"]; !ok {
		t.Fatalf("no \"x raw tcp\" column: %v", tb.Columns)
	}
	seen := map[string]int{}
	for _, r := range tb.Rows {
		name := r[col["row"]].(string)
		seen[strings.SplitN(name, " (", 2)[0]]++
		x, hasRatio := r[col["x raw tcp"]].(float64)
		if (name == "put" || name == "get dram" || strings.HasPrefix(name, "batch get dram")) && (!hasRatio || x <= 0) {
			t.Errorf("row %q has no ratio to raw TCP: %v", name, r)
		}
		if name == "get ssd" {
			if x, ok := r[col["x tier.Load"]].(float64); !ok || x <= 0 || r[col["met"]] == nil {
				t.Errorf("get ssd is not compared with tier.Load: %v", r)
			}
		}
	}
	for _, want := range []string{"raw tcp", "put", "get dram", "get ssd", "batch get dram", "tier.Load", "embedded get dram"} {
		if seen[want] < 2 { // 1 and 4 clients
			t.Errorf("row %q: %d lines, want one per client count", want, seen[want])
		}
	}
}

// writeTraceFile writes a small user trace: two sizes, some reuse.
func writeTraceFile(t *testing.T) string {
	t.Helper()
	var b strings.Builder
	b.WriteString("# key size\n")
	for i := 0; i < 120; i++ {
		k := i % 40
		size := 65536
		if k%4 == 0 {
			size = 131072
		}
		fmt.Fprintf(&b, "user/%d %d\n", k, size)
	}
	p := filepath.Join(t.TempDir(), "user.trace")
	if err := os.WriteFile(p, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestThroughputWithoutFio: with no fio in PATH, or a fio that fails on the
// directory, the throughput scenario says so and prints absolute figures,
// with no ratio.
func TestThroughputWithoutFio(t *testing.T) {
	broken := t.TempDir()
	script := "#!/bin/sh\nif [ \"$1\" = --version ]; then echo fio-0.0-broken; exit 0; fi\necho 'fio: engine io_uring not loadable' >&2\nexit 1\n"
	if err := os.WriteFile(filepath.Join(broken, "fio"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ name, path, note string }{
		{"missing", t.TempDir(), "fio is not installed"},
		{"failing", broken + ":/usr/bin:/bin", "fio failed on this directory"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Setenv("PATH", c.path)
			dir := t.TempDir()
			jsonPath := filepath.Join(dir, "out.json")
			var stdout bytes.Buffer
			err := runWith(context.Background(), []string{"throughput", "--quick", "--dir", dir, "--json", jsonPath, "--plot", dir},
				&stdout, &stdout, func(e *env) { e.sizes = []int64{64 << 10} })
			if err != nil {
				t.Fatalf("run: %v\n%s", err, stdout.String())
			}
			if !strings.Contains(stdout.String(), c.note) {
				t.Errorf("no %q:\n%s", c.note, stdout.String())
			}
			var rep report
			b, _ := os.ReadFile(jsonPath)
			if err := json.Unmarshal(b, &rep); err != nil {
				t.Fatal(err)
			}
			checkReport(t, &rep, "throughput")
			tb := rep.Results[0].Tables[0]
			for _, other := range rep.Results[0].Tables {
				if strings.HasPrefix(other.Title, "fio") {
					t.Errorf("a fio table without fio: %q", other.Title)
				}
			}
			for _, row := range tb.Rows {
				for i, col := range tb.Columns {
					if strings.Contains(col, "x fio") && row[i] != nil {
						t.Errorf("ratio %q = %v without fio", col, row[i])
					}
					if strings.HasSuffix(col, "MB/s") {
						if v, ok := row[i].(float64); !ok || v <= 0 {
							t.Errorf("absolute figure %q = %v", col, row[i])
						}
					}
				}
			}
		})
	}
}

// readReport reads the JSON report a scenario wrote to path and checks it
// holds one well-formed result of scenario name (checkReport).
// runQuick runs scenario name with --quick and args in a new directory
// dir (--dir), its report in dir/out.json (--json), within 3 minutes, and
// returns dir, what it printed on stdout and its report (readReport). An
// error fails the test, showing both outputs.
func runQuick(t *testing.T, name string, args ...string) (dir, stdout string, rep *report) {
	t.Helper()
	dir = t.TempDir()
	jsonPath := filepath.Join(dir, "out.json")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var out, errOut bytes.Buffer
	all := append(append([]string{name, "--quick"}, args...), "--dir", dir, "--json", jsonPath)
	if err := run(ctx, all, &out, &errOut); err != nil {
		t.Fatalf("%s: %v\nstdout:\n%s\nstderr:\n%s", name, err, out.String(), errOut.String())
	}
	return dir, out.String(), readReport(t, jsonPath, name)
}

func readReport(t *testing.T, path, name string) *report {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var rep report
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatalf("%s: json: %v", name, err)
	}
	checkReport(t, &rep, name)
	return &rep
}

func checkReport(t *testing.T, rep *report, name string) {
	t.Helper()
	h := rep.Header
	if h.GoVersion == "" || h.CPUs <= 0 || h.Dir == "" || h.FSType == "" || h.Kernel == "" {
		t.Errorf("header incomplete: %+v", h)
	}
	if len(rep.Results) != 1 || rep.Results[0].Scenario != name || !rep.Results[0].Quick {
		t.Fatalf("results = %+v", rep.Results)
	}
	r := rep.Results[0]
	if len(r.Options) == 0 || r.Elapsed <= 0 {
		t.Errorf("options %v elapsed %v", r.Options, r.Elapsed)
	}
	if len(r.Tables) == 0 {
		t.Fatal("no table")
	}
	numbers := 0
	for _, tb := range r.Tables {
		if tb.Title == "" || len(tb.Columns) == 0 || len(tb.Rows) == 0 {
			t.Errorf("table %+v is empty", tb)
		}
		for i, row := range tb.Rows {
			if len(row) != len(tb.Columns) {
				t.Errorf("table %q row %d has %d cells for %d columns", tb.Title, i, len(row), len(tb.Columns))
			}
			for _, c := range row {
				switch v := c.(type) {
				case float64:
					numbers++
					if math.IsNaN(v) || math.IsInf(v, 0) || v < 0 {
						t.Errorf("table %q row %d: bad figure %v", tb.Title, i, v)
					}
				case string, nil:
				default:
					t.Errorf("table %q row %d: cell of type %T", tb.Title, i, c)
				}
			}
		}
	}
	if numbers == 0 {
		t.Error("no figure in any table")
	}
}

func TestUsageErrors(t *testing.T) {
	ctx := context.Background()
	var out bytes.Buffer
	cases := []struct {
		args []string
		want string
	}{
		{nil, "name a scenario"},
		{[]string{"nope"}, `unknown scenario "nope"`},
		{[]string{"peers", "--dir", "/nonexistent/x"}, "--dir"},
		{[]string{"peers", "--bogus"}, "bogus"},
		{[]string{"peers", "--trace", "/nonexistent/t"}, "--trace"},
		{[]string{"throughput", "--readers", "0"}, "--readers"},
		{[]string{"throughput", "--sizes", "100", "--dir", os.TempDir()}, "--sizes"},
	}
	for _, c := range cases {
		err := run(ctx, c.args, &out, &out)
		if !errors.Is(err, errUsage) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("run(%q) = %v, want usage error mentioning %q", c.args, err, c.want)
		}
	}
	out.Reset()
	if err := run(ctx, []string{"-h"}, &out, &out); err != nil || !strings.Contains(out.String(), "scenarios:") {
		t.Errorf("-h: %v %q", err, out.String())
	}
}

func TestFormatCell(t *testing.T) {
	for in, want := range map[any]string{nil: "-", "x": "x", 3: "3", int64(4): "4", 1234.5: "1234",
		12.345: "12.3", 1.2345: "1.23", 0.12345: "0.123", 0.0: "0"} {
		if got := formatCell(in); got != want {
			t.Errorf("formatCell(%v) = %q, want %q", in, got, want)
		}
	}
}

// The replicas scenario (small objects, short rows): puts of 1, 2 and 3
// replicas per client count, each with its ratio to the 1-replica row.
func TestReplicasSmoke(t *testing.T) {
	dir := t.TempDir()
	jsonPath := filepath.Join(dir, "out.json")
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Second)
	defer cancel()
	var stdout, stderr bytes.Buffer
	err := runWith(ctx, []string{"replicas", "--quick", "--dir", dir, "--json", jsonPath}, &stdout, &stderr,
		func(e *env) { e.sizes = []int64{64 << 10} })
	if err != nil {
		t.Fatalf("run: %v\n%s", err, stdout.String())
	}
	tb := readReport(t, jsonPath, "replicas").Results[0].Tables[0]
	col := map[string]int{}
	for i, c := range tb.Columns {
		col[c] = i
	}
	seen := map[string]int{}
	for _, r := range tb.Rows {
		name := r[col["row"]].(string)
		seen[name]++
		x, ok := r[col["x 1 replica"]].(float64)
		if strings.HasPrefix(name, "put") && (!ok || x <= 0) {
			t.Errorf("row %q has no ratio to 1 replica: %v", name, r)
		}
	}
	for _, want := range []string{"raw tcp", "put, 1 replica", "put, 2 replicas", "put, 3 replicas"} {
		if seen[want] != 2 { // 1 and 4 clients
			t.Errorf("row %q: %d lines, want one per client count", want, seen[want])
		}
	}
}
