package e2e

import (
	"context"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/tierstore/tierstore/internal/crashloop"
)

// The short form of the crash loop (issue 10): 10 kill -9 of a node and 2 of
// the master, with writers running and offload in progress. Nothing the
// master announced on SSD may be lost, no read may return wrong bytes, and
// no phantom or duplicate replica may be listed. TIERSTORE_CRASHLOOP_SEED
// replays a run.
func TestCrashLoopShort(t *testing.T) {
	if testing.Short() {
		t.Skip("crash loop: real processes, about a minute")
	}
	var seed uint64
	if s := os.Getenv("TIERSTORE_CRASHLOOP_SEED"); s != "" {
		seed, _ = strconv.ParseUint(s, 10, 64)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	rep, err := crashloop.Run(ctx, crashloop.Config{
		NodeCycles: 10, MasterCycles: 2, Bins: bins, Dir: t.TempDir(), Seed: seed, Log: testLog{t},
	})
	t.Log(rep)
	if err != nil {
		t.Fatal(err)
	}
	if !rep.OK() {
		t.Fatalf("crash loop broke a promise: %v", rep)
	}
	if rep.AnnouncedOnSSD == 0 {
		t.Fatalf("no object was on SSD at any kill: the loop checked nothing: %v", rep)
	}
}

// The short crash loop with 2 replicas on 3 nodes: besides the promises
// above, a node kill loses none of the objects with a replica on another
// node (issue 21: a DRAM-only object survives the loss of one node).
func TestCrashLoopShortReplicas(t *testing.T) {
	if testing.Short() {
		t.Skip("crash loop: real processes, about a minute")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	rep, err := crashloop.Run(ctx, crashloop.Config{
		NodeCycles: 6, MasterCycles: 1, Nodes: 3, Replicas: 2, Bins: bins, Dir: t.TempDir(), Log: testLog{t},
	})
	t.Log(rep)
	if err != nil {
		t.Fatal(err)
	}
	if !rep.OK() {
		t.Fatalf("crash loop broke a promise: %v", rep)
	}
	if rep.HeldElsewhere == 0 {
		t.Fatalf("no object had a replica on another node at any kill: the loop checked nothing: %v", rep)
	}
}

// testLog writes the crash loop's progress lines to the test log.
type testLog struct{ t *testing.T }

func (w testLog) Write(b []byte) (int, error) {
	w.t.Log(string(b))
	return len(b), nil
}
