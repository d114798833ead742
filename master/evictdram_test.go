package master

import (
	"testing"

	"github.com/tierstore/tierstore/masterapi"
)

// TestEvictDRAMCountsSkips: EvictDRAM answers, besides the replicas it
// dropped, every DRAM replica it left in place by reason, so that an
// operator's "dropped 0" comes with a why.
func TestEvictDRAMCountsSkips(t *testing.T) {
	s, _ := offloadService(t, nil)
	mount(t, s, "a", 1<<20)
	for _, k := range []string{"ok", "leased", "nodisk", "pending"} {
		put(t, s, k, 64, "a")
	}
	putWith(t, s, masterapi.PutStartRequest{Key: "hard", Size: 64, CRC: crcOf("hard"), HardPin: true})
	if _, err := s.PutStart(bg, masterapi.PutStartRequest{Key: "prog", Size: 64, CRC: crcOf("prog")}); err != nil {
		t.Fatal(err)
	}
	// A reader of "leased" is given only its DRAM replica.
	if _, err := s.GetReplicaList(bg, "leased"); err != nil {
		t.Fatal(err)
	}
	tasks, err := heartbeat(s, "a", 0)
	if err != nil {
		t.Fatal(err)
	}
	req := masterapi.NotifyRequest{Node: "a"}
	for _, tk := range tasks {
		switch tk.Key {
		case "ok", "leased":
			req.Persisted = append(req.Persisted, masterapi.SSDObject{Key: tk.Key, Size: tk.Size, CRC: tk.CRC})
		case "nodisk":
			req.Failed = append(req.Failed, masterapi.OffloadFailure{Key: tk.Key, Reason: "too large"})
		case "pending":
			// in flight: the node has not answered yet
		default:
			req.Persisted = append(req.Persisted, masterapi.SSDObject{Key: tk.Key, Size: tk.Size, CRC: tk.CRC})
		}
	}
	if _, err := s.NotifyOffloadSuccess(bg, req); err != nil {
		t.Fatal(err)
	}
	res, err := s.EvictDRAM(bg, nil, true)
	want := masterapi.EvictDRAMResult{Dropped: 1, Leased: 1, NoSSDCopy: 1, OffloadPending: 1, HardPinned: 1, PutInProgress: 1}
	if err != nil || res != want {
		t.Fatalf("EvictDRAM(all) = %+v, %v; want %+v", res, err, want)
	}
	res, err = s.EvictDRAM(bg, []string{"ok", "nope", "leased"}, false)
	want = masterapi.EvictDRAMResult{NotInDRAM: 1, NotFound: 1, Leased: 1}
	if err != nil || res != want {
		t.Fatalf("EvictDRAM(keys) = %+v, %v; want %+v", res, err, want)
	}
	if got := res.SkipReasons(); got != "1 leased by a reader that has only the DRAM copy, 1 not found, 1 not in DRAM" {
		t.Fatalf("SkipReasons: %q", got)
	}
	// Over gRPC: the same figures.
	r := remoteService(t, s)
	if res, err := r.EvictDRAM(bg, []string{"ok", "nope", "leased"}, false); err != nil || res != want {
		t.Fatalf("remote EvictDRAM = %+v, %v; want %+v", res, err, want)
	}
}
