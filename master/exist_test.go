package master

import (
	"testing"
	"time"

	"github.com/tierstore/tierstore/internal/errcode"
	"github.com/tierstore/tierstore/masterapi"
)

// TestExistAgreesWithGet: ExistKey (single, batch, over gRPC) tells the
// same story as GetReplicaList. Inside the lease of an object whose every
// replica was lost, both answer REPLICA_IS_GONE (never "exists: false"
// next to "get: replica is gone"); a put in progress is "false" and
// REPLICA_IS_NOT_READY; after the lease both say not there.
func TestExistAgreesWithGet(t *testing.T) {
	s, clk := testService(t, func(c *Config) { c.ClientTTL = time.Hour })
	r := remoteService(t, s)
	mount(t, s, "a", 1<<20)
	put(t, s, "k", 100, "a")
	if ok, err := s.ExistKey(bg, "k"); !ok || err != nil { // leased
		t.Fatalf("exists: %v %v", ok, err)
	}
	s.ExpireNode("a")
	mount(t, s, "b", 1<<20)
	_, err := s.GetReplicaList(bg, "k")
	mustIs(t, err, errcode.ErrReplicaGone)
	for name, api := range map[string]masterapi.API{"in-process": s, "gRPC": r} {
		ok, err := api.ExistKey(bg, "k")
		if ok {
			t.Errorf("%s: exists true for a lost object", name)
		}
		mustIs(t, err, errcode.ErrReplicaGone)
		res, err := api.BatchExistKey(bg, []string{"k", "nope"})
		if err != nil || res[0].Exists || res[1].Exists || res[1].Err != nil {
			t.Fatalf("%s: batch %+v %v", name, res, err)
		}
		mustIs(t, res[0].Err, errcode.ErrReplicaGone)
	}
	if _, err := s.PutStart(bg, masterapi.PutStartRequest{Key: "p", Size: 10, CRC: 1}); err != nil {
		t.Fatal(err)
	}
	if ok, err := s.ExistKey(bg, "p"); ok || err != nil {
		t.Fatalf("put in progress: exists %v %v, want false", ok, err)
	}
	clk.Advance(2 * s.Config().DefaultKVLeaseTTL)
	s.Tick()
	if ok, err := s.ExistKey(bg, "k"); ok || err != nil {
		t.Fatalf("after the lease: exists %v %v, want false", ok, err)
	}
	_, err = s.GetReplicaList(bg, "k")
	mustIs(t, err, errcode.ErrObjectNotFound)
}
