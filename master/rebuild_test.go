package master

import (
	"fmt"
	"testing"
	"time"

	"github.com/tierstore/tierstore/internal/errcode"
	pb "github.com/tierstore/tierstore/internal/rpcpb"
	"github.com/tierstore/tierstore/masterapi"
)

// A single master opens the rebuild window when it restarts on the removal
// log a predecessor wrote (its state_dir: the nodes keep their objects and
// re-register them), not at its first start: misses are answered "ask
// again" for rebuild_window and while a segment is held, re-registered
// objects honour the predecessor's leases, and the offload admission of
// rebuilt DRAM objects runs when the window closes.
func TestRestartOpensRebuildWindow(t *testing.T) {
	first, clk := testService(t, func(c *Config) { c.EnableOffload = true })
	if first.Rebuilding() {
		t.Fatal("a first start (a new removal log) opened a rebuild window")
	}
	c1 := serveHA(t, first)
	_, err := c1.GetReplicaList(bg, &pb.LookupRequest{Key: []byte("miss")})
	mustIs(t, errcode.FromStatus(err), errcode.ErrObjectNotFound)

	cfg := first.Config() // the same removal store: a restart on it
	first.Close()
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if !s.Rebuilding() {
		t.Fatal("a restart on the predecessor's removal log opened no rebuild window")
	}
	c := serveHA(t, s)
	_, err = c.GetReplicaList(bg, &pb.LookupRequest{Key: []byte("miss")})
	mustIs(t, errcode.FromStatus(err), errcode.ErrUnavailable)
	if _, err := c.ExistKey(bg, &pb.LookupRequest{Key: []byte("miss")}); !errorsIsUnavailable(err) {
		t.Fatalf("exists of a miss inside the window: %v", err)
	}

	holdMount(t, s, "a", 1<<20)
	objs := []masterapi.DRAMObject{{Key: "k", Offset: 0, Length: 1000, CRC: 1, PutToken: s.RemovalLog().Origin + 1}}
	if errs, err := s.ReRegisterDRAMObjects(bg, "a", "seg0", objs, true); err != nil || errs[0] != nil {
		t.Fatal(errs, err)
	}
	if _, err := c.GetReplicaList(bg, &pb.LookupRequest{Key: []byte("k")}); err != nil {
		t.Fatalf("a re-registered object inside the window: %v", err)
	}
	mustIs(t, s.Remove(bg, "k", false), errcode.ErrObjectHasLease) // the predecessor's leases are honoured
	s.Tick()
	if tasks, _ := heartbeat(s, "a", 0); len(tasks) != 0 {
		t.Fatalf("offload queued during the rebuild: %+v", tasks)
	}
	clk.Advance(cfg.RebuildWindow + time.Millisecond)
	if s.Rebuilding() {
		t.Fatal("the window stayed open past rebuild_window with no segment held")
	}
	_, err = c.GetReplicaList(bg, &pb.LookupRequest{Key: []byte("miss")})
	mustIs(t, errcode.FromStatus(err), errcode.ErrObjectNotFound)
	s.Tick()
	if tasks, _ := heartbeat(s, "a", 0); len(tasks) != 1 || tasks[0].Key != "k" {
		t.Fatalf("after the window the rebuilt DRAM object's offload was not queued again: %+v", tasks)
	}
}

func errorsIsUnavailable(err error) bool {
	return err != nil && errcode.Of(errcode.FromStatus(err)) == errcode.UnavailableStatus
}

// The window stays open while a node's re-registration chunks keep
// arriving after rebuild_window (10M SSD objects take seconds): until
// rebuildQuiet after the last chunk, and at most rebuildMost past the
// window; a Service that opened no window ignores them.
func TestRebuildWindowWaitsForSSDChunks(t *testing.T) {
	first, clk := testService(t, nil)
	mount(t, first, "a", 1<<20)
	chunk := func(s *Service, i int) {
		t.Helper()
		objs := []masterapi.SSDObject{{Key: fmt.Sprint("ssd", i), Size: 10, CRC: 2}}
		if errs, err := s.ReRegisterSSDObjects(bg, "a", objs); err != nil || errs[0] != nil {
			t.Fatal(errs, err)
		}
	}
	chunk(first, 0)
	if first.Rebuilding() {
		t.Fatal("a first start's re-registrations opened a window")
	}
	cfg := first.Config()
	first.Close()
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	mount(t, s, "a", 1<<20)
	clk.Advance(cfg.RebuildWindow + time.Millisecond)
	if s.Rebuilding() {
		t.Fatal("open past rebuild_window with no re-registration")
	}
	i := 1
	for ; s.now() < s.rebuild.until+rebuildMost.Nanoseconds(); i++ {
		chunk(s, i)
		if !s.Rebuilding() {
			t.Fatalf("closed while chunks arrive (chunk %d)", i)
		}
		clk.Advance(rebuildQuiet / 2)
	}
	chunk(s, i)
	if s.Rebuilding() {
		t.Fatal("open past rebuildMost after the window")
	}
	// Within rebuildMost: closes rebuildQuiet after the last chunk.
	s2, err := New(s.Config())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s2.Close() })
	mount(t, s2, "a", 1<<20)
	clk.Advance(cfg.RebuildWindow + time.Millisecond)
	chunk(s2, 0)
	clk.Advance(rebuildQuiet - time.Millisecond)
	if !s2.Rebuilding() {
		t.Fatal("closed before rebuildQuiet after the last chunk")
	}
	clk.Advance(time.Millisecond)
	if s2.Rebuilding() {
		t.Fatal("open rebuildQuiet after the last chunk")
	}
}
