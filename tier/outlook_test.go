package tier

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tierstore/tierstore/bucket"
)

// offloadBucket writes tasks as one bucket (their total is below the bucket
// limits) and returns its id.
func offloadOne(t *testing.T, e *Engine, tasks []Task) uint64 {
	t.Helper()
	var id uint64
	out := e.Offload(bg, tasks, func(_ context.Context, c []Committed) error { id = c[0].Bucket; return nil })
	requireStatus(t, out, Persisted)
	return id
}

// TestOutlookListsNextVictimsWithTheirObjects: the fill level and the next
// victims in eviction order, each with the objects it still holds; Outlook
// changes nothing (a second call answers the same).
func TestOutlookListsNextVictimsWithTheirObjects(t *testing.T) {
	e := openEngine(t, t.TempDir(), Options{Capacity: 100 * bucketBytes})
	a := makeTasks("b00", 4, objSize, 1)
	b := makeTasks("b01", 4, objSize, 2)
	c := makeTasks("b02", 4, objSize, 3)
	ida, idb, idc := offloadOne(t, e, a), offloadOne(t, e, b), offloadOne(t, e, c)
	requireLoads(t, e, a[:1]) // a is now the most recently used
	require.NoError(t, e.Remove(b[3].Key))

	o, err := e.Outlook(2 * bucketBytes)
	require.NoError(t, err)
	require.Equal(t, int64(100*bucketBytes), o.Capacity)
	require.Equal(t, int64(0.9*float64(100*bucketBytes)), o.High)
	require.Equal(t, int64(0.8*float64(100*bucketBytes)), o.Low)
	require.Equal(t, 3*bucketBytes, o.Used)
	require.Len(t, o.Victims, 2, "enough victims to cover two buckets")
	require.Equal(t, idb, o.Victims[0].ID)
	require.Equal(t, idc, o.Victims[1].ID)
	require.Equal(t, bucketBytes, o.Victims[0].FileBytes)
	require.Equal(t, keysOf(b[:3]), o.Victims[0].Keys, "the removed object is not listed")
	require.Equal(t, []int64{objSize, objSize, objSize}, o.Victims[0].Sizes)
	require.Equal(t, keysOf(c), o.Victims[1].Keys)

	again, err := e.Outlook(1 << 40)
	require.NoError(t, err)
	require.Equal(t, []uint64{idb, idc, ida}, []uint64{again.Victims[0].ID, again.Victims[1].ID, again.Victims[2].ID})

	unlimited := openEngine(t, t.TempDir(), Options{})
	u, err := unlimited.Outlook(1)
	require.NoError(t, err)
	require.Zero(t, u.High)
	require.Empty(t, u.Victims)
}

// TestSetWorthFreqRanksVictims: with the "worth" policy the tier evicts
// the bucket of least worth, weighed with the given frequencies; other
// policies take no WorthFunc.
func TestSetWorthFreqRanksVictims(t *testing.T) {
	lru := openEngine(t, t.TempDir(), Options{Capacity: 100 * bucketBytes})
	require.False(t, lru.SetWorthFreq(func([]byte) uint32 { return 1 }))

	e := openEngine(t, t.TempDir(), Options{Capacity: 100 * bucketBytes, Eviction: "worth"})
	hot := makeTasks("b00", 4, objSize, 1)
	cold := makeTasks("b01", 4, objSize, 2)
	offloadOne(t, e, hot)
	idCold := offloadOne(t, e, cold)
	o, err := e.Outlook(1)
	require.NoError(t, err)
	require.NotEqual(t, idCold, o.Victims[0].ID, "without a WorthFunc: lru order")
	require.True(t, e.SetWorthFreq(func(k []byte) uint32 {
		if string(k[:3]) == "b00" {
			return 9
		}
		return 1
	}))
	o, err = e.Outlook(1)
	require.NoError(t, err)
	require.Equal(t, idCold, o.Victims[0].ID, "the cold bucket goes first")
	require.Equal(t, bucket.Size(4, 4*8, 4*bucket.AlignUp(objSize)), o.Victims[0].FileBytes)
}

// TestSetWorthFreqCachesWorth: the "worth" policy weighs every bucket at
// each choice, so the tier caches a bucket's worth: a second choice asks
// freq nothing; objects leaving a bucket weigh it again; a new
// SetWorthFreq (a new sketch) weighs every bucket again.
func TestSetWorthFreqCachesWorth(t *testing.T) {
	e := openEngine(t, t.TempDir(), Options{Capacity: 100 * bucketBytes, Eviction: "worth"})
	a := makeTasks("b00", 4, objSize, 1)
	b := makeTasks("b01", 4, objSize, 2)
	c := makeTasks("b02", 4, objSize, 3)
	ida, idb, idc := offloadOne(t, e, a), offloadOne(t, e, b), offloadOne(t, e, c)
	freq := map[string]uint32{"b00": 2, "b01": 10, "b02": 3}
	calls := 0
	f := func(k []byte) uint32 { calls++; return freq[string(k[:3])] }
	next := func() uint64 {
		t.Helper()
		o, err := e.Outlook(1)
		require.NoError(t, err)
		return o.Victims[0].ID
	}
	require.True(t, e.SetWorthFreq(f))
	require.Equal(t, ida, next())
	require.Equal(t, 12, calls, "every object of every bucket weighed once")
	require.Equal(t, ida, next())
	require.Equal(t, 12, calls, "nothing changed: the cached worth")

	// Three of c's four objects leave it: its worth is 3 x 1/4 of its
	// span now, below a's 2.
	for _, tk := range c[1:] {
		require.NoError(t, e.Remove(tk.Key))
	}
	require.Equal(t, idc, next())
	require.Equal(t, 13, calls, "only c weighed again, its one live object")

	// New frequencies are not seen until SetWorthFreq is called again.
	freq["b01"], freq["b02"] = 0, 16
	require.Equal(t, idc, next())
	require.True(t, e.SetWorthFreq(f))
	require.Equal(t, idb, next())
	require.Equal(t, 13+9, calls, "every bucket weighed again")
}
