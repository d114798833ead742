//go:build linux

package partitions

import (
	"context"
	"errors"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tierstore/tierstore/internal/netlab"
)

// TestScenariosShort runs every scenario in its short form (the CI form of
// `go run ./bench partitions`), each as a subtest
// (-run TestScenariosShort/split-halves runs one), and fails a scenario on
// any lost object, stale read, wrong byte, call past its deadline, or a
// cluster that does not serve again after the heal.
// TIERSTORE_PARTITIONS=a,b also selects scenarios;
// TIERSTORE_PARTITIONS_DIR=DIR keeps their histories, SSD directories and
// logs.
func TestScenariosShort(t *testing.T) {
	if err := netlab.Available(); err != nil {
		t.Skip(err)
	}
	var only []string
	if s := os.Getenv("TIERSTORE_PARTITIONS"); s != "" {
		only = strings.Split(s, ",")
		for _, n := range only {
			if !slices.Contains(Names(), n) {
				t.Fatalf("TIERSTORE_PARTITIONS: unknown scenario %q (have %s)", n, strings.Join(Names(), ", "))
			}
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Minute)
	defer cancel()
	// The binaries are built once, without the race detector even under
	// -race: the scenarios measure deadlines and recovery times, which a
	// 5-10x slower binary would miss for its own sake (internal/e2e runs
	// them with it).
	sweep, err := netlab.NewSweeper() // the binaries go also if the test is killed
	if err != nil {
		t.Fatal(err)
	}
	defer sweep.Close()
	bins, err := buildBinaries(ctx, false, sweep)
	if err != nil {
		t.Fatal(err)
	}
	defer bins.Close()
	var all []Result
	for _, name := range Names() {
		if len(only) > 0 && !slices.Contains(only, name) {
			continue
		}
		t.Run(name, func(t *testing.T) {
			var log strings.Builder
			res, err := Run(ctx, Config{Only: []string{name}, Bins: bins, Log: &log, Dir: os.Getenv("TIERSTORE_PARTITIONS_DIR")})
			if errors.Is(err, netlab.ErrUnavailable) {
				t.Skip(err)
			}
			if err != nil {
				t.Fatal(err)
			}
			all = append(all, res...)
			var table strings.Builder
			Table(&table, res)
			t.Logf("\n%s", table.String())
			for _, r := range res {
				if r.Skipped != "" {
					t.Skip(r.Skipped)
				}
				if !r.OK() {
					t.Errorf("%s: %v %v", r.Name, r.Report, r.Err)
				}
			}
			if t.Failed() || testing.Verbose() {
				t.Logf("log:\n%s", log.String())
			}
		})
	}
	var table strings.Builder
	Table(&table, all)
	t.Logf("\n%s", table.String())
}
