//go:build linux

package partitions

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/tierstore/tierstore/internal/netlab"
)

// TestScenariosShort runs every scenario in its short form (the CI form of
// `go run ./bench partitions`) and fails on any lost object, stale read,
// wrong byte, call past its deadline, or a cluster that does not serve
// again after the heal. TIERSTORE_PARTITIONS=a,b runs only those.
func TestScenariosShort(t *testing.T) {
	if err := netlab.Available(); err != nil {
		t.Skip(err)
	}
	var only []string
	if s := os.Getenv("TIERSTORE_PARTITIONS"); s != "" {
		only = strings.Split(s, ",")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Minute)
	defer cancel()
	var log strings.Builder
	// TIERSTORE_PARTITIONS_DIR keeps the histories and SSD directories.
	// The binaries are built without the race detector even under -race:
	// the scenarios measure deadlines and recovery times, which a 5-10x
	// slower binary would miss for its own sake (internal/e2e runs them
	// with it).
	res, err := Run(ctx, Config{Only: only, Log: &log, Dir: os.Getenv("TIERSTORE_PARTITIONS_DIR")})
	if errors.Is(err, netlab.ErrUnavailable) {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	var table strings.Builder
	Table(&table, res)
	t.Logf("\n%s", table.String())
	for _, r := range res {
		if !r.OK() {
			t.Errorf("%s: %v %v", r.Name, r.Report, r.Err)
		}
	}
	if t.Failed() || testing.Verbose() {
		t.Logf("log:\n%s", log.String())
	}
}
