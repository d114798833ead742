package master

import (
	"errors"
	"fmt"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	"github.com/tierstore/tierstore/internal/errcode"
	pb "github.com/tierstore/tierstore/internal/rpcpb"
	"github.com/tierstore/tierstore/masterapi"
	"github.com/tierstore/tierstore/mastergrpc"
)

// haService is a testService that leads term 7 behind a fence the test
// controls (nil: valid), with a rebuild window of 2 s on its manual clock.
func haService(t *testing.T, mut func(*Config)) (*Service, *ManualClock, *atomic.Pointer[error]) {
	t.Helper()
	var fenceErr atomic.Pointer[error]
	s, clk := testService(t, func(c *Config) {
		c.RebuildWindow = 2 * time.Second
		c.HA = HAConfig{Term: 7, Fence: func() error {
			if p := fenceErr.Load(); p != nil {
				return *p
			}
			return nil
		}}
		if mut != nil {
			mut(c)
		}
	})
	return s, clk, &fenceErr
}

// Once the fence is down, every call is answered ErrNotLeader (the code
// UNAVAILABLE_IN_CURRENT_STATUS) and changes nothing.
func TestFenceRefusesEveryCall(t *testing.T) {
	s, _, fence := haService(t, func(c *Config) { c.EnableOffload = true })
	mount(t, s, "a", 1<<20)
	put(t, s, "k", 1000, "a")
	lost := errors.New("lease not confirmed")
	fence.Store(&lost)

	_, err := s.PutStart(bg, masterapi.PutStartRequest{Key: "new", Size: 10})
	mustIs(t, err, ErrNotLeader)
	mustIs(t, err, errcode.ErrUnavailable)
	mustIs(t, err, lost)
	mustIs(t, s.Remove(bg, "k", true), ErrNotLeader)
	_, err = s.GetReplicaList(bg, "k")
	mustIs(t, err, ErrNotLeader)
	_, err = s.Ping(bg, "a")
	mustIs(t, err, ErrNotLeader)
	mustIs(t, s.MountSegment(bg, masterapi.MountRequest{Node: "b", Segment: "s", Size: 1 << 20}), ErrNotLeader)
	_, err = heartbeat(s, "a", 0)
	mustIs(t, err, ErrNotLeader)
	_, err = s.ReRegisterDRAMObjects(bg, "a", "seg0", nil, true)
	mustIs(t, err, ErrNotLeader)
	_, err = s.EvictDRAM(bg, nil, true)
	mustIs(t, err, ErrNotLeader)

	fence.Store(nil) // (a real fence never comes back: only to see what changed)
	if _, err := s.GetReplicaList(bg, "k"); err != nil {
		t.Fatalf("the object changed while the fence was down: %v", err)
	}
	if st, _ := s.Stats(bg); st.Objects != 1 || st.Nodes != 1 || st.OffloadQueued != 1 {
		t.Fatalf("state changed while the fence was down: %+v", st)
	}
}

// Ping answers and offload tasks carry the leadership term.
func TestPingAndTasksCarryTerm(t *testing.T) {
	s, _, _ := haService(t, func(c *Config) { c.EnableOffload = true })
	if p, err := s.Ping(bg, "a"); err != nil || p.Term != 7 || p.Status != masterapi.NeedRemount {
		t.Fatalf("ping: %+v %v", p, err)
	}
	mount(t, s, "a", 1<<20)
	put(t, s, "k", 1000, "a")
	tasks, err := heartbeat(s, "a", 0)
	if err != nil || len(tasks) != 1 || tasks[0].Term != 7 {
		t.Fatalf("tasks %+v %v", tasks, err)
	}
	plain, _ := testService(t, nil)
	if p, _ := plain.Ping(bg, "a"); p.Term != 0 {
		t.Fatalf("a master without HA answers term %d", p.Term)
	}
}

func holdMount(t *testing.T, s *Service, node string, size int64) {
	t.Helper()
	if err := s.MountSegment(bg, masterapi.MountRequest{Node: node, Endpoint: node + ":1", Segment: "seg0", Size: size, HoldAllocation: true}); err != nil {
		t.Fatal(err)
	}
}

// A held segment takes no put until its DRAM re-registration is done; the
// re-registered objects are readable at once, their ranges are never
// handed to a new put, and later tokens are larger than theirs.
func TestReRegisterDRAMObjects(t *testing.T) {
	s, _ := testService(t, nil)
	holdMount(t, s, "a", 64<<10)
	for _, pref := range []string{"", "a"} {
		if _, err := s.PutStart(bg, masterapi.PutStartRequest{Key: "p", Size: 100, PreferredNode: pref}); !errors.Is(err, errcode.ErrNoAvailableHandle) {
			t.Fatalf("put into a held segment (preferred %q): %v", pref, err)
		}
	}
	const tok = 1 << 63 // above this master's own tokens (unix ms << 22)
	objs := []masterapi.DRAMObject{
		{Key: "a", Offset: 0, Length: 1000, CRC: 11, PutToken: tok},
		{Key: "b", Offset: 1024, Length: 500, CRC: 22, PutToken: tok + 1, HardPin: true},
	}
	errs, err := s.ReRegisterDRAMObjects(bg, "a", "seg0", objs, false)
	if err != nil || errs[0] != nil || errs[1] != nil {
		t.Fatalf("re-register: %v %v", errs, err)
	}
	info, err := s.GetReplicaList(bg, "a")
	if err != nil || len(info.Replicas) != 1 || info.CRC != 11 || info.Size != 1000 {
		t.Fatalf("a: %+v %v", info, err)
	}
	if r := info.Replicas[0]; r.Kind != masterapi.DRAM || r.Status != masterapi.Complete || r.Offset != 0 || r.PutToken != tok {
		t.Fatalf("a's replica %+v", r)
	}
	if _, err := s.PutStart(bg, masterapi.PutStartRequest{Key: "p", Size: 100}); !errors.Is(err, errcode.ErrNoAvailableHandle) {
		t.Fatalf("put before done: %v", err)
	}
	if errs, err := s.ReRegisterDRAMObjects(bg, "a", "seg0", objs, true); err != nil || errs[0] != nil || errs[1] != nil {
		t.Fatalf("the same call again (done): %v %v", errs, err)
	}
	if st, _ := s.Stats(bg); st.Objects != 2 || st.DRAMReplicas != 2 || st.SegmentUsed != 1024+512 {
		t.Fatalf("after a repeated call: %+v", st)
	}
	// The put that wrote a's range ends again: a no-op, as any repeated PutEnd.
	if err := s.PutEnd(bg, "a", tok); err != nil {
		t.Fatalf("PutEnd of the re-registered put: %v", err)
	}
	for i := range 40 { // fill the segment: no range may overlap a or b
		r, err := s.PutStart(bg, masterapi.PutStartRequest{Key: fmt.Sprint("p", i), Size: 1500})
		if errors.Is(err, errcode.ErrNoAvailableHandle) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if r.Offset < 1536 || r.PutToken <= tok+1 {
			t.Fatalf("new put %+v overlaps a re-registered range or has an older token", r)
		}
	}
	if err := s.Remove(bg, "b", true); err != nil {
		t.Fatal(err)
	}
	if err := s.Check(); err != nil {
		t.Fatal(err)
	}
}

// Conflicts: an overlapping range, an older put of a key, other bytes than
// the SSD copies; a newer put of a key replaces the older DRAM replica.
func TestReRegisterDRAMConflicts(t *testing.T) {
	s, _ := testService(t, nil)
	holdMount(t, s, "a", 64<<10)
	holdMount(t, s, "b", 64<<10)
	// Tokens of the previous master: above the removal log's origin (a
	// record older than the log is refused, TestRemovedRecordRefused).
	tok := s.RemovalLog().Origin + 1<<40
	reg := func(node string, m masterapi.DRAMObject) error {
		t.Helper()
		errs, err := s.ReRegisterDRAMObjects(bg, node, "seg0", []masterapi.DRAMObject{m}, false)
		if err != nil {
			t.Fatal(err)
		}
		return errs[0]
	}
	if err := reg("a", masterapi.DRAMObject{Key: "k", Offset: 0, Length: 1000, CRC: 1, PutToken: tok}); err != nil {
		t.Fatal(err)
	}
	mustIs(t, reg("a", masterapi.DRAMObject{Key: "x", Offset: 512, Length: 100, CRC: 1, PutToken: tok + 5}), errcode.ErrInvalidParams)
	mustIs(t, reg("b", masterapi.DRAMObject{Key: "k", Offset: 0, Length: 1000, CRC: 1, PutToken: tok - 1}), errcode.ErrObjectExists)
	// A newer put of k on b: it replaces a's replica, whose range is freed.
	if err := reg("b", masterapi.DRAMObject{Key: "k", Offset: 4096, Length: 2000, CRC: 2, PutToken: tok + 1}); err != nil {
		t.Fatal(err)
	}
	info, err := s.GetReplicaList(bg, "k")
	if err != nil || len(info.Replicas) != 1 || info.Replicas[0].Node != "b" || info.CRC != 2 || info.Size != 2000 {
		t.Fatalf("k after the newer put: %+v %v", info, err)
	}
	if err := reg("a", masterapi.DRAMObject{Key: "x", Offset: 512, Length: 100, CRC: 1, PutToken: tok + 5}); err != nil {
		t.Fatalf("a's freed range: %v", err)
	}
	// An SSD copy with other bytes wins over a later DRAM copy.
	if errs, err := s.ReRegisterSSDObjects(bg, "a", []masterapi.SSDObject{{Key: "d", Size: 300, CRC: 9}}); err != nil || errs[0] != nil {
		t.Fatal(errs, err)
	}
	mustIs(t, reg("b", masterapi.DRAMObject{Key: "d", Offset: 8192, Length: 300, CRC: 8, PutToken: tok + 2}), errcode.ErrChecksumConflict)
	if err := reg("b", masterapi.DRAMObject{Key: "d", Offset: 8192, Length: 300, CRC: 9, PutToken: tok + 2}); err != nil {
		t.Fatal(err)
	}
	if info, err := s.GetReplicaList(bg, "d"); err != nil || kinds(info) != "DRAM@b SSD@a " {
		t.Fatalf("d: %q %v", kinds(info), err)
	}
	mustIs(t, reg("a", masterapi.DRAMObject{Key: "y", Offset: 64<<10 - 64, Length: 100, CRC: 1, PutToken: tok}), errcode.ErrInvalidParams)
	mustIs(t, reg("a", masterapi.DRAMObject{Key: "y", Offset: 100, Length: 100, CRC: 1, PutToken: tok}), errcode.ErrInvalidParams)
	mustIs(t, reg("a", masterapi.DRAMObject{Key: "y", Offset: 20000, Length: 100, CRC: 1}), errcode.ErrInvalidParams)
	_, err = s.ReRegisterDRAMObjects(bg, "nobody", "seg0", nil, true)
	mustIs(t, err, errcode.ErrNeedRemount)
	_, err = s.ReRegisterDRAMObjects(bg, "a", "other", nil, true)
	mustIs(t, err, errcode.ErrSegmentNotFound)
}

// serveHA serves s (NewServer installs its interceptor) on 127.0.0.1 and
// returns a raw client.
func serveHA(t *testing.T, s *Service) pb.MasterClient {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := NewServer(s)
	go func() { _ = srv.Serve(lis) }()
	cc, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close(); srv.Stop() })
	return pb.NewMasterClient(cc)
}

// While the rebuild window is open (its time, or a held segment), a miss
// is answered "ask again"; a hit is served at once; every answer carries
// the term.
func TestRebuildWindowTurnsMissesIntoRetry(t *testing.T) {
	s, clk, _ := haService(t, nil)
	c := serveHA(t, s)
	mount(t, s, "a", 1<<20)
	put(t, s, "hit", 100, "a")
	miss := &pb.LookupRequest{Key: []byte("miss")}
	var tr metadata.MD
	if _, err := c.GetReplicaList(bg, &pb.LookupRequest{Key: []byte("hit")}, grpc.Trailer(&tr)); err != nil {
		t.Fatalf("a hit inside the window: %v", err)
	}
	if v := tr.Get(mastergrpc.TermTrailer); len(v) != 1 || v[0] != "7" {
		t.Fatalf("term trailer %v", tr)
	}
	_, err := c.GetReplicaList(bg, miss)
	mustIs(t, errcode.FromStatus(err), errcode.ErrUnavailable)
	if r, err := c.ExistKey(bg, miss); !errors.Is(errcode.FromStatus(err), errcode.ErrUnavailable) {
		t.Fatalf("exists of a miss inside the window: %v %v", r, err)
	}
	_, err = c.PutEnd(bg, &pb.KeyRequest{Key: []byte("miss"), PutToken: 5})
	mustIs(t, errcode.FromStatus(err), errcode.ErrUnavailable)
	res, err := c.BatchGetReplicaList(bg, &pb.BatchLookupRequest{Keys: [][]byte{[]byte("hit"), []byte("miss")}})
	mustIs(t, errcode.FromStatus(err), errcode.ErrUnavailable)
	_ = res

	clk.Advance(3 * time.Second)
	_, err = c.GetReplicaList(bg, miss)
	mustIs(t, errcode.FromStatus(err), errcode.ErrObjectNotFound)
	holdMount(t, s, "b", 1<<20) // a node re-registering: the window reopens
	_, err = c.GetReplicaList(bg, miss)
	mustIs(t, errcode.FromStatus(err), errcode.ErrUnavailable)
	if _, err := s.ReRegisterDRAMObjects(bg, "b", "seg0", nil, true); err != nil {
		t.Fatal(err)
	}
	// Re-registrations keep it open until rebuildQuiet after the last
	// (a node's SSD objects come next, in chunks).
	_, err = c.GetReplicaList(bg, miss)
	mustIs(t, errcode.FromStatus(err), errcode.ErrUnavailable)
	clk.Advance(rebuildQuiet)
	_, err = c.GetReplicaList(bg, miss)
	mustIs(t, errcode.FromStatus(err), errcode.ErrObjectNotFound)
}

// Rebuilt objects honour the previous leader's leases (a lease of
// default_kv_lease_ttl from their re-registration); once the rebuild is
// over, the offloads the previous leader had queued are queued again.
func TestRebuiltLeaseAndReadmission(t *testing.T) {
	s, clk, _ := haService(t, func(c *Config) { c.EnableOffload = true })
	holdMount(t, s, "a", 1<<20)
	objs := []masterapi.DRAMObject{{Key: "k", Offset: 0, Length: 1000, CRC: 1, PutToken: s.RemovalLog().Origin + 1}}
	if errs, err := s.ReRegisterDRAMObjects(bg, "a", "seg0", objs, true); err != nil || errs[0] != nil {
		t.Fatal(errs, err)
	}
	// SSD-only objects, which the readmission has nothing to do for, and
	// does not visit.
	var ssd []masterapi.SSDObject
	for i := range 100 {
		ssd = append(ssd, masterapi.SSDObject{Key: fmt.Sprint("ssd", i), Size: 10, CRC: 2})
	}
	if _, err := s.ReRegisterSSDObjects(bg, "a", ssd); err != nil {
		t.Fatal(err)
	}
	mustIs(t, s.Remove(bg, "k", false), errcode.ErrObjectHasLease)
	s.Tick()
	if tasks, _ := heartbeat(s, "a", 0); len(tasks) != 0 {
		t.Fatalf("offload queued during the rebuild: %+v", tasks)
	}
	clk.Advance(2500 * time.Millisecond)
	before := s.scanVisits.Load()
	s.Tick()
	if visits := s.scanVisits.Load() - before; visits != 1 {
		t.Fatalf("the readmission visited %d objects; want the one with a DRAM replica (of 101)", visits)
	}
	tasks, err := heartbeat(s, "a", 0)
	if err != nil || len(tasks) != 1 || tasks[0].Key != "k" || tasks[0].Term != 7 {
		t.Fatalf("tasks after the rebuild: %+v %v", tasks, err)
	}
	clk.Advance(s.Config().DefaultKVLeaseTTL)
	if err := s.Remove(bg, "k", false); !errors.Is(err, errcode.ErrObjectHasLease) { // pinned by its offload task now
		t.Fatalf("remove: %v", err)
	}
}
