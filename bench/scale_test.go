package main

import (
	"bytes"
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"
)

// TestScaleSmoke fills two small masters, the second past an RSS cap so
// small that the fill must stop at its first check: the table says how
// many objects were held, and every lookup of a held key found it (the
// scenario fails otherwise).
func TestScaleSmoke(t *testing.T) {
	dir := t.TempDir()
	jsonPath := filepath.Join(dir, "out.json")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var stdout, stderr bytes.Buffer
	if err := run(ctx, []string{"scale", "--quick", "--scale_objects", "20k", "--dir", dir, "--json", jsonPath}, &stdout, &stderr); err != nil {
		t.Fatalf("scale: %v\nstdout:\n%s\nstderr:\n%s", err, stdout.String(), stderr.String())
	}
	rows := readReport(t, jsonPath, "scale").Results[0].Tables[0].Rows
	if len(rows) != 1 || rows[0][1].(float64) != 20000 {
		t.Fatalf("rows %v, want one row holding 20000 objects", rows)
	}
	if per := rows[0][4].(float64); per < 108 {
		t.Errorf("heap per object %.0f B, less than the 108-byte key itself", per)
	}

	jsonPath = filepath.Join(dir, "capped.json")
	if err := run(ctx, []string{"scale", "--quick", "--scale_objects", "100k", "--scale_rss_cap", "1K", "--dir", dir, "--json", jsonPath}, &stdout, &stderr); err != nil {
		t.Fatalf("scale capped: %v\nstderr:\n%s", err, stderr.String())
	}
	rows = readReport(t, jsonPath, "scale").Results[0].Tables[0].Rows
	if held := rows[0][1].(float64); held < 64<<10 || held >= 100000 {
		t.Errorf("a fill capped at 1 KiB of RSS held %v objects, want it stopped at the first check (65536, or one more)", held)
	}
}

// TestScaleSSDFill fills the master with re-registered SSD-only objects:
// every one is held and found by both lookups, and a capped fill stops
// at the first check past 64k, after whole chunks.
func TestScaleSSDFill(t *testing.T) {
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var stdout, stderr bytes.Buffer
	jsonPath := filepath.Join(dir, "ssd.json")
	if err := run(ctx, []string{"scale", "--quick", "--scale_fill", "ssd", "--scale_objects", "60k", "--dir", dir, "--json", jsonPath}, &stdout, &stderr); err != nil {
		t.Fatalf("scale ssd: %v\nstderr:\n%s", err, stderr.String())
	}
	rows := readReport(t, jsonPath, "scale").Results[0].Tables[0].Rows
	if len(rows) != 1 || rows[0][1].(float64) != 60000 {
		t.Fatalf("rows %v, want one row holding 60000 objects (14 chunks of 4096 and one of 2656)", rows)
	}
	jsonPath = filepath.Join(dir, "ssdcapped.json")
	if err := run(ctx, []string{"scale", "--quick", "--scale_fill", "ssd", "--scale_objects", "100k", "--scale_rss_cap", "1K", "--dir", dir, "--json", jsonPath}, &stdout, &stderr); err != nil {
		t.Fatalf("scale ssd capped: %v\nstderr:\n%s", err, stderr.String())
	}
	rows = readReport(t, jsonPath, "scale").Results[0].Tables[0].Rows
	// The other goroutine may take chunks while the first reads its RSS:
	// stopped means fewer than wanted, and whole chunks.
	if held := rows[0][1].(float64); held < 64<<10 || held >= 100000 || int(held)%scaleChunk != 0 {
		t.Errorf("an SSD fill capped at 1 KiB of RSS held %v objects, want it stopped at the first check (65536, or a few whole chunks more, fewer than 100000)", held)
	}
}

// TestScaleOffloadFill fills the master with objects put through DRAM,
// recorded on SSD and evicted from DRAM: every one is held, frozen back
// into a compact record, found by the lookups (ExistKey of every one
// with --scale_lookup_all) and none is thawed by them.
func TestScaleOffloadFill(t *testing.T) {
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var stdout, stderr bytes.Buffer
	jsonPath := filepath.Join(dir, "offload.json")
	if err := run(ctx, []string{"scale", "--quick", "--scale_fill", "offload", "--scale_lookup_all", "--scale_objects", "20k", "--dir", dir, "--json", jsonPath}, &stdout, &stderr); err != nil {
		t.Fatalf("scale offload: %v\nstderr:\n%s", err, stderr.String())
	}
	tab := readReport(t, jsonPath, "scale").Results[0].Tables[0]
	row := tab.Rows[0]
	col := func(name string) float64 {
		for i, c := range tab.Columns {
			if c == name {
				return row[i].(float64)
			}
		}
		t.Fatalf("no column %q in %v", name, tab.Columns)
		return 0
	}
	if held, recs, thawed, frozen := col("objects held"), col("records"), col("thawed"), col("frozen"); held != 20000 || recs != 20000 || thawed != 0 || frozen != 20000 {
		t.Fatalf("held %v, records %v, thawed %v, frozen %v: want 20000, 20000, 0, 20000", held, recs, thawed, frozen)
	}
}

func TestScaleUsage(t *testing.T) {
	for _, args := range [][]string{
		{"scale", "--scale_objects", "10x"},
		{"scale", "--scale_objects", "0"},
		{"scale", "--scale_rss_cap", "-1"},
		{"scale", "--scale_fill", "nvme"},
	} {
		var stdout, stderr bytes.Buffer
		err := run(context.Background(), append(args, "--dir", t.TempDir()), &stdout, &stderr)
		if !errors.Is(err, errUsage) {
			t.Errorf("%v: %v, want errUsage", args, err)
		}
	}
}

func TestScaleKeys(t *testing.T) {
	seen := map[string]bool{}
	for i := range 10000 {
		k := scaleKey(i)
		if len(k) != 108 {
			t.Fatalf("key %d is %d bytes, want 108: %s", i, len(k), k)
		}
		if seen[k] {
			t.Fatalf("key %d repeats an earlier one: %s", i, k)
		}
		seen[k] = true
	}
}
