package main

import (
	"cmp"
	"fmt"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"
)

const reinsertBlk = 64 << 10

func reinsertKeys(n int) [][]byte {
	ks := make([][]byte, n)
	for i := range ks {
		ks[i] = []byte(fmt.Sprintf("k%03d", i))
	}
	return ks
}

func reinsertSizes(n int, size int64) []int64 {
	s := make([]int64, n)
	for i := range s {
		s[i] = size
	}
	return s
}

func TestReinsertRuleKeepsHottestWithinBounds(t *testing.T) {
	keys := reinsertKeys(8)
	sizes := reinsertSizes(8, reinsertBlk)
	freq := map[string]uint32{"k000": 9, "k001": 1, "k002": 4, "k003": 2, "k004": 9, "k005": 3, "k006": 16, "k007": 0}
	f := func(k []byte) uint32 { return freq[string(k)] }
	// 25% of 8 objects: 2 objects, the two hottest (16, then 9 by key order).
	got := reinsertRule{}.keep(keys, sizes, f, -1)
	require.Equal(t, []bool{true, false, false, false, false, false, true, false}, got)
	// Room for one object only.
	got = reinsertRule{}.keep(keys, sizes, f, reinsertBlk)
	require.Equal(t, []bool{false, false, false, false, false, false, true, false}, got)
	// Everything allowed: only those reaching MinFreq 3.
	got = reinsertRule{MaxFraction: 1}.keep(keys, sizes, f, -1)
	require.Equal(t, []bool{true, false, true, false, true, true, true, false}, got)
	got = reinsertRule{MaxFraction: 1, MinFreq: 10}.keep(keys, sizes, f, -1)
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

func TestReinsertRuleMatchesReference(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		n := rapid.IntRange(0, 40).Draw(t, "n")
		keys := reinsertKeys(n)
		sizes := make([]int64, n)
		fs := make([]uint32, n)
		var live int64
		for i := range keys {
			sizes[i] = rapid.Int64Range(1, 4*reinsertBlk).Draw(t, "size")
			fs[i] = uint32(rapid.IntRange(0, 16).Draw(t, "f"))
			live += sizes[i]
		}
		r := reinsertRule{MinFreq: uint32(rapid.IntRange(1, 8).Draw(t, "min")), MaxFraction: rapid.Float64Range(0.01, 1).Draw(t, "frac")}
		room := rapid.Int64Range(-1, 8*reinsertBlk).Draw(t, "room")
		got := r.keep(keys, sizes, func(k []byte) uint32 {
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
