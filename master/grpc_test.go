package master

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/tierstore/tierstore/internal/errcode"
	"github.com/tierstore/tierstore/masterapi"
	"github.com/tierstore/tierstore/mastergrpc"
)

// serveGRPC serves s on a real 127.0.0.1 listener and returns its address.
func serveGRPC(t testing.TB, s *Service) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := NewServer(s)
	done := make(chan error, 1)
	go func() { done <- srv.Serve(lis) }()
	t.Cleanup(func() {
		srv.GracefulStop()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	return lis.Addr().String()
}

// remoteService serves s on a real 127.0.0.1 listener and dials it.
func remoteService(t testing.TB, s *Service) *mastergrpc.Client {
	t.Helper()
	r, err := mastergrpc.Dial(bg, serveGRPC(t, s))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

// TestRemoteMatchesService runs the main flows through *mastergrpc.Client over gRPC and
// checks that errors keep their codes (errors.Is) across the wire.
func TestRemoteMatchesService(t *testing.T) {
	s, clk := testService(t, func(c *Config) { c.EnableOffload = true; c.OffloadReadAdmissionThreshold = 2; c.ClientTTL = time.Hour })
	r := remoteService(t, s)
	var api masterapi.API = r
	ctx, cancel := context.WithTimeout(bg, 20*time.Second)
	defer cancel()

	if p, err := api.Ping(ctx, "a"); err != nil || p.Status != masterapi.NeedRemount || p.ClientTTL != time.Hour {
		t.Fatalf("ping unknown: %+v %v", p, err)
	}
	mount(t, api, "a", 1<<20)
	if p, _ := api.Ping(ctx, "a"); p.Status != masterapi.NodeOK {
		t.Fatal("ping after mount")
	}
	err := api.MountSegment(ctx, masterapi.MountRequest{Node: "a", Segment: "seg0", Size: 1 << 21})
	mustIs(t, err, errcode.ErrSegmentExists)

	rep := put(t, api, "k", 1000, "a")
	if rep.Node != "a" || rep.Endpoint != "a:1" || rep.Segment != "seg0" || rep.Length != 1000 || rep.Status != masterapi.Processing {
		t.Fatalf("replica %+v", rep)
	}
	_, err = api.PutStart(ctx, masterapi.PutStartRequest{Key: "k", Size: 1})
	mustIs(t, err, errcode.ErrObjectExists)
	if errcode.Of(err) != errcode.ObjectExists {
		t.Fatal("code lost")
	}
	_, err = api.GetReplicaList(ctx, "nope")
	mustIs(t, err, errcode.ErrObjectNotFound)
	if errors.Is(err, errcode.ErrReplicaGone) {
		t.Fatal("wrong sentinel matched")
	}

	info, err := api.GetReplicaList(ctx, "k")
	if err != nil || info.Size != 1000 || info.CRC != crcOf("k") || kinds(info) != "DRAM@a " || info.LeaseDeadline.IsZero() {
		t.Fatalf("info %+v %v", info, err)
	}
	mustIs(t, api.Remove(ctx, "k", false), errcode.ErrObjectHasLease)

	// Batches: per-item codes.
	res, err := api.BatchGetReplicaList(ctx, []string{"k", "nope", ""})
	if err != nil || res[0].Err != nil || !errors.Is(res[1].Err, errcode.ErrObjectNotFound) || !errors.Is(res[2].Err, errcode.ErrInvalidKey) {
		t.Fatalf("batch %+v %v", res, err)
	}
	ex, err := api.BatchExistKey(ctx, []string{"k", "nope"})
	if err != nil || !ex[0].Exists || ex[1].Exists || ex[1].Err != nil {
		t.Fatalf("batch exist %+v %v", ex, err)
	}
	// The k lookups above counted (threshold 2): one task queued.
	ts, err := heartbeat(api, "a", 10)
	if err != nil || len(ts) != 1 || ts[0].Key != "k" || ts[0].CRC != crcOf("k") {
		t.Fatalf("tasks %+v %v", ts, err)
	}
	// Offload-path lookups over the wire do not count.
	put(t, api, "q", 10, "a")
	for i := 0; i < 3; i++ {
		api.ExistKey(masterapi.WithOffloadPath(ctx), "q")
		api.BatchGetReplicaList(masterapi.WithOffloadPath(ctx), []string{"q"})
	}
	if ts, _ := heartbeat(api, "a", 10); len(ts) != 0 {
		t.Fatalf("offload-path lookups counted: %v", taskKeys(ts))
	}
	errs, err := api.NotifyOffloadSuccess(ctx, masterapi.NotifyRequest{Node: "a",
		Persisted: []masterapi.SSDObject{{Key: "k", Size: 1000, CRC: crcOf("k")}, {Key: "q", Size: 10, CRC: 0xbad}},
		Failed:    []masterapi.OffloadFailure{{Key: "zz", Retryable: true}}})
	if err != nil || errs[0] != nil || !errors.Is(errs[1], errcode.ErrChecksumConflict) {
		t.Fatalf("notify %v %v", errs, err)
	}
	_, err = api.NotifyOffloadSuccess(ctx, masterapi.NotifyRequest{Node: "ghost"})
	mustIs(t, err, errcode.ErrNeedRemount)

	bp, err := api.BatchPutStart(ctx, []masterapi.PutStartRequest{{Key: "b1", Size: 10}, {Key: "k", Size: 10}})
	if err != nil || bp[0].Err != nil || bp[0].Replica.Node != "a" || !errors.Is(bp[1].Err, errcode.ErrObjectExists) {
		t.Fatalf("batch put %+v %v", bp, err)
	}
	be, err := api.BatchPutEnd(ctx, []masterapi.PutRef{{Key: "b1", Token: bp[0].Replica.PutToken}, {Key: "none", Token: bp[0].Replica.PutToken}})
	if err != nil || be[0] != nil || !errors.Is(be[1], masterapi.ErrStalePut) {
		t.Fatalf("batch put end %v %v", be, err)
	}
	bp, err = api.BatchPutStart(ctx, []masterapi.PutStartRequest{{Key: "b2", Size: 10}})
	if err != nil {
		t.Fatal(err)
	}
	if bv, err := api.BatchPutRevoke(ctx, []masterapi.PutRef{{Key: "b2", Token: bp[0].Replica.PutToken}}); err != nil || bv[0] != nil {
		t.Fatal(bv, err)
	}
	if errs, err := api.ReRegisterSSDColumns(ctx, "a", masterapi.ColumnsOf([]masterapi.SSDObject{{Key: "d", Size: 5, CRC: 5}})); err != nil || errs[0] != nil {
		t.Fatal(errs, err)
	}
	if res, err := api.EvictSSDReplica(ctx, "a", []string{"d"}); err != nil || res.Dropped != 1 || res.Keep != nil {
		t.Fatal(res, err)
	}
	// Drops k's SSD replica; "zz" is unknown, so the node must delete it.
	if res, err := reconcileAll(api, "a", []string{"zz"}); err != nil || res.Dropped != 1 ||
		len(res.Unwanted) != 1 || res.Unwanted[0] != "zz" {
		t.Fatal(res, err)
	}
	_, err = reconcileAll(api, "ghost", nil)
	mustIs(t, err, errcode.ErrNeedRemount)
	// ReportBadReplica over the wire: a wrong replica is REPLICA_NOT_FOUND,
	// an unknown key OBJECT_NOT_FOUND.
	mustIs(t, api.ReportBadReplica(ctx, "k", crcOf("k"), masterapi.Replica{Kind: masterapi.SSD, Node: "a"}), errcode.ErrReplicaNotFound)
	mustIs(t, api.ReportBadReplica(ctx, "nope", 1, masterapi.Replica{Kind: masterapi.DRAM, Node: "a"}), errcode.ErrObjectNotFound)
	clk.Advance(2 * time.Hour)
	if n, err := api.EvictDRAM(ctx, nil, true); err != nil || n.Dropped != 0 {
		t.Fatal(n, err)
	}
	st, err := api.Stats(ctx)
	if err != nil || st.Objects != 3 || st.Nodes != 1 || st.SegmentCapacity != 1<<20 {
		t.Fatalf("stats %+v %v", st, err)
	}
	if n, err := api.RemoveAll(ctx, false); err != nil || n != 3 {
		t.Fatalf("remove all %d %v", n, err)
	}
	if err := api.UnmountSegment(ctx, "a", "seg0"); err != nil {
		t.Fatal(err)
	}
	mustIs(t, api.UnmountSegment(ctx, "a", "seg0"), errcode.ErrSegmentNotFound)
}

func TestRemoteTransportError(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	lis.Close() // nothing listens there now
	r, err := mastergrpc.Dial(bg, addr)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	ctx, cancel := context.WithTimeout(bg, 5*time.Second)
	defer cancel()
	_, err = r.Ping(ctx, "a")
	if !errors.Is(err, errcode.ErrRPCFail) && !errors.Is(err, errcode.ErrContextCanceled) {
		t.Fatalf("got %v", err)
	}
}

// TestRemoteMooncake4508: the replay's answers survive the wire: after a
// lookup hit and the holder's death, a remote load gets REPLICA_IS_GONE
// (-712), not OBJECT_NOT_FOUND.
func TestRemoteMooncake4508(t *testing.T) {
	s, _ := testService(t, func(c *Config) { c.ClientTTL = time.Hour })
	r := remoteService(t, s)
	mount(t, r, "a", 1<<20)
	put(t, r, "k", 100, "a")
	res, err := r.BatchExistKey(bg, []string{"k"})
	if err != nil || !res[0].Exists {
		t.Fatalf("lookup: %+v %v", res, err)
	}
	s.ExpireNode("a")
	_, err = r.GetReplicaList(bg, "k")
	if !errors.Is(err, errcode.ErrReplicaGone) || errcode.Of(err) != -712 {
		t.Fatalf("single load: %v", err)
	}
	br, err := r.BatchGetReplicaList(bg, []string{"k"})
	if err != nil || !errors.Is(br[0].Err, errcode.ErrReplicaGone) {
		t.Fatalf("batch load: %+v %v", br, err)
	}
	if p, _ := r.Ping(bg, "a"); p.Status != masterapi.NeedRemount {
		t.Fatal("no NEED_REMOUNT")
	}
}
