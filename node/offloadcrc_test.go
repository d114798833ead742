package node

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/tierstore/tierstore/backend/uring"
	"github.com/tierstore/tierstore/client"
	"github.com/tierstore/tierstore/internal/crc32c"
	"github.com/tierstore/tierstore/internal/errcode"
	"github.com/tierstore/tierstore/masterapi"
	"github.com/tierstore/tierstore/tier"
)

// The offload round hands the tier views of the segment with each object's
// CRC32C; the tier's backend computes the CRC while it copies each value
// into its O_DIRECT staging buffers, and the bucket records the object's
// CRC without a pass of its own (issue 24 item 3). Through a real tier
// (pebble, bucket files, io_uring): values offloaded over several rounds
// read back from SSD with their bytes, and the SSD index holds each
// object's CRC; a value whose DRAM bytes were corrupted after the put
// never reaches SSD (its task fails as a source-bytes failure) while the
// others of its bucket do; and a byte corrupted in the bucket file after
// the write is caught by the SSD read (CHECKSUM_MISMATCH, entry dropped).
func TestOffloadCarriesTheObjectsCRC(t *testing.T) {
	dir := t.TempDir()
	be, err := uring.Open(filepath.Join(dir, "buckets"), uring.Options{Direct: true, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	eng, err := tier.Open(dir, tier.Options{Backend: be, Logger: quiet})
	if err != nil {
		be.Close()
		t.Fatal(err)
	}
	m := newMaster(t, testMasterConfig())
	n := startTestNode(t, m, "127.0.0.1:0", eng)
	remote := newTestClient(t, client.Config{MasterAddr: serveMaster(t, m)})
	local := newTestClient(t, client.Config{Master: m, LocalNode: n})
	ctx := context.Background()

	sizes := []int{3000, 256 << 10, 4*ssdChunk + 17, 100}
	var keys []string
	var vals [][]byte
	for round := range 3 {
		var rk []string
		var rv [][]byte
		for i, sz := range sizes {
			rk, rv = append(rk, fmt.Sprintf("r%d-%d", round, i)), append(rv, rnd(sz))
		}
		toSSD(t, n, local, rk, rv) // one offload round each
		keys, vals = append(keys, rk...), append(vals, rv...)
	}

	// A DRAM replica corrupted after its put, beside two good ones.
	for _, k := range []string{"good1", "flipped", "good2"} {
		if err := local.Put(ctx, k, rnd(64<<10)); err != nil {
			t.Fatal(err)
		}
	}
	info, err := m.GetReplicaList(masterapi.WithOffloadPath(ctx), "flipped")
	if err != nil || info.Replicas[0].Kind != masterapi.DRAM {
		t.Fatalf("flipped: %+v %v", info, err)
	}
	b := make([]byte, 1) // flipped, not overwritten: an overwrite may write the same byte
	if err := n.seg.ReadAt(b, info.Replicas[0].Offset+777); err != nil {
		t.Fatal(err)
	}
	if err := n.seg.WriteAt([]byte{b[0] ^ 0xFF}, info.Replicas[0].Offset+777); err != nil {
		t.Fatal(err)
	}
	failedBefore := n.Stats().OffloadFailedBy["source_bytes"]
	n.OffloadNow()
	for _, k := range []string{"good1", "good2"} {
		if ok, err := n.tier.Exists([]byte(k)); !ok || err != nil {
			t.Fatalf("%s is not on SSD beside a corrupt value (%v)", k, err)
		}
	}
	if ok, err := n.tier.Exists([]byte("flipped")); ok || err != nil {
		t.Fatalf("a DRAM value corrupted after its put reached SSD (%v)", err)
	}
	if got := n.Stats().OffloadFailedBy["source_bytes"] - failedBefore; got != 1 {
		t.Fatalf("%d offload failures for the source bytes, want 1", got)
	}

	onSSD := map[string]tier.KeyInfo{}
	if err := n.tier.Keys(func(key []byte, info tier.KeyInfo) bool {
		onSSD[string(key)] = info
		return true
	}); err != nil {
		t.Fatal(err)
	}
	for i, k := range keys {
		info, ok := onSSD[k]
		if !ok {
			t.Fatalf("%s is not on SSD", k)
		}
		if want := crc32c.Checksum(vals[i]); info.CRC != want || info.Size != int64(len(vals[i])) {
			t.Fatalf("%s: the SSD index has CRC %08x size %d, the object %08x size %d", k, info.CRC, info.Size, want, len(vals[i]))
		}
		for _, c := range []struct {
			name string
			c    interface {
				GetInto(context.Context, string, []byte) (int, error)
			}
		}{{"remote", remote}, {"local", local}} {
			buf := make([]byte, len(vals[i]))
			if got, err := c.c.GetInto(ctx, k, buf); err != nil || got != len(vals[i]) || !bytes.Equal(buf, vals[i]) {
				t.Fatalf("%s from SSD (%s, %d bytes): %d %v", k, c.name, len(vals[i]), got, err)
			}
		}
	}

	// A byte of a bucket file corrupted after the write: the SSD read
	// checks the bytes against the CRC the bucket recorded.
	k, v := keys[1], vals[1]
	corruptOnDisk(t, dir, v)
	before := n.Stats().Tier.ChecksumErrors
	if _, err := remote.GetInto(ctx, k, make([]byte, len(v))); !errors.Is(err, errcode.ErrChecksumMismatch) {
		t.Fatalf("a value corrupted on SSD was read: %v", err)
	}
	if got := n.Stats().Tier.ChecksumErrors - before; got != 1 {
		t.Fatalf("%d checksum errors, want 1", got)
	}
	if ok, err := n.tier.Exists([]byte(k)); ok || err != nil {
		t.Fatalf("the corrupt entry is still indexed (%v)", err)
	}
}
