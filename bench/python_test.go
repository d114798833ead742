package main

import (
	"context"
	"os"
	"testing"
	"time"
)

// TestPythonScenarioShort runs the python scenario for one short pass: the
// Python package builds, python3 -m tierstore.bench runs against the
// bench's cluster and every figure comes back positive on both sides. It
// says nothing about speed.
func TestPythonScenarioShort(t *testing.T) {
	if _, err := os.Stat(pyPython); err != nil {
		t.Skipf("%s not installed", pyPython)
	}
	if testing.Short() {
		t.Skip("builds the C library and starts Python")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute) // a bound, not a speed check
	defer cancel()
	res, err := runPython(ctx, &env{dir: t.TempDir(), quick: true, sizes: []int64{1}})
	if err != nil {
		t.Fatal(err)
	}
	want := len(pyFigureNames) + len(pyGoOnly)
	if len(res.Tables) != 1 || len(res.Tables[0].Rows) != want {
		t.Fatalf("want one table of %d rows, got %+v", want, res.Tables)
	}
	for _, row := range res.Tables[0].Rows[:len(pyFigureNames)] {
		for i, c := range row[1:3] {
			if f, ok := c.(float64); !ok || f <= 0 {
				t.Errorf("%v: %s figure %v, want > 0", row[0], []string{"Go", "Python"}[i], c)
			}
		}
	}
}
