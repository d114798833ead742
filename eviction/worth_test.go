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

// The worth policy weighs every bucket, however recently read: a bucket
// read often but worth least (written while the SSD filled, a few
// popular objects among many read once) goes first. With the 8 least
// recently used as the window (before churn stop 40) it stayed for good.
func TestWorthPolicyPicksLeastWorth(t *testing.T) {
	d := map[uint64]float64{}
	p := NewWorth(func(id uint64) (float64, bool) { v, ok := d[id]; return v, ok })
	for id := uint64(1); id <= 12; id++ {
		p.Add(id, 10)
		d[id] = float64(20 - id) // newer buckets are worth less...
	}
	d[12] = 0 // ...and the newest is worthless
	p.Touch(12)
	p.Touch(11) // the most recently read: 11, then 12
	require.Equal(t, []uint64{12}, p.Victims(1, nil))
	require.Equal(t, []uint64{12, 11, 10}, p.Victims(25, nil), "least worth first, until the bytes are met")
	require.Equal(t, []uint64{11}, p.Victims(1, func(id uint64) bool { return id == 12 }))
	// Equal worth: the least recently used first.
	d[3], d[5] = 0, 0
	require.Equal(t, []uint64{3, 5, 12}, p.Victims(30, nil))
	p.Touch(3)
	require.Equal(t, []uint64{5, 12, 3}, p.Victims(30, nil))
	for id := uint64(1); id <= 12; id++ {
		if id != 2 && id != 4 {
			delete(d, id) // unknown worth: after every known one, lru among them
		}
	}
	require.Equal(t, []uint64{4, 2, 1, 5}, p.Victims(40, nil))
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
