package index

import (
	"bytes"
	"errors"
	"fmt"
	"path/filepath"
	"sort"
	"sync"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/stretchr/testify/require"

	"github.com/tierstore/tierstore/internal/keyspec"
)

// Keys chosen to look like other record kinds, to contain 0x00 and 0xff, and
// to reach the length limit: none may collide with another record.
var trickyKeys = []string{
	"a",
	"k",
	"b\x00\x00\x00\x00\x00\x00\x00\x01a", // looks like a membership record
	"m\x00\x00\x00\x00\x00\x00\x00\x01",  // looks like a bucket record
	"n",                                  // looks like the next-id record
	"\x00",
	"\xff",
	"\xff\xff\xff",
	string(bytes.Repeat([]byte{0xff}, keyspec.MaxLen)),
	string(bytes.Repeat([]byte{'x'}, keyspec.MaxLen)),
}

func TestRoundTripAndReopen(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "index")
	ix := open(t, dir, nil)
	require.Equal(t, uint64(1), ix.NextBucketID())
	require.Equal(t, int64(0), ix.Count())

	meta1, e1 := bucketOf(1, trickyKeys...)
	require.NoError(t, ix.CommitBucket(meta1, e1))
	meta7, e7 := bucketOf(7, "p", "q")
	require.NoError(t, ix.CommitBucket(meta7, e7))

	verify := func(ix *Index) {
		t.Helper()
		for i, k := range trickyKeys {
			loc, found, err := ix.Get([]byte(k))
			require.NoError(t, err)
			require.True(t, found, "key %d", i)
			require.Equal(t, locFor(1, i), loc)
		}
		_, found, err := ix.Get([]byte("absent"))
		require.NoError(t, err)
		require.False(t, found)

		require.Equal(t, int64(len(trickyKeys)+2), ix.Count())
		require.Equal(t, uint64(8), ix.NextBucketID())
		bs, err := ix.Buckets()
		require.NoError(t, err)
		require.Equal(t, []BucketMeta{withLive(meta1, e1), withLive(meta7, e7)}, bs)

		members, err := ix.BucketKeys(1)
		require.NoError(t, err)
		want := append([]string(nil), trickyKeys...)
		sort.Strings(want)
		got := make([]string, len(members))
		for i, m := range members {
			got[i] = string(m)
		}
		require.Equal(t, want, got, "BucketKeys in key order")
		n, err := ix.BucketLiveKeys(7)
		require.NoError(t, err)
		require.Equal(t, 2, n)
		n, err = ix.BucketLiveKeys(3)
		require.NoError(t, err)
		require.Equal(t, 0, n)

		var order []string
		require.NoError(t, ix.Keys(func(k []byte, _ Location) bool {
			order = append(order, string(k))
			return true
		}))
		want = append(want, "p", "q")
		sort.Strings(want)
		require.Equal(t, want, order, "Keys in key order")
		require.NoError(t, ix.Check())
	}
	verify(ix)
	require.NoError(t, ix.Close())
	verify(open(t, dir, nil))
}

func TestInvalidInput(t *testing.T) {
	ix := open(t, filepath.Join(t.TempDir(), "index"), nil)
	long := bytes.Repeat([]byte{'x'}, keyspec.MaxLen+1)

	for _, key := range [][]byte{nil, {}, long} {
		_, _, err := ix.Get(key)
		require.ErrorIs(t, err, ErrInvalidKey)
		require.ErrorIs(t, ix.DeleteKeys([][]byte{[]byte("ok"), key}), ErrInvalidKey)
		err = ix.CommitBucket(BucketMeta{ID: 1}, []KeyLoc{{Key: key, Loc: Location{Bucket: 1}}})
		require.ErrorIs(t, err, ErrInvalidKey)
	}

	err := ix.CommitBucket(BucketMeta{ID: 1}, []KeyLoc{{Key: []byte("a"), Loc: Location{Bucket: 2}}})
	require.ErrorIs(t, err, ErrInvalidEntry)
	require.ErrorContains(t, err, "bucket 2")
	err = ix.CommitBucket(BucketMeta{ID: 1}, []KeyLoc{{Key: []byte("a"), Loc: Location{Bucket: 1, Offset: -1}}})
	require.ErrorIs(t, err, ErrInvalidEntry)
	err = ix.CommitBucket(BucketMeta{ID: 1}, []KeyLoc{
		{Key: []byte("a"), Loc: Location{Bucket: 1}},
		{Key: []byte("a"), Loc: Location{Bucket: 1, Offset: 4096}},
	})
	require.ErrorIs(t, err, ErrInvalidEntry)
	require.ErrorContains(t, err, "twice")
	require.ErrorIs(t, ix.CommitBucket(BucketMeta{ID: 1, Size: -1}, nil), ErrInvalidEntry)
	require.ErrorIs(t, ix.CommitBucket(BucketMeta{ID: ^uint64(0)}, nil), ErrInvalidEntry)

	// Nothing above was committed.
	require.Equal(t, int64(0), ix.Count())
	require.Equal(t, uint64(1), ix.NextBucketID())
	bs, err := ix.Buckets()
	require.NoError(t, err)
	require.Empty(t, bs)

	commit(t, ix, 1, "a")
	meta, entries := bucketOf(1, "b")
	require.ErrorIs(t, ix.CommitBucket(meta, entries), ErrBucketExists)
	_, found, err := ix.Get([]byte("b"))
	require.NoError(t, err)
	require.False(t, found)
	require.NoError(t, ix.Check())
}

// A key re-committed into a newer bucket moves there; deleting its old bucket
// removes only the keys that still live in it.
func TestDeleteBucketKeepsRecommittedKeys(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "index")
	ix := open(t, dir, nil)
	commit(t, ix, 1, "a", "b", "c")
	commit(t, ix, 2, "b", "d")
	require.Equal(t, int64(4), ix.Count())

	n, err := ix.BucketLiveKeys(1)
	require.NoError(t, err)
	require.Equal(t, 2, n, "b moved to bucket 2")
	loc, found, err := ix.Get([]byte("b"))
	require.NoError(t, err)
	require.True(t, found)
	require.Equal(t, locFor(2, 0), loc)
	require.NoError(t, ix.Check())

	removed, err := ix.DeleteBucket(1)
	require.NoError(t, err)
	require.Equal(t, [][]byte{[]byte("a"), []byte("c")}, removed)
	require.Equal(t, int64(2), ix.Count())
	for _, k := range []string{"a", "c"} {
		_, found, err := ix.Get([]byte(k))
		require.NoError(t, err)
		require.False(t, found, k)
	}
	for _, k := range []string{"b", "d"} {
		loc, found, err := ix.Get([]byte(k))
		require.NoError(t, err)
		require.True(t, found, k)
		require.Equal(t, uint64(2), loc.Bucket)
	}
	bs, err := ix.Buckets()
	require.NoError(t, err)
	require.Len(t, bs, 1)
	require.Equal(t, uint64(2), bs[0].ID)
	require.NoError(t, ix.Check())

	// Deleting it again, or a bucket that never existed, removes nothing.
	removed, err = ix.DeleteBucket(1)
	require.NoError(t, err)
	require.Empty(t, removed)
	removed, err = ix.DeleteBucket(99)
	require.NoError(t, err)
	require.Empty(t, removed)

	require.NoError(t, ix.Close())
	ix = open(t, dir, nil)
	require.Equal(t, int64(2), ix.Count(), "count recomputed at Open")
	require.Equal(t, uint64(3), ix.NextBucketID(), "next id survives deleting the bucket")
	require.NoError(t, ix.Check())
}

func TestDeleteKeys(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "index")
	ix := open(t, dir, nil)
	commit(t, ix, 1, "a", "b", "c")
	commit(t, ix, 2, "d")
	rm, err := ix.RemoveKeys([][]byte{[]byte("a"), []byte("missing"), []byte("a"), []byte("d")})
	require.NoError(t, err)
	require.Equal(t, []KeyLoc{{Key: []byte("a"), Loc: locFor(1, 0)}, {Key: []byte("d"), Loc: locFor(2, 0)}}, rm.Removed)
	require.Equal(t, []uint64{2}, rm.Emptied)
	require.Equal(t, int64(2), ix.Count())
	require.Equal(t, map[string]Location{"b": locFor(1, 1), "c": locFor(1, 2)}, allKeys(t, ix))
	n, err := ix.BucketLiveKeys(1)
	require.NoError(t, err)
	require.Equal(t, 2, n)
	n, err = ix.BucketLiveKeys(2)
	require.NoError(t, err)
	require.Equal(t, 0, n)
	// A bucket whose last key goes loses its record in the same batch; the
	// other keeps its record with lowered live counts.
	bs, err := ix.Buckets()
	require.NoError(t, err)
	require.Len(t, bs, 1)
	require.Equal(t, 2, bs[0].Live)
	require.EqualValues(t, locFor(1, 1).StoredLen+locFor(1, 2).StoredLen, bs[0].LiveBytes)
	require.NoError(t, ix.DeleteKeys(nil))
	require.NoError(t, ix.Check())

	removed, err := ix.DeleteBucket(2)
	require.NoError(t, err)
	require.Empty(t, removed)
	require.NoError(t, ix.Check())
	// Count survives a reopen: it is the sum of the buckets' live counts.
	require.NoError(t, ix.Close())
	require.Equal(t, int64(2), open(t, dir, nil).Count())
}

func TestKeysChunksStopAndReentrancy(t *testing.T) {
	ix := open(t, filepath.Join(t.TempDir(), "index"), nil)
	// More than two chunks, with keys that share prefixes across a chunk
	// boundary ("k00255" and "k00255\x00").
	keys := keysN("k", 2*keysChunk+3)
	keys = append(keys, fmt.Sprintf("k%05d\x00", keysChunk-1))
	commit(t, ix, 1, keys...)

	got := allKeys(t, ix)
	require.Len(t, got, len(keys))

	// Stop early.
	n := 0
	require.NoError(t, ix.Keys(func([]byte, Location) bool { n++; return n < 10 }))
	require.Equal(t, 10, n)

	// The callback may use the index, including writing to it.
	seen := 0
	require.NoError(t, ix.Keys(func(k []byte, loc Location) bool {
		seen++
		l, found, err := ix.Get(k)
		require.NoError(t, err)
		require.True(t, found)
		require.Equal(t, loc, l)
		require.NoError(t, ix.DeleteKeys([][]byte{k}))
		return true
	}))
	require.Equal(t, len(keys), seen)
	require.Equal(t, int64(0), ix.Count())
	require.NoError(t, ix.Check())
}

func TestClosed(t *testing.T) {
	ix := open(t, filepath.Join(t.TempDir(), "index"), nil)
	commit(t, ix, 1, "a")
	require.NoError(t, ix.Close())
	require.ErrorIs(t, ix.Close(), ErrClosed)
	_, _, err := ix.Get([]byte("a"))
	require.ErrorIs(t, err, ErrClosed)
	meta, entries := bucketOf(2, "b")
	require.ErrorIs(t, ix.CommitBucket(meta, entries), ErrClosed)
	_, err = ix.DeleteBucket(1)
	require.ErrorIs(t, err, ErrClosed)
	require.ErrorIs(t, ix.DeleteKeys([][]byte{[]byte("a")}), ErrClosed)
	_, err = ix.Buckets()
	require.ErrorIs(t, err, ErrClosed)
	_, err = ix.BucketKeys(1)
	require.ErrorIs(t, err, ErrClosed)
	_, err = ix.BucketLiveKeys(1)
	require.ErrorIs(t, err, ErrClosed)
	require.ErrorIs(t, ix.Keys(func([]byte, Location) bool { return true }), ErrClosed)
	require.ErrorIs(t, ix.Check(), ErrClosed)
}

func TestReadOnly(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "index")
	_, err := Open(dir, Options{ReadOnly: true, Logger: quietLogger})
	require.Error(t, err, "read-only open of a missing index")

	ix := open(t, dir, nil)
	commit(t, ix, 1, "a", "b")
	require.NoError(t, ix.Close())

	ro, err := Open(dir, Options{ReadOnly: true, Logger: quietLogger})
	require.NoError(t, err)
	defer ro.Close()
	loc, found, err := ro.Get([]byte("a"))
	require.NoError(t, err)
	require.True(t, found)
	require.Equal(t, locFor(1, 0), loc)
	require.Equal(t, int64(2), ro.Count())
	meta, entries := bucketOf(2, "c")
	require.ErrorIs(t, ro.CommitBucket(meta, entries), ErrReadOnly)
	_, err = ro.DeleteBucket(1)
	require.ErrorIs(t, err, ErrReadOnly)
	require.ErrorIs(t, ro.DeleteKeys([][]byte{[]byte("a")}), ErrReadOnly)
}

func TestOpenRejectsBadOptions(t *testing.T) {
	_, err := Open("", Options{})
	require.ErrorIs(t, err, ErrInvalidOptions)
	require.ErrorContains(t, err, "empty directory")
	_, err = Open(t.TempDir(), Options{CacheSize: -1})
	require.ErrorIs(t, err, ErrInvalidOptions)
	require.ErrorContains(t, err, "CacheSize")
}

// Writers committing distinct buckets and readers running at once: the
// index stays consistent and Count exact (run with -race).
func TestConcurrentUse(t *testing.T) {
	ix := open(t, "index", vfs.NewMem())
	const writers, perWriter = 4, 10
	var wg sync.WaitGroup
	ids := make(chan uint64, writers*perWriter)
	for i := uint64(1); i <= writers*perWriter; i++ {
		ids <- i
	}
	close(ids)
	for w := 0; w < writers; w++ {
		wg.Add(2)
		go func() {
			defer wg.Done()
			for id := range ids {
				meta, entries := bucketOf(id, keysN(fmt.Sprintf("b%d-", id), 5)...)
				if err := ix.CommitBucket(meta, entries); err != nil {
					t.Error(err)
					return
				}
			}
		}()
		go func() {
			defer wg.Done()
			for i := 0; i < 50; i++ {
				if _, _, err := ix.Get([]byte(fmt.Sprintf("b%d-00001", i%40+1))); err != nil {
					t.Error(err)
					return
				}
				if _, err := ix.Buckets(); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	require.Equal(t, int64(writers*perWriter*5), ix.Count())
	require.Equal(t, uint64(writers*perWriter+1), ix.NextBucketID())
	require.NoError(t, ix.Check())
}

// Check itself must catch a broken index: write an object record without
// its membership record directly into pebble.
func TestCheckDetectsInconsistency(t *testing.T) {
	fs := vfs.NewMem()
	ix := open(t, "index", fs)
	commit(t, ix, 1, "a")
	require.NoError(t, ix.Close())
	rawSet(t, fs, "index", objectKey([]byte("stray")), encodeObject(locFor(1, 5)))
	ix = open(t, "index", fs)
	err := ix.Check()
	require.ErrorIs(t, err, ErrInconsistent)
	require.ErrorContains(t, err, "stray")
}

// rawSet writes one record straight into the pebble database in dir.
func rawSet(t *testing.T, fs vfs.FS, dir string, k, v []byte) {
	t.Helper()
	db, err := pebble.Open(dir, &pebble.Options{FS: fs, Logger: pebbleLogger{quietLogger}})
	require.NoError(t, err)
	require.NoError(t, db.Set(k, v, pebble.Sync))
	require.NoError(t, db.Close())
}

func TestCorruptRecords(t *testing.T) {
	fs := vfs.NewMem()
	ix := open(t, "index", fs)
	commit(t, ix, 1, "a", "b", "c")
	require.NoError(t, ix.Close())

	// A garbage object record for key "b" (wrong version, wrong length).
	rawSet(t, fs, "index", objectKey([]byte("b")), []byte("garbage"))
	ix = open(t, "index", fs)
	_, _, err := ix.Get([]byte("b"))
	require.ErrorIs(t, err, ErrCorrupt)
	var ce *CorruptError
	require.True(t, errors.As(err, &ce))
	require.Equal(t, []byte("b"), ce.Key)
	require.Equal(t, "object", ce.Kind)
	require.Contains(t, err.Error(), `"b"`)
	_, found, err := ix.Get([]byte("a"))
	require.NoError(t, err, "other keys still readable")
	require.True(t, found)
	require.ErrorIs(t, ix.Keys(func([]byte, Location) bool { return true }), ErrCorrupt)
	require.ErrorIs(t, ix.Check(), ErrCorrupt)
	// The engine can drop the bad record.
	require.NoError(t, ix.DeleteKeys([][]byte{[]byte("b")}))
	_, found, err = ix.Get([]byte("b"))
	require.NoError(t, err)
	require.False(t, found)
	require.NoError(t, ix.Close())

	// A right-length record with an unknown version byte.
	bad := encodeObject(locFor(1, 0))
	bad[0] = 9
	rawSet(t, fs, "index", objectKey([]byte("a")), bad)
	ix = open(t, "index", fs)
	_, _, err = ix.Get([]byte("a"))
	require.ErrorIs(t, err, ErrCorrupt)
	require.ErrorContains(t, err, "version 9")
	// DeleteBucket removes (and reports) the undecodable member too.
	removed, err := ix.DeleteBucket(1)
	require.NoError(t, err)
	require.Equal(t, [][]byte{[]byte("a"), []byte("c")}, removed)
	require.Equal(t, int64(0), ix.Count())
	require.NoError(t, ix.Close())

	// A garbage bucket record.
	rawSet(t, fs, "index", bucketKey(5), []byte{1, 2})
	ix = open(t, "index", fs)
	_, err = ix.Buckets()
	require.ErrorIs(t, err, ErrCorrupt)
	require.ErrorContains(t, err, "bucket 5")
	require.NoError(t, ix.Close())

	// A garbage next-bucket-id record stops Open.
	rawSet(t, fs, "index", nextKey, []byte{1})
	_, err = Open("index", Options{FS: fs, Logger: quietLogger})
	require.ErrorIs(t, err, ErrCorrupt)
	require.ErrorContains(t, err, "next-bucket-id")
}

// DeleteBucket checks each member's current location, so a stale membership
// record (left, say, by overwriting an undecodable object record) never
// makes it delete a key that lives in another bucket.
func TestDeleteBucketIgnoresStaleMembership(t *testing.T) {
	fs := vfs.NewMem()
	ix := open(t, "index", fs)
	commit(t, ix, 1, "a", "b")
	commit(t, ix, 2, "b")
	require.NoError(t, ix.Close())
	rawSet(t, fs, "index", membershipKey(1, []byte("b")), membershipValue)

	ix = open(t, "index", fs)
	require.ErrorIs(t, ix.Check(), ErrInconsistent, "the stale record is visible to Check")
	removed, err := ix.DeleteBucket(1)
	require.NoError(t, err)
	require.Equal(t, [][]byte{[]byte("a")}, removed)
	loc, found, err := ix.Get([]byte("b"))
	require.NoError(t, err)
	require.True(t, found)
	require.Equal(t, uint64(2), loc.Bucket)
	require.NoError(t, ix.Check(), "DeleteBucket removed the stale record")
}

func TestGetMany(t *testing.T) {
	fs := vfs.NewMem()
	ix := open(t, "index", fs)
	commit(t, ix, 1, "a", "b", "c")
	commit(t, ix, 2, "b", "z")
	keys := [][]byte{[]byte("z"), []byte("absent"), []byte("a"), []byte("b"), []byte("a")}
	locs, found, err := ix.GetMany(keys)
	require.NoError(t, err)
	require.Equal(t, []bool{true, false, true, true, true}, found)
	require.Equal(t, []Location{locFor(2, 1), {}, locFor(1, 0), locFor(2, 0), locFor(1, 0)}, locs)
	for i, k := range keys {
		loc, ok, err := ix.Get(k)
		require.NoError(t, err)
		require.Equal(t, found[i], ok)
		require.Equal(t, locs[i], loc)
	}
	locs, found, err = ix.GetMany(nil)
	require.NoError(t, err)
	require.Empty(t, locs)
	require.Empty(t, found)
	_, _, err = ix.GetMany([][]byte{[]byte("a"), nil})
	require.ErrorIs(t, err, ErrInvalidKey)
	require.NoError(t, ix.Close())

	rawSet(t, fs, "index", objectKey([]byte("c")), []byte{1, 2, 3})
	ix = open(t, "index", fs)
	_, _, err = ix.GetMany([][]byte{[]byte("a"), []byte("c")})
	var ce *CorruptError
	require.ErrorAs(t, err, &ce)
	require.Equal(t, []byte("c"), ce.Key)
}

// Close while readers and a writer are running: every call either succeeds
// or returns ErrClosed, nothing panics, and the committed data is intact.
func TestCloseDuringUse(t *testing.T) {
	fs := vfs.NewMem()
	ix := open(t, "index", fs)
	commit(t, ix, 1, keysN("k", 50)...)
	var wg sync.WaitGroup
	errs := make(chan error, 100)
	for g := 0; g < 3; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 200; i++ {
				_, _, err := ix.Get([]byte(fmt.Sprintf("k%05d", i%50)))
				if err == nil {
					err = ix.Keys(func([]byte, Location) bool { return true })
				}
				if err != nil {
					if !errors.Is(err, ErrClosed) {
						errs <- err
					}
					return
				}
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for id := uint64(2); id < 50; id++ {
			meta, entries := bucketOf(id, fmt.Sprintf("w%d", id))
			if err := ix.CommitBucket(meta, entries); err != nil {
				if !errors.Is(err, ErrClosed) {
					errs <- err
				}
				return
			}
		}
	}()
	require.NoError(t, ix.Close())
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	ix = open(t, "index", fs)
	require.NoError(t, ix.Check())
	n, err := ix.BucketLiveKeys(1)
	require.NoError(t, err)
	require.Equal(t, 50, n)
}

// Commit moves keys out of other buckets: it reports their old locations,
// lowers those buckets' live counts, removes a bucket left empty, and drops
// the buckets it is told to, in one batch.
func TestCommitMovesAndDrops(t *testing.T) {
	ix := open(t, filepath.Join(t.TempDir(), "index"), nil)
	commit(t, ix, 1, "a", "b")
	commit(t, ix, 2, "c")
	commit(t, ix, 3, "d", "e", "f")
	meta, entries := bucketOf(4, "a", "c", "d")
	res, err := ix.Commit(Commit{Meta: meta, Entries: entries, Drop: []uint64{3}})
	require.NoError(t, err)
	require.Equal(t, []KeyLoc{
		{Key: []byte("a"), Loc: locFor(1, 0)}, {Key: []byte("c"), Loc: locFor(2, 0)}, {Key: []byte("d"), Loc: locFor(3, 0)},
	}, res.Replaced)
	require.Equal(t, []uint64{2}, res.Emptied, "bucket 2 lost its only key")
	require.Equal(t, [][]byte{[]byte("e"), []byte("f")}, res.Dropped, "d moved, so it survives the drop of bucket 3")
	require.Equal(t, map[string]Location{"a": locFor(4, 0), "b": locFor(1, 1), "c": locFor(4, 1), "d": locFor(4, 2)}, allKeys(t, ix))
	bs, err := ix.Buckets()
	require.NoError(t, err)
	require.Len(t, bs, 2)
	require.Equal(t, uint64(1), bs[0].ID)
	require.Equal(t, 1, bs[0].Live)
	require.Equal(t, withLive(meta, entries), bs[1])
	require.Equal(t, int64(4), ix.Count())
	require.NoError(t, ix.Check())
	_, err = ix.Commit(Commit{Meta: BucketMeta{ID: 5}, Drop: []uint64{5}})
	require.ErrorIs(t, err, ErrInvalidEntry)
}

// RemoveIfAt removes a key only where the caller saw it: a key re-committed
// elsewhere meanwhile stays.
func TestRemoveIfAt(t *testing.T) {
	ix := open(t, filepath.Join(t.TempDir(), "index"), nil)
	commit(t, ix, 1, "a", "b")
	commit(t, ix, 2, "b")
	rm, err := ix.RemoveIfAt([]KeyLoc{{Key: []byte("a"), Loc: locFor(1, 0)}, {Key: []byte("b"), Loc: locFor(1, 1)}})
	require.NoError(t, err)
	require.Equal(t, []KeyLoc{{Key: []byte("a"), Loc: locFor(1, 0)}}, rm.Removed)
	require.Equal(t, []uint64{1}, rm.Emptied, "b had moved to bucket 2, so a was bucket 1's last member")
	require.Equal(t, map[string]Location{"b": locFor(2, 0)}, allKeys(t, ix))
	require.NoError(t, ix.Check())
}

// Close flushes the memtable: a reopen finds no WAL data to replay and
// flush (pebble flushes what it replays at Open), so a clean restart is fast.
func TestCloseFlushes(t *testing.T) {
	fs := vfs.NewMem()
	ix := open(t, "index", fs)
	commit(t, ix, 1, keysN("f", 100)...)
	require.NoError(t, ix.Close())
	db, err := pebble.Open("index", &pebble.Options{FS: fs, Logger: pebbleLogger{quietLogger}})
	require.NoError(t, err)
	defer db.Close()
	require.Zero(t, db.Metrics().Levels[0].TableBytesFlushed, "Open replayed and flushed a WAL")
	_, closer, err := db.Get(objectKey([]byte("f00042")))
	require.NoError(t, err)
	closer.Close()
}

// The format version (docs/design.md, "Format and protocol versions"): a
// new index records FormatVersion; an index of another version, or one
// with records but no format record (written before formats were
// versioned: version 0), is refused naming both versions, and left as it
// was.
func TestFormatVersion(t *testing.T) {
	fs := vfs.NewMem()
	ix := open(t, "index", fs)
	commit(t, ix, 1, "a")
	require.NoError(t, ix.Close())
	rawGet := func() []byte {
		db, err := pebble.Open("index", &pebble.Options{FS: fs, Logger: pebbleLogger{quietLogger}})
		require.NoError(t, err)
		defer db.Close()
		v, closer, err := db.Get(formatKey)
		if errors.Is(err, pebble.ErrNotFound) {
			return nil
		}
		require.NoError(t, err)
		defer closer.Close()
		return bytes.Clone(v)
	}
	require.Equal(t, encodeFormat(FormatVersion), rawGet())

	rawSet(t, fs, "index", formatKey, encodeFormat(FormatVersion+1))
	_, err := Open("index", Options{FS: fs, Logger: quietLogger})
	require.ErrorIs(t, err, ErrFormatVersion)
	require.ErrorContains(t, err, fmt.Sprintf("format version %d, this build reads version %d", FormatVersion+1, FormatVersion))
	require.Equal(t, encodeFormat(FormatVersion+1), rawGet(), "a refused index is left as it was")

	// Format 2 (before the session record) is refused too: nothing has
	// been released, so this build does not upgrade it (docs/design.md).
	rawSet(t, fs, "index", formatKey, encodeFormat(2))
	_, err = Open("index", Options{FS: fs, Logger: quietLogger})
	require.ErrorIs(t, err, ErrFormatVersion)
	require.ErrorContains(t, err, "the index is of format version 2, this build reads version 3")
	require.Equal(t, encodeFormat(2), rawGet(), "a refused index is left as it was")

	db, err := pebble.Open("index", &pebble.Options{FS: fs, Logger: pebbleLogger{quietLogger}})
	require.NoError(t, err)
	require.NoError(t, db.Delete(formatKey, pebble.Sync))
	require.NoError(t, db.Close())
	_, err = Open("index", Options{FS: fs, Logger: quietLogger})
	require.ErrorIs(t, err, ErrFormatVersion)
	require.ErrorContains(t, err, "format version 0")
	require.Nil(t, rawGet(), "no format record is written into a refused index")
}

// The session record (format 3) is absent in a new index, and what
// SetSession wrote is what Session reads, also after a reopen.
func TestSessionRecord(t *testing.T) {
	fs := vfs.NewMem()
	ix := open(t, "index", fs)
	_, found, err := ix.Session()
	require.NoError(t, err)
	require.False(t, found)
	require.NoError(t, ix.SetSession(Session{ProvenBelow: 5}))
	s, found, err := ix.Session()
	require.NoError(t, err)
	require.True(t, found)
	require.Equal(t, Session{ProvenBelow: 5}, s)
	require.NoError(t, ix.SetSession(Session{ProvenBelow: 9, Clean: true}))
	require.NoError(t, ix.Close())
	require.ErrorIs(t, ix.SetSession(Session{}), ErrClosed)
	ix = open(t, "index", fs)
	s, found, err = ix.Session()
	require.NoError(t, err)
	require.True(t, found)
	require.Equal(t, Session{ProvenBelow: 9, Clean: true}, s)
	require.NoError(t, ix.Close())

	rawSet(t, fs, "index", sessionKey, []byte{1, 2})
	ix = open(t, "index", fs)
	defer ix.Close()
	_, _, err = ix.Session()
	require.ErrorIs(t, err, ErrCorrupt)
	require.ErrorContains(t, err, "session")
}

// Keys does not allocate per key: its keys are copied into shared arenas.
func TestKeysAllocatesPerChunk(t *testing.T) {
	ix := open(t, "index", vfs.NewMem())
	defer ix.Close()
	const n = 20000
	keys := keysN("some-fairly-long-key-prefix/", n)
	for i := 0; i < n; i += 1000 {
		commit(t, ix, uint64(i/1000+1), keys[i:i+1000]...)
	}
	var seen int
	allocs := testing.AllocsPerRun(3, func() {
		seen = 0
		require.NoError(t, ix.Keys(func(k []byte, _ Location) bool { seen++; return true }))
	})
	require.Equal(t, n, seen)
	if raceEnabled {
		t.Skip("allocations are not counted under the race detector")
	}
	require.Less(t, allocs, float64(n)/20, "Keys allocates %.0f times for %d keys", allocs, n)
}
