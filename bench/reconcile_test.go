package main

import (
	"bytes"
	"context"
	"path/filepath"
	"testing"
	"time"
)

// TestReconcileSmoke runs the reconcile scenario with 20000 keys against a
// real master process: re-registration and the three reconciles must leave
// the master and the SSD as expected (the scenario checks the replicas
// dropped and the strays removed, and fails otherwise), and nothing is
// left running.
func TestReconcileSmoke(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs tierstore-master")
	}
	dir := t.TempDir()
	jsonPath := filepath.Join(dir, "out.json")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var stdout, stderr bytes.Buffer
	if err := run(ctx, []string{"reconcile", "--quick", "--keys", "20000", "--dir", dir, "--json", jsonPath}, &stdout, &stderr); err != nil {
		t.Fatalf("reconcile: %v\nstdout:\n%s\nstderr:\n%s", err, stdout.String(), stderr.String())
	}
	rep := readReport(t, jsonPath, "reconcile")
	rows := rep.Results[0].Tables[0].Rows
	if len(rows) != 4 {
		t.Fatalf("%d steps, want 4: %v", len(rows), rows)
	}
	if sent := rows[1][4].(float64); sent != 0 {
		t.Errorf("a reconcile with nothing changed sent %v keys", sent)
	}
	if sent := rows[2][4].(float64); sent == 0 || sent >= 20000 {
		t.Errorf("a reconcile with 100 keys drifted sent %v keys of 20000", sent)
	}
}
