package embedded_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"log/slog"
	"testing"

	"github.com/tierstore/tierstore/embedded"
)

// maxGetIntoAllocs bounds the allocations of one embedded GetInto of a
// DRAM object: the operation's context and timer, the master's lookup
// answer. The copy out of the segment and its CRC32C allocate nothing, and
// a local DRAM replica is read without a replica-timeout context (issue 12:
// embedded Get from DRAM at memory speed).
const maxGetIntoAllocs = 6

// An embedded GetInto of a DRAM object returns the value with a bounded
// number of small allocations, whatever the object's size.
func TestEmbeddedGetIntoAllocations(t *testing.T) {
	ctx := context.Background()
	cfg := embedded.DefaultConfig()
	quiet := slog.New(slog.DiscardHandler)
	cfg.Master.Logger, cfg.Node.Logger = quiet, quiet
	cfg.Node.EnableOffload, cfg.Master.EnableOffload = false, false
	cfg.Node.Memory = 16 << 20
	e, err := embedded.New(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	for _, size := range []int{4 << 10, 1 << 20} {
		val := make([]byte, size)
		_, _ = rand.Read(val)
		if err := e.Client.Put(ctx, "k", val); err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, size)
		allocs := testing.AllocsPerRun(50, func() {
			if n, err := e.Client.GetInto(ctx, "k", buf); err != nil || n != size {
				t.Fatalf("GetInto: %d %v", n, err)
			}
		})
		if !bytes.Equal(buf, val) {
			t.Fatal("GetInto returned other bytes")
		}
		if allocs > maxGetIntoAllocs {
			t.Errorf("%d-byte GetInto: %.1f allocations, at most %d expected", size, allocs, maxGetIntoAllocs)
		}
		if err := e.Client.Remove(ctx, "k", true); err != nil {
			t.Fatal(err)
		}
	}
}
