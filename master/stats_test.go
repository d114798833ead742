package master

import (
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/tierstore/tierstore/masterapi"
)

// TestStatsPerNode: Stats has one row per node with its segment figures and
// its replicas and bytes per tier, the same over gRPC; a retired
// incarnation whose replicas are kept for a lease is listed as not alive
// until they go.
func TestStatsPerNode(t *testing.T) {
	s, clk := offloadService(t, nil)
	r := remoteService(t, s)
	mount(t, s, "a", 1<<20)
	mount(t, s, "b", 2<<20)
	put(t, s, "x", 100, "a")
	put(t, s, "y", 5000, "a")
	put(t, s, "z", 300, "b")
	if _, err := s.ReRegisterSSDObjects(bg, "b", []masterapi.SSDObject{{Key: "y", Size: 5000, CRC: crcOf("y")}, {Key: "w", Size: 70, CRC: 1}}); err != nil {
		t.Fatal(err)
	}
	st, err := s.Stats(bg)
	if err != nil {
		t.Fatal(err)
	}
	got := fmt.Sprintf("%+v", st.PerNode)
	want := fmt.Sprintf("%+v", []masterapi.NodeStats{
		{Node: "a", Endpoint: "a:1", Alive: true, Segments: 1, SegmentSize: 1 << 20, SegmentUsed: alignUp(100) + alignUp(5000),
			DRAMReplicas: 2, DRAMBytes: 5100, OffloadQueued: 2},
		{Node: "b", Endpoint: "b:1", Alive: true, Segments: 1, SegmentSize: 2 << 20, SegmentUsed: alignUp(300),
			DRAMReplicas: 1, DRAMBytes: 300, SSDReplicas: 2, SSDBytes: 5070, OffloadQueued: 1},
	})
	if got != want {
		t.Fatalf("per-node stats\n got %s\nwant %s", got, want)
	}
	if rst, err := r.Stats(bg); err != nil || !reflect.DeepEqual(rst, st) {
		t.Fatalf("over gRPC: %+v %v\nin-process: %+v", rst, err, st)
	}

	// a restarts with a new incarnation while x is leased: the old
	// incarnation's unreadable replica stays for the lease.
	s.ExistKey(bg, "x")
	if err := s.MountSegment(bg, masterapi.MountRequest{Node: "a", Endpoint: "a:1", Segment: "seg1", Size: 1 << 20, Incarnation: "two"}); err != nil {
		t.Fatal(err)
	}
	st, _ = s.Stats(bg)
	if len(st.PerNode) != 3 {
		t.Fatalf("rows %+v", st.PerNode)
	}
	if old := st.PerNode[2]; old.Node != "a" || old.Alive || old.DRAMReplicas != 1 || old.DRAMBytes != 100 || old.Segments != 0 {
		t.Fatalf("retired row %+v", old)
	}
	if cur := st.PerNode[0]; cur.Node != "a" || !cur.Alive || cur.Incarnation != "two" || cur.DRAMReplicas != 0 || cur.SegmentUsed != 0 {
		t.Fatalf("new incarnation row %+v", cur)
	}
	// The totals count live replicas only: z's DRAM replica on b, y's and
	// w's SSD replicas on b; not x's, unreadable on the retired a.
	if st.DRAMReplicas != 1 || st.DRAMBytes != 300 || st.SSDReplicas != 2 || st.SSDBytes != 5070 || st.Objects != 4 {
		t.Fatalf("totals with a retired incarnation: %+v", st)
	}
	clk.Advance(time.Hour)
	s.Tick()
	if st, _ = s.Stats(bg); len(st.PerNode) != 2 || st.PerNode[0].Node != "a" || !st.PerNode[0].Alive {
		t.Fatalf("after the lease: %+v", st.PerNode)
	}
}
