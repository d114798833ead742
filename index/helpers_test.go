package index

import (
	"fmt"
	"log/slog"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/stretchr/testify/require"
)

// quietLogger drops pebble's informational chatter in tests.
var quietLogger = slog.New(slog.DiscardHandler)

// open opens dir on fs (the OS filesystem when nil) and closes the index at
// the end of the test unless the test closed it already.
func open(t testing.TB, dir string, fs vfs.FS) *Index {
	t.Helper()
	ix, err := Open(dir, Options{FS: fs, Logger: quietLogger, CacheSize: 1 << 20})
	require.NoError(t, err)
	t.Cleanup(func() { _ = ix.Close() })
	return ix
}

// bucketOf builds the commit of bucket id holding keys, with distinct
// locations derived from the id and the position.
func bucketOf(id uint64, keys ...string) (BucketMeta, []KeyLoc) {
	entries := make([]KeyLoc, len(keys))
	for i, k := range keys {
		entries[i] = KeyLoc{Key: []byte(k), Loc: locFor(id, i)}
	}
	return BucketMeta{ID: id, Size: int64(len(keys)) * 8192, Keys: len(keys), Created: int64(id) * 1000}, entries
}

// withLive returns meta as the index records it after committing entries:
// every entry live.
func withLive(meta BucketMeta, entries []KeyLoc) BucketMeta {
	meta.Live, meta.LiveBytes = len(entries), 0
	for _, e := range entries {
		meta.LiveBytes += int64(e.Loc.StoredLen)
	}
	return meta
}

func locFor(id uint64, i int) Location {
	return Location{
		Bucket:    id,
		Offset:    int64(i) * 8192,
		StoredLen: uint32(100 + i),
		ValueLen:  uint32(200 + i),
		Codec:     uint8(i % 2),
		CRC:       uint32(id)<<16 | uint32(i),
	}
}

func commit(t testing.TB, ix *Index, id uint64, keys ...string) {
	t.Helper()
	meta, entries := bucketOf(id, keys...)
	require.NoError(t, ix.CommitBucket(meta, entries))
}

func keysN(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s%05d", prefix, i)
	}
	return out
}

// allKeys collects Keys into a map key -> location.
func allKeys(t testing.TB, ix *Index) map[string]Location {
	t.Helper()
	m := map[string]Location{}
	require.NoError(t, ix.Keys(func(k []byte, loc Location) bool {
		m[string(k)] = loc
		return true
	}))
	return m
}
