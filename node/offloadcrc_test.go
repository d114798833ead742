package node

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/tierstore/tierstore/internal/codes"
	"github.com/tierstore/tierstore/internal/crc32c"
	"github.com/tierstore/tierstore/tier"
)

// The offload round copies each value out of the segment and computes its
// CRC32C in the same pass, and the bucket records that CRC instead of
// computing its own (issue 24 item 3). Through a real tier (pebble, bucket
// files, io_uring): values offloaded over several rounds, which reuse the
// round's copy buffer, read back from SSD with their bytes and their
// object's CRC; a byte that changes in the copy after the CRC pass (a
// corruption between put and SSD write) is caught by the SSD read, which
// fails with CHECKSUM_MISMATCH and drops the entry.
func TestOffloadCarriesTheObjectsCRC(t *testing.T) {
	t.Cleanup(func() { testHookOffloadCopied = nil }) // after the node is closed
	testHookOffloadCopied = func(key string, val []byte) {
		if key == "flipped" {
			val[len(val)/2] ^= 0x01
		}
	}
	n, _, _, remote, local := ssdNode(t)
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
		if round == 1 {
			rk, rv = append(rk, "flipped"), append(rv, rnd(64<<10))
		}
		toSSD(t, n, local, rk, rv) // one offload round each
		keys, vals = append(keys, rk...), append(vals, rv...)
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
		if k == "flipped" {
			continue
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

	before := n.Stats().Tier.ChecksumErrors
	buf := make([]byte, 64<<10)
	if _, err := remote.GetInto(ctx, "flipped", buf); !errors.Is(err, codes.ErrChecksumMismatch) {
		t.Fatalf("a value changed after its CRC pass was read from SSD: %v", err)
	}
	if got := n.Stats().Tier.ChecksumErrors - before; got != 1 {
		t.Fatalf("%d checksum errors, want 1", got)
	}
	if ok, err := n.tier.Exists([]byte("flipped")); ok || err != nil {
		t.Fatalf("the corrupt entry is still indexed (%v)", err)
	}
}
