package master

import (
	"testing"
	"time"

	"github.com/tierstore/tierstore/internal/errcode"
	"github.com/tierstore/tierstore/masterapi"
)

// TestReportBadReplica (invariant 5): a reported replica is dropped; with another
// replica left the object stays readable from it; with none left a leased
// object answers REPLICA_IS_GONE until its lease expires, then
// OBJECT_NOT_FOUND; stale reports (other bytes, other replica) are refused.
func TestReportBadReplica(t *testing.T) {
	s, clk := offloadService(t, nil)
	mount(t, s, "a", 1<<20)
	rep := put(t, s, "k", 100, "a")
	rep.Status = masterapi.Complete
	heartbeat(s, "a", 0)
	s.NotifyOffloadSuccess(bg, masterapi.NotifyRequest{Node: "a", Persisted: []masterapi.SSDObject{{Key: "k", Size: 100, CRC: crcOf("k")}}})

	// A report about other bytes (the key was put again since) or a
	// replica that does not exist changes nothing.
	mustIs(t, s.ReportBadReplica(bg, "k", crcOf("k")+1, rep), errcode.ErrReplicaNotFound)
	moved := rep
	moved.Offset += 4096
	mustIs(t, s.ReportBadReplica(bg, "k", crcOf("k"), moved), errcode.ErrReplicaNotFound)
	mustIs(t, s.ReportBadReplica(bg, "nope", 1, rep), errcode.ErrObjectNotFound)
	mustIs(t, s.ReportBadReplica(bg, "k", crcOf("k"), masterapi.Replica{Kind: masterapi.SSD, Node: "b"}), errcode.ErrReplicaNotFound)

	info, err := s.GetReplicaList(bg, "k") // lease
	if err != nil || kinds(info) != "DRAM@a SSD@a " {
		t.Fatalf("%s %v", kinds(info), err)
	}
	if err := s.ReportBadReplica(bg, "k", crcOf("k"), info.Replicas[0]); err != nil {
		t.Fatal(err)
	}
	if info, err := s.GetReplicaList(bg, "k"); err != nil || kinds(info) != "SSD@a " {
		t.Fatalf("after dropping DRAM: %s %v", kinds(info), err)
	}
	if st, _ := s.Stats(bg); st.SegmentUsed != 0 || st.DRAMReplicas != 0 {
		t.Fatalf("DRAM range not freed: %+v", st)
	}
	// The last replica: leased, so the metadata stays and lookups say gone.
	if err := s.ReportBadReplica(bg, "k", crcOf("k"), masterapi.Replica{Kind: masterapi.SSD, Node: "a"}); err != nil {
		t.Fatal(err)
	}
	_, err = s.GetReplicaList(bg, "k")
	mustIs(t, err, errcode.ErrReplicaGone)
	clk.Advance(time.Hour)
	s.Tick()
	_, err = s.GetReplicaList(bg, "k")
	mustIs(t, err, errcode.ErrObjectNotFound)

	// Without a lease the object goes at once.
	rep = put(t, s, "u", 100, "a")
	rep.Status = masterapi.Complete
	if err := s.ReportBadReplica(bg, "u", crcOf("u"), rep); err != nil {
		t.Fatal(err)
	}
	_, err = s.GetReplicaList(bg, "u")
	mustIs(t, err, errcode.ErrObjectNotFound)
	if v := metricValue(t, s, "tierstore_master_bad_replicas_total", "", ""); v != 3 {
		t.Fatalf("bad_replicas_total %v", v)
	}
}

// TestReportBadReplicaNeverDropsAnotherReplica guards issue 9 item 2: a
// report names the replica its reader was given; once that replica is gone
// the report is answered REPLICA_NOT_FOUND and drops nothing, even when the
// key was put again with the same bytes at the same place (the put token
// tells the replicas apart). In-process and over gRPC (the token travels in
// the report's replica).
func TestReportBadReplicaNeverDropsAnotherReplica(t *testing.T) {
	for _, via := range []string{"service", "grpc"} {
		t.Run(via, func(t *testing.T) {
			s, _ := testService(t, func(c *Config) { c.ClientTTL = time.Hour })
			var api masterapi.API = s
			if via == "grpc" {
				api = remoteService(t, s)
			}
			mount(t, api, "a", 1<<20)
			put(t, api, "k", 100, "a")
			res, err := api.BatchGetReplicaList(bg, []string{"k"})
			if err != nil || res[0].Err != nil || res[0].Info.Replicas[0].PutToken == 0 {
				t.Fatalf("lookup: %+v %v", res, err)
			}
			old := res[0].Info
			if err := api.Remove(bg, "k", true); err != nil {
				t.Fatal(err)
			}
			again := put(t, api, "k", 100, "a")
			if again.Offset != old.Replicas[0].Offset {
				t.Fatalf("the new put is elsewhere (%d), the test needs the same place", again.Offset)
			}
			mustIs(t, api.ReportBadReplica(bg, "k", crcOf("k"), old.Replicas[0]), errcode.ErrReplicaNotFound)
			info, err := api.GetReplicaList(bg, "k")
			if err != nil || kinds(info) != "DRAM@a " || info.Replicas[0].PutToken != again.PutToken {
				t.Fatalf("the new replica after a stale report: %+v %v", info, err)
			}
		})
	}
}
