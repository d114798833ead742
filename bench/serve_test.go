package main

import (
	"bytes"
	"context"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// TestServeSmoke runs the serve scenario's short form (the one CI runs,
// with memcached and redis-server installed by .ci/run): every workload
// at both sizes for every installed store, tierstore's rows with their
// ratios and goal verdicts, and the charts. It says nothing about speed.
func TestServeSmoke(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binaries and starts real servers")
	}
	want := []string{"tierstore"}
	for _, p := range []struct{ bin, store string }{{"memcached", "memcached+extstore"}, {"redis-server", "redis"}} {
		if _, err := exec.LookPath(p.bin); err != nil {
			t.Logf("%s not installed: %s is skipped", p.bin, p.store)
			continue
		}
		want = append(want, p.store)
	}
	dir := t.TempDir()
	jsonPath, plotDir := filepath.Join(dir, "out.json"), filepath.Join(dir, "plots")
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	var stdout, stderr bytes.Buffer
	if err := run(ctx, []string{"serve", "--quick", "--dir", dir, "--json", jsonPath, "--plot", plotDir}, &stdout, &stderr); err != nil {
		t.Fatalf("run: %v\n%s\n%s", err, stdout.String(), stderr.String())
	}
	rep := readReport(t, jsonPath, "serve")
	tb := rep.Results[0].Tables[0]
	col := map[string]int{}
	for i, c := range tb.Columns {
		col[c] = i
	}
	seen := map[string]bool{}
	for _, row := range tb.Rows {
		wl, size, store := row[col["workload"]].(string), row[col["working set"]].(string), row[col["store"]].(string)
		seen[wl+"/"+size+"/"+store] = true
		if g, ok := row[col["GB/s"]].(float64); !ok || g <= 0 {
			t.Errorf("%s %s %s %v: GB/s %v", wl, size, store, row[col["op"]], row[col["GB/s"]])
		}
		if store == "tierstore" && len(want) > 1 && row[col["x "+shortStore(want[1])]] == nil {
			t.Errorf("%s %s tierstore %v: no ratio to %s", wl, size, row[col["op"]], want[1])
		}
	}
	for _, wl := range serveWorkloads {
		for _, size := range []string{"fits", "3x"} {
			for _, s := range want {
				if !seen[wl.name+"/"+size+"/"+s] {
					t.Errorf("no row for %s %s %s", wl.name, size, s)
				}
			}
		}
	}
	pngs, _ := filepath.Glob(filepath.Join(plotDir, "serve-*.png"))
	if len(pngs) != 3 {
		t.Errorf("charts: %v, want the fits and 3x GB/s and the 3x hit ratios", pngs)
	}
}

func shortStore(s string) string {
	if s == "memcached+extstore" {
		return "memcached"
	}
	return s
}
