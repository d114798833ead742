package testkit

import (
	"os"
	"strings"
	"testing"
)

// Golden compares got with the golden file at path, failing the test with
// the first line that differs; with update it rewrites the file instead
// (a test's -update flag: a change meant to alter the output is accepted
// by regenerating, and the diff is reviewed in the commit).
func Golden(t testing.TB, path, got string, update bool) {
	t.Helper()
	if update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatalf("%v", err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
		return
	}
	if got == string(want) {
		return
	}
	g, w := strings.Split(got, "\n"), strings.Split(string(want), "\n")
	for i := 0; i < len(g) || i < len(w); i++ {
		var gl, wl string
		if i < len(g) {
			gl = g[i]
		}
		if i < len(w) {
			wl = w[i]
		}
		if gl != wl {
			t.Fatalf("output differs from %s at its line %d:\n got: %s\nwant: %s\n(a change meant? check the diff, then accept it with -update)", path, i+1, gl, wl)
			return
		}
	}
}
