package masterapi

import (
	"slices"
	"strconv"
	"strings"
	"testing"

	"pgregory.net/rapid"
)

// TestKeyHashStable pins KeyHash: masters and nodes of different builds
// must agree on it (reconcile slots and digests travel between them).
func TestKeyHashStable(t *testing.T) {
	for _, c := range []struct {
		key  string
		want uint64
	}{
		{"", 0x2913c702a342777f},
		{"a", 0x87f219b00c617dbb},
		{"layer0/blk42", 0x84e2d8421ca37d5e},
		{"0123456789abcdef", 0x5d6d318653dbe9d1},
		{strings.Repeat("x", 100), 0xd9d8c38220745d70},
	} {
		if got := KeyHash(c.key); got != c.want {
			t.Errorf("KeyHash(%q) = %#x, want %#x", c.key, got, c.want)
		}
		if got := KeyHashBytes([]byte(c.key)); got != KeyHash(c.key) {
			t.Errorf("KeyHashBytes(%q) = %#x differs from KeyHash", c.key, got)
		}
	}
}

// TestKeyHashSpreads: sequential, structured keys spread evenly over the
// slots (the reconcile slots and the master's shards are its low bits).
func TestKeyHashSpreads(t *testing.T) {
	const n, slots = 200000, 1024
	var c [slots]int
	for i := range n {
		c[SlotOf(KeyHash("layer"+strconv.Itoa(i%61)+"/blk"+strconv.Itoa(i)), slots)]++
	}
	want := float64(n) / slots
	chi := 0.0
	for _, v := range c {
		chi += (float64(v) - want) * (float64(v) - want) / want
	}
	// chi-square per degree of freedom is about 1 for a uniform spread;
	// 1.3 is far in the tail (p < 1e-10 for 1023 degrees of freedom).
	if chi/(slots-1) > 1.3 {
		t.Fatalf("keys spread unevenly: chi2/df %.2f", chi/(slots-1))
	}
}

func TestRangesFor(t *testing.T) {
	for _, c := range []struct {
		keys int64
		want int
	}{{0, 1}, {1, 1}, {256, 1}, {257, 2}, {10_000_000, 1 << 16}, {50_000_000, 1 << 18}, {1 << 40, MaxReconcileSlots}} {
		if got := SlotsFor(c.keys); got != c.want || !ValidSlots(got) {
			t.Errorf("SlotsFor(%d) = %d, want %d", c.keys, got, c.want)
		}
	}
}

var sinkHash uint64

// BenchmarkKeyHash: the cost of the stable hash every master operation
// pays once per key (its shard) and every SSD replica change once more.
func BenchmarkKeyHash(b *testing.B) {
	for _, n := range []int{32, 128, 4096} {
		k := strings.Repeat("k", n)
		b.Run(strconv.Itoa(n), func(b *testing.B) {
			b.SetBytes(int64(n))
			for b.Loop() {
				sinkHash += KeyHash(k)
			}
		})
	}
}

// TestAddHashesIsAdd (property): AddHashes leaves the digest Add leaves,
// at every resolution (the grouped path above 2^14 slots included), for
// batches of any size, scratch reused.
func TestAddHashesIsAdd(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		slots := 1 << rapid.IntRange(0, 18).Draw(rt, "slotsLog")
		batches := rapid.SliceOf(rapid.SliceOf(rapid.Uint64())).Draw(rt, "batches")
		one, grouped := NewSlotDigest(slots), NewSlotDigest(slots)
		var scratch []uint64
		for _, b := range batches {
			for i, h := range b {
				b[i] = mix64(h) // spread over the slots
				one.Add(b[i])
			}
			scratch = grouped.AddHashes(b, scratch)
		}
		if !slices.Equal(one.Counts, grouped.Counts) || !slices.Equal(one.Sums, grouped.Sums) {
			rt.Fatalf("AddHashes' digest differs from Add's")
		}
	})
}
