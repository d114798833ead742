package master

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/tierstore/tierstore/internal/errcode"
	pb "github.com/tierstore/tierstore/internal/rpcpb"
	"github.com/tierstore/tierstore/masterapi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// overlaps reports whether two DRAM replicas share bytes of one segment.
func overlaps(a, b masterapi.Replica) bool {
	return a.Node == b.Node && a.Segment == b.Segment && a.Offset < b.Offset+alignUp(b.Length) && b.Offset < a.Offset+alignUp(a.Length)
}

// TestPutTokensGrow guards issue 9 item 1 (put ownership, invariant 8): every
// PutStart answers a non-zero token larger than every token before it, in
// batches too, and a master started after another (a restart) issues larger
// tokens than its predecessor did, even when the predecessor ran ahead of the
// clock.
func TestPutTokensGrow(t *testing.T) {
	s1, clk := testService(t, nil)
	mount(t, s1, "a", 1<<20)
	var last uint64
	for i := 0; i < 50; i++ {
		r := put(t, s1, string(rune('a'+i%26))+string(rune('A'+i/26)), 64, "a")
		if r.PutToken <= last {
			t.Fatalf("put %d: token %d after %d", i, r.PutToken, last)
		}
		last = r.PutToken
	}
	res, err := s1.BatchPutStart(bg, []masterapi.PutStartRequest{{Key: "b1", Size: 64}, {Key: "b2", Size: 64}})
	if err != nil || res[0].Err != nil || res[1].Err != nil || res[0].Replica.PutToken <= last || res[1].Replica.PutToken <= res[0].Replica.PutToken {
		t.Fatalf("batch tokens after %d: %+v %v", last, res, err)
	}
	last = res[1].Replica.PutToken
	if last < uint64(t0.UnixMilli())<<tokenClockShift {
		t.Fatalf("token %d below the clock's floor", last)
	}
	// The restarted master starts one millisecond later on the clock.
	clk.Advance(time.Millisecond)
	s2, err := New(s1.Config())
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	mount(t, s2, "a", 1<<20)
	if r := put(t, s2, "after-restart", 64, "a"); r.PutToken <= last {
		t.Fatalf("restarted master issued %d, its predecessor had reached %d", r.PutToken, last)
	}
	// A source that issued more tokens than the clock's millisecond holds
	// keeps counting from its last token.
	var ts tokenSource
	now := t0.UnixNano()
	a := ts.next(now)
	ts.last.Store(a + 1<<tokenClockShift) // ran a whole millisecond ahead
	if b := ts.next(now); b != a+1<<tokenClockShift+1 {
		t.Fatalf("next after running ahead: %d, want %d", b, a+1<<tokenClockShift+1)
	}
}

// TestStaleTokenNeverCompletesAnotherPut guards issue 9 item 1: a PutEnd or
// PutRevoke carrying the token of an earlier put of the same key (revoked,
// reclaimed) gets ErrStalePut and leaves the current put alone; token 0 is
// refused. In-process and over gRPC (the named error survives the wire).
func TestStaleTokenNeverCompletesAnotherPut(t *testing.T) {
	for _, via := range []string{"service", "grpc"} {
		t.Run(via, func(t *testing.T) {
			s, clk := testService(t, func(c *Config) { c.ClientTTL = time.Hour })
			var api masterapi.API = s
			if via == "grpc" {
				api = remoteService(t, s)
			}
			mount(t, api, "a", 1<<20)
			old, err := api.PutStart(bg, masterapi.PutStartRequest{Key: "k", Size: 100, CRC: 1})
			if err != nil {
				t.Fatal(err)
			}
			if err := api.PutRevoke(bg, "k", old.PutToken); err != nil {
				t.Fatal(err)
			}
			cur, err := api.PutStart(bg, masterapi.PutStartRequest{Key: "k", Size: 100, CRC: 2})
			if err != nil {
				t.Fatal(err)
			}
			err = api.PutEnd(bg, "k", old.PutToken)
			if !errors.Is(err, masterapi.ErrStalePut) || errcode.Of(err) != errcode.ReplicaNotFound {
				t.Fatalf("PutEnd with the revoked put's token: %v, want ErrStalePut", err)
			}
			mustIs(t, api.PutRevoke(bg, "k", old.PutToken), masterapi.ErrStalePut)
			if _, err := api.GetReplicaList(bg, "k"); !errors.Is(err, errcode.ErrReplicaNotReady) {
				t.Fatalf("the current put was touched by a stale token: %v", err)
			}
			mustIs(t, api.PutEnd(bg, "k", 0), errcode.ErrInvalidParams)
			if err := api.PutEnd(bg, "k", cur.PutToken); err != nil {
				t.Fatal(err)
			}
			if err := api.PutEnd(bg, "k", cur.PutToken); err != nil { // repeated: a no-op
				t.Fatalf("repeated PutEnd: %v", err)
			}
			info, err := api.GetReplicaList(bg, "k")
			if err != nil || info.CRC != 2 || info.Replicas[0].PutToken != cur.PutToken {
				t.Fatalf("k: %+v %v", info, err)
			}
			mustIs(t, api.PutRevoke(bg, "k", cur.PutToken), errcode.ErrInvalidParams) // ended
			mustIs(t, api.PutRevoke(bg, "k", old.PutToken), masterapi.ErrStalePut)
			// An abandoned put reclaimed after the discard timeout: its
			// late PutEnd is stale and does not create anything.
			ab, err := api.PutStart(bg, masterapi.PutStartRequest{Key: "abandoned", Size: 100})
			if err != nil {
				t.Fatal(err)
			}
			clk.Advance(2 * s.cfg.PutStartDiscardTimeout)
			s.Tick()
			mustIs(t, api.PutEnd(bg, "abandoned", ab.PutToken), masterapi.ErrStalePut)
			_, err = api.GetReplicaList(bg, "abandoned")
			mustIs(t, err, errcode.ErrObjectNotFound)
			// Batch forms: per-item ErrStalePut.
			bs, err := api.BatchPutStart(bg, []masterapi.PutStartRequest{{Key: "b", Size: 10}})
			if err != nil || bs[0].Err != nil {
				t.Fatal(bs, err)
			}
			errs, err := api.BatchPutEnd(bg, []masterapi.PutRef{{Key: "b", Token: ab.PutToken}, {Key: "b", Token: bs[0].Replica.PutToken}})
			if err != nil || !errors.Is(errs[0], masterapi.ErrStalePut) || errs[1] != nil {
				t.Fatalf("batch put end: %v %v", errs, err)
			}
			errs, err = api.BatchPutRevoke(bg, []masterapi.PutRef{{Key: "b", Token: ab.PutToken}})
			if err != nil || !errors.Is(errs[0], masterapi.ErrStalePut) {
				t.Fatalf("batch put revoke: %v %v", errs, err)
			}
		})
	}
}

// TestRemoveDuringPutKeepsRange replays the report of issue 9 item 1
// (invariant 8): PutStart("doomed") gets offset 0; Remove("doomed"); a put of
// "innocent" must not get doomed's range while doomed's writer can still
// write. A non-forced Remove is refused with REPLICA_IS_NOT_READY (-703) and
// doomed's put then completes normally; a forced Remove deletes the object
// but parks its range until doomed's PutEnd (answered ErrStalePut) or the
// discard deadline. In-process and over gRPC.
func TestRemoveDuringPutKeepsRange(t *testing.T) {
	for _, via := range []string{"service", "grpc"} {
		t.Run(via, func(t *testing.T) {
			s, clk := testService(t, func(c *Config) { c.ClientTTL = time.Hour; c.PutStartDiscardTimeout = time.Minute })
			var api masterapi.API = s
			if via == "grpc" {
				api = remoteService(t, s)
			}
			mount(t, api, "a", 1<<20)
			doomed, err := api.PutStart(bg, masterapi.PutStartRequest{Key: "doomed", Size: 4096, CRC: crcOf("doomed")})
			if err != nil || doomed.Offset != 0 {
				t.Fatalf("doomed: %+v %v", doomed, err)
			}
			// Not forced: refused, the put goes on.
			err = api.Remove(bg, "doomed", false)
			if !errors.Is(err, errcode.ErrReplicaNotReady) || errcode.Of(err) != -703 {
				t.Fatalf("Remove during the put: %v, want REPLICA_IS_NOT_READY", err)
			}
			if n, err := api.RemoveAll(bg, false); err != nil || n != 0 {
				t.Fatalf("RemoveAll removed %d puts in progress: %v", n, err)
			}
			innocent := put(t, api, "innocent", 4096, "a")
			if overlaps(innocent, doomed.Replica) {
				t.Fatalf("innocent got doomed's range while doomed's writer may write: %+v", innocent)
			}
			if err := api.PutEnd(bg, "doomed", doomed.PutToken); err != nil {
				t.Fatalf("doomed's put after a refused Remove: %v", err)
			}
			if _, err := api.GetReplicaList(bg, "doomed"); err != nil {
				t.Fatal(err)
			}

			// Forced: the object goes, the range stays with the writer.
			doomed2, err := api.PutStart(bg, masterapi.PutStartRequest{Key: "doomed2", Size: 4096})
			if err != nil {
				t.Fatal(err)
			}
			if err := api.Remove(bg, "doomed2", true); err != nil {
				t.Fatal(err)
			}
			_, err = api.GetReplicaList(bg, "doomed2")
			mustIs(t, err, errcode.ErrObjectNotFound)
			for i := 0; i < 3; i++ { // a few puts: none lands on doomed2's bytes
				r := put(t, api, "innocent2-"+string(rune('0'+i)), 4096, "a")
				if overlaps(r, doomed2.Replica) {
					t.Fatalf("forced Remove freed a range its writer still owns: %+v", r)
				}
			}
			used := func() int64 { st, _ := s.Stats(bg); return st.SegmentUsed }
			before := used()
			mustIs(t, api.PutEnd(bg, "doomed2", doomed2.PutToken), masterapi.ErrStalePut)
			if used() != before-4096 {
				t.Fatalf("the parked range was not freed by its PutEnd: %d -> %d", before, used())
			}
			_, err = api.GetReplicaList(bg, "doomed2")
			mustIs(t, err, errcode.ErrObjectNotFound)

			// Forced, and the writer never comes back: freed at the
			// discard deadline, not before.
			doomed3, err := api.PutStart(bg, masterapi.PutStartRequest{Key: "doomed3", Size: 4096})
			if err != nil {
				t.Fatal(err)
			}
			if n, err := api.RemoveAll(bg, true); err != nil || n != 6 {
				t.Fatalf("forced RemoveAll: %d %v", n, err)
			}
			clk.Advance(s.cfg.PutStartDiscardTimeout - time.Second)
			s.Tick()
			if used() != 4096 {
				t.Fatalf("used %d before doomed3's deadline, want its 4096 parked bytes", used())
			}
			clk.Advance(2 * time.Second)
			s.Tick()
			if used() != 0 {
				t.Fatalf("used %d after doomed3's deadline", used())
			}
			mustIs(t, api.PutEnd(bg, "doomed3", doomed3.PutToken), masterapi.ErrStalePut)
		})
	}
}

// TestBatchPutTokensOnePerKey: over the wire a batch PutEnd or PutRevoke
// must carry one put token per key; otherwise the whole call is refused with
// INVALID_PARAMS naming the counts, and nothing changes (issue 9 item 1).
func TestBatchPutTokensOnePerKey(t *testing.T) {
	s, _ := testService(t, nil)
	addr := serveGRPC(t, s)
	mount(t, s, "a", 1<<20)
	rep, err := s.PutStart(bg, masterapi.PutStartRequest{Key: "k", Size: 10})
	if err != nil {
		t.Fatal(err)
	}
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	c := pb.NewMasterClient(cc)
	for name, call := range map[string]func(context.Context, *pb.KeysRequest, ...grpc.CallOption) (*pb.KeyResults, error){
		"BatchPutEnd": c.BatchPutEnd, "BatchPutRevoke": c.BatchPutRevoke,
	} {
		_, err := call(bg, &pb.KeysRequest{Keys: [][]byte{[]byte("k")}})
		err = errcode.FromStatus(err)
		if !errors.Is(err, errcode.ErrInvalidParams) || !strings.Contains(err.Error(), "0 put tokens for 1 keys") {
			t.Fatalf("%s without tokens: %v", name, err)
		}
	}
	_, err = s.GetReplicaList(bg, "k")
	mustIs(t, err, errcode.ErrReplicaNotReady)
	if err := s.PutEnd(bg, "k", rep.PutToken); err != nil {
		t.Fatal(err)
	}
}
