package main

import (
	"os"
	"strings"
	"testing"
)

// TestSoakSmoke runs the soak for a few seconds with real master and node
// processes built from cmd/: the run must end without wrong bytes and with
// the SSD within capacity plus one bucket (the scenario fails otherwise),
// print its tables and write its figures, and leave no process behind.
func TestSoakSmoke(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binaries")
	}
	dir, out, rep := runQuick(t, "soak", "--duration", "4s")
	for _, want := range []string{"soak: correctness and health", "wrong bytes (reads)", "abandoned offloads", "put success %", "max SSD bytes", "soak: offload at the node"} {
		if !strings.Contains(out, want) {
			t.Errorf("stdout lacks %q:\n%s", want, out)
		}
	}
	health := rep.Results[0].Tables[0]
	figures := map[string][]any{}
	for _, row := range health.Rows {
		figures[row[0].(string)] = row
	}
	if w := figures["wrong bytes (reads)"]; w == nil || w[1].(float64) != 0 {
		t.Errorf("wrong bytes: %v", w)
	}
	if s := figures["max SSD bytes"]; s == nil || s[1].(float64) > s[2].(float64) {
		t.Errorf("SSD use above capacity + one bucket: %v", s)
	}
	ops := rep.Results[0].Tables[1]
	if ops.Rows[0][0] != "put" || ops.Rows[0][2].(float64) == 0 {
		t.Errorf("no put succeeded: %v", ops.Rows)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 { // only out.json: scratch removed
		names := []string{}
		for _, e := range entries {
			names = append(names, e.Name())
		}
		t.Errorf("left behind in --dir: %v", names)
	}
}
