package index

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// An evicting record survives a reopen, goes with its bucket (DeleteBucket,
// Commit's Drop, the removal of its last member) or with UnmarkEvicting,
// and never touches the bucket's objects by itself.
func TestEvictingRecords(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "index")
	ix := open(t, dir, nil)
	commit(t, ix, 1, "a", "b")
	commit(t, ix, 2, "c")
	commit(t, ix, 3, "d")
	commit(t, ix, 4, "e")
	for _, id := range []uint64{1, 2, 3, 4, 9} {
		require.NoError(t, ix.MarkEvicting(id))
	}
	require.NoError(t, ix.Close())
	ix = open(t, dir, nil)
	ids, err := ix.Evicting()
	require.NoError(t, err)
	require.Equal(t, []uint64{1, 2, 3, 4, 9}, ids)
	require.Equal(t, int64(5), ix.Count(), "a mark removes nothing")
	require.NoError(t, ix.Check())

	_, err = ix.DeleteBucket(1)
	require.NoError(t, err)
	meta, entries := bucketOf(5, "x")
	_, err = ix.Commit(Commit{Meta: withLive(meta, entries), Entries: entries, Drop: []uint64{2}})
	require.NoError(t, err)
	_, err = ix.RemoveKeys([][]byte{[]byte("d")}) // bucket 3's last member
	require.NoError(t, err)
	require.NoError(t, ix.UnmarkEvicting(4))
	require.NoError(t, ix.UnmarkEvicting(9))
	ids, err = ix.Evicting()
	require.NoError(t, err)
	require.Empty(t, ids)
	_, found, err := ix.Get([]byte("e"))
	require.NoError(t, err)
	require.True(t, found, "UnmarkEvicting keeps the bucket")
	require.NoError(t, ix.Check())
}
