package main

import (
	"cmp"
	"context"
	"os"
	"slices"
	"testing"
	"time"
	"unsafe"
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
	want := len(pyFigureNames) + 1 + len(pyGoOnly) // and the 8 threads without the call queue
	if len(res.Tables) != 1 || len(res.Tables[0].Rows) != want {
		t.Fatalf("want one table of %d rows, got %+v", want, res.Tables)
	}
	if got := res.Tables[0].Rows[len(pyFigureNames)][0]; got != pyDirectName {
		t.Errorf("row %d is %v, want %q", len(pyFigureNames), got, pyDirectName)
	}
	for _, row := range res.Tables[0].Rows[:len(pyFigureNames)+1] {
		for i, c := range row[1:3] {
			if f, ok := c.(float64); !ok || f <= 0 {
				t.Errorf("%v: %s figure %v, want > 0", row[0], []string{"Go", "Python"}[i], c)
			}
		}
	}
}

// The Go side's batch put reads as much distinct memory as the Python
// side's 128 bytearrays: no two values share bytes.
func TestPyPutValuesOwnMemory(t *testing.T) {
	vals := pyPutValues()
	if len(vals) != pyBatchKeys {
		t.Fatalf("%d values, want %d", len(vals), pyBatchKeys)
	}
	type span struct{ lo, hi uintptr }
	spans := make([]span, len(vals))
	for i, v := range vals {
		if len(v) != pyBatchSize {
			t.Fatalf("value %d: %d bytes, want %d", i, len(v), pyBatchSize)
		}
		lo := uintptr(unsafe.Pointer(unsafe.SliceData(v)))
		spans[i] = span{lo, lo + uintptr(len(v))}
	}
	slices.SortFunc(spans, func(a, b span) int { return cmp.Compare(a.lo, b.lo) })
	for i := 1; i < len(spans); i++ {
		if spans[i].lo < spans[i-1].hi {
			t.Fatalf("two put values share memory: [%#x, %#x) and [%#x, %#x)", spans[i-1].lo, spans[i-1].hi, spans[i].lo, spans[i].hi)
		}
	}
}
