package tier

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tierstore/tierstore/backend"
	"github.com/tierstore/tierstore/backend/mem"
	"github.com/tierstore/tierstore/backend/pwrite"
)

// bucketFiles is the set of bucket files the backend holds.
func bucketFiles(t *testing.T, be backend.Backend) map[uint64]bool {
	t.Helper()
	files, err := be.List()
	require.NoError(t, err)
	out := map[uint64]bool{}
	for _, f := range files {
		out[f.ID] = true
	}
	return out
}

// requireSpace checks the tier's live and dead object bytes, in objects
// of objSize.
func requireSpace(t *testing.T, e *Engine, live, dead int) {
	t.Helper()
	st := e.Stats()
	require.EqualValues(t, live*objSize, st.LiveBytes, "live bytes (%d objects)", live)
	require.EqualValues(t, dead*objSize, st.DeadBytes, "dead bytes (%d objects)", dead)
}

// Removed and superseded objects leave the live bytes when the call that
// removes them returns; a bucket whose objects are all dead is deleted;
// the figures survive a restart on the same directory (issue 21 item 2).
func TestRemovedAndSupersededBytesAreDeadAtOnce(t *testing.T) {
	dir := t.TempDir()
	be, err := pwrite.Open(dir+"/buckets", pwrite.Options{})
	require.NoError(t, err)
	e := openEngine(t, dir, Options{Backend: be, BucketKeysLimit: 4})
	buckets := fillBuckets(t, e, 0, 2)
	requireSpace(t, e, 8, 0)

	require.NoError(t, e.Remove(buckets[0][0].Key))
	requireSpace(t, e, 7, 1)
	n, err := e.RemoveKeys(keysOf(buckets[1][:2]))
	require.NoError(t, err)
	require.Equal(t, 2, n)
	requireSpace(t, e, 5, 3)

	// A newer version of b00's second key (other bytes): the old one is
	// superseded in the commit's batch.
	newer := makeTasks("b00", 2, objSize, 77)[1:]
	require.Equal(t, buckets[0][1].Key, newer[0].Key)
	requireStatus(t, e.Offload(bg, newer, nil), Persisted)
	requireSpace(t, e, 5, 4)

	// b00's last two objects go: the bucket is all dead and its file is
	// deleted, its dead bytes with it.
	first := e.Stats().Buckets
	n, err = e.RemoveKeys(keysOf(buckets[0][2:]))
	require.NoError(t, err)
	require.Equal(t, 2, n)
	require.Equal(t, first-1, e.Stats().Buckets)
	files := bucketFiles(t, be)
	require.Len(t, files, 2, "b00's file is deleted, b01's and the new one stay: %v", files)
	requireSpace(t, e, 3, 2) // b01: 2 live, 2 dead; the new bucket: 1 live

	st := e.Stats()
	require.NoError(t, e.Close())
	be, err = pwrite.Open(dir+"/buckets", pwrite.Options{})
	require.NoError(t, err)
	e = openEngine(t, dir, Options{Backend: be, BucketKeysLimit: 4})
	after := e.Stats()
	require.Equal(t, st.LiveBytes, after.LiveBytes, "live bytes after a restart")
	require.Equal(t, st.DeadBytes, after.DeadBytes, "dead bytes after a restart")
	require.EqualValues(t, 1, after.MostlyDeadBuckets, "b01 is half dead")
}

// When eviction must free space, a bucket at least half dead goes before
// any bucket of live data, most dead first, whatever the policy's order;
// then the policy's order (here lru: the least recently read).
func TestMostlyDeadBucketsEvictedFirst(t *testing.T) {
	for _, deadFirst := range []bool{true, false} {
		t.Run(map[bool]string{true: "dead first", false: "policy order only"}[deadFirst], func(t *testing.T) {
			capacity := 10 * bucketBytes
			rec := &evictRecorder{}
			e := openEngine(t, t.TempDir(), Options{Backend: mem.New(), Capacity: capacity, BucketKeysLimit: 4, OnEvict: rec.onEvict})
			e.noDeadFirst = !deadFirst
			rec.e = e
			buckets := fillBuckets(t, e, 0, 9) // at the high watermark
			// b03 a quarter dead (stays), b05 half dead, b07 three
			// quarters dead.
			_, err := e.RemoveKeys(keysOf(buckets[3][:1]))
			require.NoError(t, err)
			_, err = e.RemoveKeys(keysOf(buckets[5][:2]))
			require.NoError(t, err)
			_, err = e.RemoveKeys(keysOf(buckets[7][:3]))
			require.NoError(t, err)
			require.EqualValues(t, 2, e.Stats().MostlyDeadBuckets)

			// The 10th bucket evicts down to 8: two victims.
			buckets = append(buckets, fillBuckets(t, e, 9, 1)...)
			st := e.Stats()
			require.EqualValues(t, 2, st.Evictions)
			gone := func(b int) bool { _, err := e.Stat(buckets[b][3].Key); return err != nil }
			if deadFirst {
				require.True(t, gone(7) && gone(5), "the mostly dead b07 and b05 go first")
				require.False(t, gone(0) || gone(1), "the oldest buckets of live data stay")
				require.EqualValues(t, 3*objSize, st.EvictedLiveBytes, "b07's one and b05's two live objects")
				require.EqualValues(t, 5*objSize, st.EvictedDeadBytes)
				require.EqualValues(t, 0, st.MostlyDeadBuckets)
			} else {
				require.True(t, gone(0) && gone(1), "lru: the two oldest buckets")
				require.EqualValues(t, 8*objSize, st.EvictedLiveBytes)
				require.EqualValues(t, 0, st.EvictedDeadBytes)
			}
		})
	}
}
