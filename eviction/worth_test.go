package eviction

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

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

func TestWorthOfIntactAndHollowBuckets(t *testing.T) {
	keys := keysOf(4)
	file := bucket.Size(4, 4*4, 4*blk)
	freq := map[string]uint32{"k000": 1, "k001": 2, "k002": 3, "k003": 6}
	f := func(k []byte) uint32 { return freq[string(k)] }
	w := Worth(file, keys, sizesOf(4, blk), f)
	require.Equal(t, int64(4*blk), w.Span, "intact bucket: no dead bytes")
	require.Equal(t, file, w.FileBytes)
	require.InDelta(t, 3.0, w.Density(), 1e-9, "mean frequency of an intact bucket")
	// The same file after two of its objects went elsewhere: half dead.
	h := Worth(file, keys[2:], sizesOf(2, blk), f)
	require.Equal(t, int64(2*blk+2*blk), h.Span, "2 live and 2 dead blocks")
	require.InDelta(t, (3.0+6.0)/4, h.Density(), 1e-9)
	e := Worth(file, nil, nil, f)
	require.Equal(t, file, e.Span, "all dead")
	require.Zero(t, e.Density())
}

func TestWorthPolicyPicksLeastWorthInWindow(t *testing.T) {
	d := map[uint64]float64{}
	p := NewWorth(func(id uint64) (float64, bool) { v, ok := d[id]; return v, ok })
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
		delete(d, id) // unknown worth: kept while something is known
	}
	require.Equal(t, []uint64{8, 7}, p.Victims(20, nil))
	p.Touch(8) // read: most recently used, out of the window
	require.Equal(t, []uint64{7}, p.Victims(1, nil))
	require.Equal(t, 12, p.Len(), "Victims changes nothing")
	// Without a WorthFunc: lru.
	q := NewWorth(nil)
	for id := uint64(1); id <= 3; id++ {
		q.Add(id, 1)
	}
	q.Touch(1)
	require.Equal(t, []uint64{2, 3}, q.Victims(2, nil))
	q.(WorthAware).SetWorthFunc(func(id uint64) (float64, bool) { return float64(id), true })
	require.Equal(t, []uint64{1}, q.Victims(1, nil))
}
