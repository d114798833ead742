package node

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/tierstore/tierstore/internal/crc32c"
	"github.com/tierstore/tierstore/internal/errcode"
	"github.com/tierstore/tierstore/masterapi"
	"github.com/tierstore/tierstore/tier"
)

// The phases of an offload round on their own (issue 11): validate keeps
// only tasks whose range can hold their object on this segment; offload
// hands the tier only bytes that match the task's CRC; answer sends one
// final notify with every task the bucket notifies did not answer.
func TestRoundPhases(t *testing.T) {
	_, tr, n := newMemNode(t)
	good := rnd(1000)
	if err := n.seg.WriteAt(good, 0); err != nil {
		t.Fatal(err)
	}
	crc := crc32c.Checksum(good)
	tasks := []masterapi.OffloadTask{
		{Key: "ok", Segment: n.segName, Offset: 0, Length: 1000, Size: 1000, CRC: crc},
		{Key: "ok", Segment: n.segName, Offset: 0, Length: 1000, Size: 1000, CRC: crc}, // duplicate
		{Key: "other-seg", Segment: "nope", Offset: 0, Length: 1000, Size: 1000, CRC: crc},
		{Key: "short", Segment: n.segName, Offset: 0, Length: 999, Size: 1000, CRC: crc},
		{Key: "bad-crc", Segment: n.segName, Offset: 0, Length: 1000, Size: 1000, CRC: crc + 1},
	}
	r := &round{n: n, refused: map[string]error{}}
	r.validate(tasks)
	if len(r.jobs) != 2 || r.jobs[0].t.Key != "ok" || r.jobs[1].t.Key != "bad-crc" {
		t.Fatalf("validate kept %+v", r.jobs)
	}
	if len(r.failed) != 2 || r.failed[0].Key != "other-seg" || r.failed[1].Key != "short" || r.failed[0].Retryable {
		t.Fatalf("validate failed %+v", r.failed)
	}
	r.offload(context.Background())
	if r.jobs[0].out.Status != tier.Persisted || r.jobs[1].out.Status != tier.Failed {
		t.Fatalf("offload outcomes %+v", r.jobs)
	}
	if !tr.has("ok") || tr.has("bad-crc") {
		t.Fatal("the tier got bytes that do not match their task")
	}
	// The master never heard of "ok" (no put): its bucket notify was
	// refused, so answer fails it and removes the unannounced SSD copy.
	r.answer(context.Background())
	if len(r.failed) != 4 || r.failed[2].Key != "ok" || r.failed[3].Key != "bad-crc" || !strings.Contains(r.failed[3].Reason, "CRC32C") {
		t.Fatalf("answer failed %+v", r.failed)
	}
	if tr.has("ok") {
		t.Fatal("a key the master refused stayed on SSD")
	}
}

// Issue 9 item 3, the node's side: the eviction callback hands the tier
// exactly the keys the real master keeps (a leased object whose only
// readable replica is on this node's SSD) and lets the others go.
func TestEvictFuncPassesKeepList(t *testing.T) {
	m := newMaster(t, testMasterConfig())
	n := startTestNode(t, m, "", nil)
	ctx := context.Background()
	objs := []masterapi.SSDObject{{Key: "leased", Size: 1, CRC: 1}, {Key: "free", Size: 1, CRC: 2}}
	if _, err := m.ReRegisterSSDObjects(ctx, n.Name(), objs); err != nil {
		t.Fatal(err)
	}
	if _, err := m.GetReplicaList(ctx, "leased"); err != nil { // grants the lease
		t.Fatal(err)
	}
	keep, err := EvictFunc(m, n.Name())(ctx, [][]byte{[]byte("leased"), []byte("free")})
	if err != nil || len(keep) != 1 || string(keep[0]) != "leased" {
		t.Fatalf("keep %q, err %v; want [leased]", keep, err)
	}
	if _, err := m.GetReplicaList(masterapi.WithOffloadPath(ctx), "free"); !errors.Is(err, errcode.ErrObjectNotFound) {
		t.Fatalf("the evicted object is still listed: %v", err)
	}
}
