package eviction

import (
	"cmp"
	"fmt"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"

	"github.com/tierstore/tierstore/bucket"
)

const blk = 64 << 10

func keysOf(n int) [][]byte {
	ks := make([][]byte, n)
	for i := range ks {
		ks[i] = []byte(fmt.Sprintf("k%03d", i))
	}
	return ks
}

func sizesOf(n int, size int64) []int64 {
	s := make([]int64, n)
	for i := range s {
		s[i] = size
	}
	return s
}

func TestValueOfIntactAndHollowBuckets(t *testing.T) {
	keys := keysOf(4)
	file := bucket.Size(4, 4*4, 4*blk)
	freq := map[string]uint32{"k000": 1, "k001": 2, "k002": 3, "k003": 6}
	f := func(k []byte) uint32 { return freq[string(k)] }
	w := Value(file, keys, sizesOf(4, blk), f)
	require.Equal(t, int64(0), w.DeadBytes, "intact bucket")
	require.Equal(t, int64(4*blk), w.LiveBytes)
	require.InDelta(t, 3.0, w.Density(), 1e-9, "mean frequency of an intact bucket")
	// The same file after two of its objects went elsewhere: half dead.
	h := Value(file, keys[2:], sizesOf(2, blk), f)
	require.Equal(t, int64(2*blk), h.DeadBytes)
	require.InDelta(t, (3.0+6.0)/4, h.Density(), 1e-9)
	e := Value(file, nil, nil, f)
	require.Equal(t, file, e.DeadBytes)
	require.Zero(t, e.Density())
}

func TestReinsertionKeepsHottestWithinBounds(t *testing.T) {
	keys := keysOf(8)
	sizes := sizesOf(8, blk)
	freq := map[string]uint32{"k000": 9, "k001": 1, "k002": 4, "k003": 2, "k004": 9, "k005": 3, "k006": 16, "k007": 0}
	f := func(k []byte) uint32 { return freq[string(k)] }
	// 25% of 8 objects: 2 objects, the two hottest (16, then 9 by key order).
	got := Reinsertion{}.Keep(keys, sizes, f, -1)
	require.Equal(t, []bool{true, false, false, false, false, false, true, false}, got)
	// Room for one object only.
	got = Reinsertion{}.Keep(keys, sizes, f, blk)
	require.Equal(t, []bool{false, false, false, false, false, false, true, false}, got)
	// Everything allowed: only those reaching MinFreq 3.
	got = Reinsertion{MaxFraction: 1}.Keep(keys, sizes, f, -1)
	require.Equal(t, []bool{true, false, true, false, true, true, true, false}, got)
	got = Reinsertion{MaxFraction: 1, MinFreq: 10}.Keep(keys, sizes, f, -1)
	require.Equal(t, []bool{false, false, false, false, false, false, true, false}, got)
}

// refKeep is the reference: rank eligible objects (frequency, then smaller,
// then key) and take each one that still fits.
func refKeep(keys [][]byte, sizes []int64, f []uint32, minF uint32, budget int64) []bool {
	idx := []int{}
	for i := range keys {
		if f[i] >= minF {
			idx = append(idx, i)
		}
	}
	slices.SortFunc(idx, func(a, b int) int {
		return cmp.Or(cmp.Compare(f[b], f[a]), cmp.Compare(sizes[a], sizes[b]), slices.Compare(keys[a], keys[b]))
	})
	out := make([]bool, len(keys))
	for _, i := range idx {
		if sizes[i] <= budget {
			out[i] = true
			budget -= sizes[i]
		}
	}
	return out
}

func TestReinsertionMatchesReference(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		n := rapid.IntRange(0, 40).Draw(t, "n")
		keys := keysOf(n)
		sizes := make([]int64, n)
		fs := make([]uint32, n)
		var live int64
		for i := range keys {
			sizes[i] = rapid.Int64Range(1, 4*blk).Draw(t, "size")
			fs[i] = uint32(rapid.IntRange(0, 16).Draw(t, "f"))
			live += sizes[i]
		}
		r := Reinsertion{MinFreq: uint32(rapid.IntRange(1, 8).Draw(t, "min")), MaxFraction: rapid.Float64Range(0.01, 1).Draw(t, "frac")}
		room := rapid.Int64Range(-1, 8*blk).Draw(t, "room")
		got := r.Keep(keys, sizes, func(k []byte) uint32 {
			return fs[slices.IndexFunc(keys, func(x []byte) bool { return string(x) == string(k) })]
		}, room)
		budget := int64(r.MaxFraction * float64(live))
		if room >= 0 {
			budget = min(budget, room)
		}
		want := refKeep(keys, sizes, fs, r.MinFreq, budget)
		require.Equal(t, want, got)
		var kept int64
		for i, k := range got {
			if k {
				kept += sizes[i]
				require.GreaterOrEqual(t, fs[i], r.MinFreq)
			}
		}
		require.LessOrEqual(t, kept, budget)
	})
}

func TestValuePolicyPicksLeastValuableInWindow(t *testing.T) {
	d := map[uint64]float64{}
	p := NewValue(func(id uint64) (float64, bool) { v, ok := d[id]; return v, ok })
	for id := uint64(1); id <= 12; id++ {
		p.Add(id, 10)
		d[id] = float64(20 - id) // newer buckets are worth less...
	}
	d[12] = 0 // ...and the newest is worthless, but outside the window
	// The window is the 8 least recently used (1..8): 8 is the cheapest.
	require.Equal(t, []uint64{8}, p.Victims(1, nil))
	// Each pick slides the window: after 8, 9 enters it and is cheapest.
	require.Equal(t, []uint64{8, 9, 10}, p.Victims(25, nil))
	require.Equal(t, []uint64{9}, p.Victims(1, func(id uint64) bool { return id == 8 }))
	for id := uint64(9); id <= 11; id++ {
		delete(d, id) // unknown values: kept while something is known
	}
	require.Equal(t, []uint64{8, 7}, p.Victims(20, nil))
	p.Touch(8) // read: most recently used, out of the window
	require.Equal(t, []uint64{7}, p.Victims(1, nil))
	require.Equal(t, 12, p.Len(), "Victims changes nothing")
	// Without a valuer: lru.
	q := NewValue(nil)
	for id := uint64(1); id <= 3; id++ {
		q.Add(id, 1)
	}
	q.Touch(1)
	require.Equal(t, []uint64{2, 3}, q.Victims(2, nil))
	q.(ValueAware).SetValuer(func(id uint64) (float64, bool) { return float64(id), true })
	require.Equal(t, []uint64{1}, q.Victims(1, nil))
}
