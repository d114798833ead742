package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestMain lets the test binary act as the recovery scenario's child
// process, as the bench binary does.
func TestMain(m *testing.M) {
	if isRecoveryChild(os.Args[1:]) {
		if err := recoveryChild(os.Args[2:]); err != nil {
			fmt.Fprintln(os.Stderr, "recovery child:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// The recovery scenario populates a tier through a child process, reopens
// it, kills a writing child with SIGKILL and reopens again: nothing
// acknowledged is lost, and the table has one row per object count.
func TestRecoveryScenario(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var stdout, stderr bytes.Buffer
	dir := t.TempDir()
	err := run(ctx, []string{"recovery", "--quick", "--objects", "3000", "--dir", dir}, &stdout, &stderr)
	if err != nil {
		t.Fatalf("run: %v\nstdout:\n%s\nstderr:\n%s", err, stdout.String(), stderr.String())
	}
	out := stdout.String()
	if !strings.Contains(out, "open after kill -9 ms") {
		t.Fatalf("no recovery table:\n%s", out)
	}
	var row string
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(strings.TrimSpace(l), "3000 ") {
			row = l
		}
	}
	f := strings.Fields(row)
	if len(f) != 21 {
		t.Fatalf("row %q: want 21 cells", row)
	}
	if f[19] != "0" || f[20] != "0" {
		t.Fatalf("objects lost or read back wrong after kill -9: row %q", row)
	}
	if f[18] == "0" {
		t.Fatalf("the killed child acknowledged nothing: row %q", row)
	}
	// Tier format 3: a clean close leaves nothing to read; after the kill
	// only the killed session's buckets are read (it wrote a few of 500
	// objects; the populated tier has 3000/500 = 6).
	if f[8] != "0" {
		t.Fatalf("Open after a clean close read %s buckets: row %q", f[8], row)
	}
	if k, err := strconv.Atoi(f[14]); err != nil || k < 3 || k > 4 {
		t.Fatalf("Open after kill -9 read %s buckets, want the killed session's (3 acknowledged, maybe 1 more): row %q", f[14], row)
	}
}
