package main

import (
	"bytes"
	"context"
	"errors"
	"math/rand/v2"
	"os/exec"
	"path/filepath"
	"strings"
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
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute) // 131 s under -race at load 25
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

// serveGoal applies the rules: fits, GB/s >= every peer's; 3x
// DRAM, hits >= 2x the peer's (0.9 where the peer's is above 0.45) and
// GB/s of hits >= the peer's.
func TestServeGoal(t *testing.T) {
	row := func(gbps float64, asked, hits int64) *opStat {
		return &opStat{bytes: int64(gbps * 1e9), elapsed: time.Second, asked: asked, hits: hits}
	}
	for _, c := range []struct {
		name  string
		size  string
		o     *opStat
		peers []*opStat
		want  any
	}{
		{"fits faster than both", "fits", row(2, 0, 0), []*opStat{row(1.9, 0, 0), row(1, 0, 0)}, "yes"},
		{"fits slower than one", "fits", row(2, 0, 0), []*opStat{row(2.1, 0, 0), row(1, 0, 0)}, "no"},
		{"3x twice the hits", "3x", row(1, 100, 60), []*opStat{row(0.5, 100, 30)}, "yes"},
		{"3x under twice the hits", "3x", row(1, 100, 59), []*opStat{row(0.5, 100, 30)}, "no"},
		{"3x peer above 0.45: 0.9 is enough", "3x", row(1, 100, 90), []*opStat{row(0.5, 100, 50)}, "yes"},
		{"3x peer above 0.45: below 0.9", "3x", row(1, 100, 89), []*opStat{row(0.5, 100, 50)}, "no"},
		{"3x more hits but slower", "3x", row(0.4, 100, 100), []*opStat{row(0.5, 100, 30)}, "no"},
		{"3x puts have no goal", "3x", row(1, 0, 0), []*opStat{row(0.5, 0, 0)}, nil},
		{"no peer", "fits", row(1, 0, 0), []*opStat{nil, nil}, nil},
	} {
		if _, got := serveGoal(c.size, c.o, c.peers...); got != c.want {
			t.Errorf("%s: met = %v, want %v", c.name, got, c.want)
		}
	}
}

// zipf(0.9) draws every rank, the first most often, in proportion.
func TestZipfDraws(t *testing.T) {
	z := newZipf(100, 0.9)
	r := rand.New(rand.NewPCG(1, 2))
	counts := make([]int, 100)
	for range 200000 {
		counts[z.draw(r)]++
	}
	// P(0)/P(9) = 10^0.9 = 7.9.
	if x := float64(counts[0]) / float64(counts[9]); x < 7 || x > 9 {
		t.Errorf("rank 0 / rank 9 = %.2f, want about 7.9", x)
	}
	for k, n := range counts {
		if n == 0 {
			t.Errorf("rank %d never drawn", k)
		}
	}
}

// Passes merge row by row: counts and time add up (GB/s over both), SSD
// bytes are the mean.
func TestMergeOps(t *testing.T) {
	a := []opStat{{op: "get", ops: 2, bytes: 100, elapsed: time.Second, asked: 4, hits: 2, ssdBytes: 10, lat: latencies{1, 2}}}
	b := []opStat{{op: "get", ops: 1, bytes: 300, elapsed: time.Second, asked: 4, hits: 4, ssdBytes: 30, lat: latencies{3}}}
	m := mergeOps([][]opStat{a, b})
	if o := m[0]; o.ops != 3 || o.bytes != 400 || o.elapsed != 2*time.Second || o.asked != 8 || o.hits != 6 || o.ssdBytes != 20 || len(o.lat) != 3 {
		t.Fatalf("merged %+v", o)
	}
	if len(a[0].lat) != 2 {
		t.Fatalf("the first pass's latencies were changed: %v", a[0].lat)
	}
}

// A peer whose binary is missing is unavailable, with one line naming it
// and the package to install (the scenario then skips that store).
func TestServeMissingPeer(t *testing.T) {
	_, err := startPeer(context.Background(), t.TempDir(), "no-such-peer-server", "127.0.0.1:1")
	if !errors.Is(err, errUnavailable) || !strings.Contains(err.Error(), "no-such-peer-server is not installed") || strings.Contains(err.Error(), "\n") {
		t.Fatalf("missing peer: %v", err)
	}
}

// The warm-up fills each store and leaves it empty: none of its keys is
// found afterwards; the SSD bytes written by then are the rows' base.
func TestServeWarmUpEmpties(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binaries and starts real servers")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	bin := t.TempDir()
	if err := buildBinaries(ctx, bin); err != nil {
		t.Fatal(err)
	}
	sc := serveQuick
	size := sc.block
	for _, kind := range serveStores {
		t.Run(kind.name, func(t *testing.T) {
			s, err := kind.start(ctx, t.TempDir(), bin, serveBudget{dram: sc.dram, ssd: 4 * sc.dram, maxValue: sc.chunk, workers: sc.workers})
			if errors.Is(err, errUnavailable) {
				t.Skip(err)
			}
			if err != nil {
				t.Fatal(err)
			}
			defer s.close()
			r := &serveRun{s: s, sc: sc, srcs: map[int64]*valueSource{}, bufs: map[int64][][][]byte{}}
			if err := r.warm(ctx, size); err != nil {
				t.Fatal(err)
			}
			n := int(sc.dram * 3 / 4 / size)
			keys := make([]string, n)
			for i := range keys {
				keys[i] = warmKey(i)
			}
			found, err := s.batchExists(ctx, 0, keys)
			if err != nil {
				t.Fatal(err)
			}
			for i, f := range found {
				if f {
					t.Fatalf("%s still has %s after the warm-up", kind.name, keys[i])
				}
			}
			// memcached's extstore (and tierstore's offload tasks in flight)
			// may go on writing after the flush: the base is only a floor.
			if written, err := s.ssdWritten(ctx); err != nil || written < r.ssdBase {
				t.Fatalf("SSD bytes written %d (%v), below the base %d taken at the warm-up's end", written, err, r.ssdBase)
			}
		})
	}
}
