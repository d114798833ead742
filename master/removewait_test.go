package master

import (
	"context"
	"testing"
	"time"

	"github.com/tierstore/tierstore/masterapi"
)

// A forced removal of a leased object answers only once the node holding
// it reported a DRAM cursor at or past the removal (its next pull), after
// ringing the node (WaitOffload answers pressed); a holder that never
// pulls holds it until the lease ends; an unleased object's removal does
// not wait (removewait.go, docs/design.md "Replica-location cache").
func TestForcedRemoveOfLeasedObjectWaitsForHolders(t *testing.T) {
	s, clk := testService(t, nil)
	mount(t, s, "n1", 1<<20)
	for _, k := range []string{"a", "b", "c"} {
		put(t, s, k, 100, "n1")
	}
	for _, k := range []string{"a", "b"} {
		if _, err := s.GetReplicaList(bg, k); err != nil { // a read lease
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(bg, 20*time.Second)
	defer cancel()

	// The holder pulls: the removal answers after its pull, not before.
	done := make(chan error, 1)
	go func() { done <- s.Remove(ctx, "a", true) }()
	if pressed, err := s.WaitOffload(ctx, "n1", 5*time.Second); err != nil || !pressed {
		t.Fatalf("the holder was not rung: %v %v", pressed, err)
	}
	// A put of the key waits for the removal.
	putDone := make(chan error, 1)
	go func() {
		r, err := s.PutStart(ctx, masterapi.PutStartRequest{Key: "a", Size: 100, CRC: crcOf("a"), PreferredNode: "n1"})
		if err == nil {
			err = s.PutEnd(ctx, "a", r.PutToken)
		}
		putDone <- err
	}()
	select {
	case err := <-done:
		t.Fatalf("the forced removal of a leased object answered (%v) before its holder pulled the log", err)
	case err := <-putDone:
		t.Fatalf("a put of the key ended (%v) while its forced removal waited for the holder", err)
	case <-time.After(100 * time.Millisecond):
	}
	rep, err := s.PullRemovals(ctx, masterapi.PullRequest{Node: "n1"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.PullRemovals(ctx, masterapi.PullRequest{Node: "n1", DRAM: masterapi.RemovalCursor{Log: rep.Log, Seq: rep.Through}}); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the forced removal did not answer after its holder pulled it")
	}
	if err := <-putDone; err != nil {
		t.Fatalf("the put after the removal: %v", err)
	}
	if got := s.cnt.removalWaits.Load(); got != 1 {
		t.Fatalf("%d removal waits, want 1", got)
	}
	if pressed, err := s.WaitOffload(ctx, "n1", 0); err != nil || pressed {
		t.Fatalf("the holder is still rung after it applied the removal: %v %v", pressed, err)
	}

	// The holder does not pull: the removal answers when the lease ends.
	go func() { done <- s.Remove(ctx, "b", true) }()
	select {
	case err := <-done:
		t.Fatalf("answered (%v) inside the lease without the holder", err)
	case <-time.After(100 * time.Millisecond):
	}
	clk.Advance(s.cfg.DefaultKVLeaseTTL + time.Second)
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the forced removal did not answer at the lease's end")
	}
	if got := s.cnt.removalWaitsTimedOut.Load(); got != 1 {
		t.Fatalf("%d removal waits timed out, want 1", got)
	}
	if pressed, err := s.WaitOffload(ctx, "n1", 0); err != nil || pressed {
		t.Fatalf("the holder is still rung after the lease it was owed for ended: %v %v", pressed, err)
	}

	// No lease: no wait.
	start := time.Now()
	if err := s.Remove(ctx, "c", true); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > time.Second {
		t.Fatalf("the forced removal of an unleased object took %v", d)
	}
	if s.cnt.removalWaits.Load()+s.cnt.removalWaitsTimedOut.Load() != 2 {
		t.Fatal("the removal of an unleased object waited")
	}
}
