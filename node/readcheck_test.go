package node

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/tierstore/tierstore/client"
	"github.com/tierstore/tierstore/internal/crc32c"
	"github.com/tierstore/tierstore/internal/errcode"
	"github.com/tierstore/tierstore/internal/testkit"
	"github.com/tierstore/tierstore/internal/wire"
	"github.com/tierstore/tierstore/masterapi"
)

// TestReadsBoundToObjects: the data plane serves a DRAM range only when it
// is exactly a complete object the node stores: the range a lookup gives
// is served; a shifted or partial range, a range no object starts at, an
// object part of whose range a newer put claimed, and an object whose
// removal the node applied are refused with REPLICA_IS_GONE naming why.
func TestReadsBoundToObjects(t *testing.T) {
	m := newMaster(t, testMasterConfig())
	n := startTestNode(t, m, "127.0.0.1:0", nil)
	c := newTestClient(t, client.Config{MasterAddr: serveMaster(t, m)})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	vals := map[string][]byte{"a": rnd(64 << 10), "b": rnd(64 << 10), "c": rnd(64 << 10)}
	for k, v := range vals {
		if err := c.Put(ctx, k, v); err != nil {
			t.Fatal(err)
		}
	}
	at := func(k string) masterapi.Replica {
		t.Helper()
		info, err := m.GetReplicaList(ctx, k)
		if err != nil || len(info.Replicas) != 1 || info.Replicas[0].Kind != masterapi.DRAM {
			t.Fatalf("lookup %s: %v %+v", k, err, info)
		}
		return info.Replicas[0]
	}
	dc, err := wire.DialData(ctx, n.Endpoint(), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer dc.Close()
	seg := n.SegmentName()
	read := func(off, length int64, want []byte) error {
		var crc uint32
		if want != nil {
			crc = crc32c.Checksum(want)
		}
		return dc.ReadRange(ctx, seg, off, make([]byte, length), crc)
	}
	refused := func(err error, why string) {
		t.Helper()
		if !errors.Is(err, errcode.ErrReplicaGone) || !strings.Contains(err.Error(), "no complete object") || !strings.Contains(err.Error(), why) {
			t.Fatalf("want REPLICA_IS_GONE (no complete object: %s), got %v", why, err)
		}
	}
	ra := at("a")
	if err := read(ra.Offset, ra.Length, vals["a"]); err != nil {
		t.Fatalf("the range a lookup gives: %v", err)
	}
	refused(read(ra.Offset+4096, ra.Length-4096, nil), "no object starts at")
	refused(read(ra.Offset, ra.Length/2, nil), "the read asks")
	refused(read(n.seg.Size()-4096, 4096, nil), "no object starts at")

	// A newer put claims part of b's range (a raw write of a higher token).
	rb := at("b")
	part := rnd(4096)
	if err := dc.Write(wire.WithObject(ctx, wire.Object{Key: "x"}), seg, rb.Offset+8192, part, crc32c.Checksum(part), rb.PutToken+1); err != nil {
		t.Fatal(err)
	}
	refused(read(rb.Offset, rb.Length, nil), "a newer put claimed")

	// c removed: refused once the node applied the removal.
	rc := at("c")
	if err := c.Remove(ctx, "c", true); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, "the node refuses the removed object's range", func() bool {
		return errors.Is(read(rc.Offset, rc.Length, nil), errcode.ErrReplicaGone)
	})
	refused(read(rc.Offset, rc.Length, nil), "no object starts at")
	// a still reads, and the client's gets of a work.
	if got, err := c.Get(ctx, "a"); err != nil || len(got) != len(vals["a"]) {
		t.Fatalf("get a: %v", err)
	}
}
