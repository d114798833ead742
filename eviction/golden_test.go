package eviction

import (
	"bufio"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/tierstore/tierstore/internal/testkit"
)

var update = flag.Bool("update", false, "rewrite testdata/golden/*.txt from the policies' current decisions")

// Every policy replays the recorded bucket trace testdata/golden/trace.txt
// and its victims are compared with testdata/golden/<policy>.txt: a change
// of a policy that alters any eviction decision shows up as a diff (check
// it, then accept it with go test ./eviction -run Golden -update).
func TestGoldenTraces(t *testing.T) {
	for _, name := range Names {
		t.Run(name, func(t *testing.T) {
			got := replay(t, name, "testdata/golden/trace.txt")
			testkit.Golden(t, filepath.Join("testdata/golden", name+".txt"), got, *update)
		})
	}
}

// replay runs the trace through policy name and returns its decisions, one
// line per victims request.
func replay(t *testing.T, name, path string) string {
	t.Helper()
	p, err := New(name)
	if err != nil {
		t.Fatal(err)
	}
	density := map[uint64]float64{}
	if va, ok := p.(WorthAware); ok {
		va.SetWorthFunc(func(id uint64) (float64, bool) { d, ok := density[id]; return d, ok })
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out strings.Builder
	sc := bufio.NewScanner(f)
	for line := 1; sc.Scan(); line++ {
		w := strings.Fields(sc.Text())
		if len(w) == 0 || strings.HasPrefix(w[0], "#") {
			continue
		}
		num := func(i int) int64 {
			if i >= len(w) {
				t.Fatalf("%s:%d: %q lacks argument %d", path, line, sc.Text(), i)
			}
			n, err := strconv.ParseInt(w[i], 10, 64)
			if err != nil {
				t.Fatalf("%s:%d: %v", path, line, err)
			}
			return n
		}
		switch w[0] {
		case "add":
			p.Add(uint64(num(1)), num(2))
		case "touch":
			p.Touch(uint64(num(1)))
		case "remove":
			p.Remove(uint64(num(1)))
		case "density":
			density[uint64(num(1))] = float64(num(2))
		case "victims":
			fmt.Fprintf(&out, "%d: victims %d -> %v (tracked %d, %d bytes)\n", line, num(1), p.Victims(num(1), nil), p.Len(), p.Size())
		default:
			t.Fatalf("%s:%d: unknown op %q", path, line, w[0])
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out.String()
}
