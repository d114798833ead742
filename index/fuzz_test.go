package index

import (
	"errors"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// FuzzOpenRecords writes arbitrary records (any kind, any key and value
// bytes: a damaged or foreign database) straight into pebble, then opens
// the index on it and drives every read, key deletion and bucket
// deletion (the format record of this build is written first). Nothing may
// panic; every error is ErrCorrupt, ErrInconsistent or (Open)
// ErrFormatVersion; what Keys yields is a valid key; and when Check accepts
// the records, the index agrees with itself (Count, Keys, Get, GetMany,
// BucketKeys, BucketLiveKeys) and deleting every bucket leaves an empty,
// consistent index. See docs/fuzzing.md.
//
// Input: a sequence of records, each
//
//	kind byte (k, b, m, n, f, or anything else: raw key), key length byte,
//	key bytes, value length byte, value bytes.
//
// For 'b' and 'm' the key bytes follow the prefix unchanged, so the bucket
// id may be short, long or absent.
func FuzzOpenRecords(f *testing.F) {
	obj := encodeObject(Location{Bucket: 1, Offset: 4096, StoredLen: 10, ValueLen: 10, CRC: 7})
	meta := encodeBucket(BucketMeta{ID: 1, Size: 8192, Keys: 1, Created: 5})
	id1 := []byte{0, 0, 0, 0, 0, 0, 0, 1}
	rec := func(kind byte, key, val []byte) []byte {
		b := append([]byte{kind, byte(len(key))}, key...)
		b = append(b, byte(len(val)))
		return append(b, val...)
	}
	valid := append(append(append(
		rec('k', []byte("a"), obj),
		rec('b', append(id1, 'a'), membershipValue)...),
		rec('m', id1, meta)...),
		rec('n', nil, encodeNext(2))...)
	f.Add(valid)
	f.Add(rec('k', nil, obj))                      // empty object key
	f.Add(rec('b', []byte{1, 2}, membershipValue)) // short membership key
	f.Add(rec('m', []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, meta))
	f.Add(rec('n', nil, []byte{1, 2}))
	f.Add(append(rec('k', []byte("a"), obj), rec('b', append(id1, 'b'), membershipValue)...))
	f.Fuzz(func(t *testing.T, data []byte) {
		fs := vfs.NewMem()
		if !writeRaw(t, fs, data) {
			return
		}
		ix, err := Open("db", Options{FS: fs, Logger: quietLogger, CacheSize: 1 << 20})
		if err != nil {
			requireIndexErr(t, "Open", err)
			return
		}
		defer ix.Close()
		exercise(t, ix)
	})
}

// writeRaw stores the records of data in a new pebble database "db" on fs.
// It returns false when data holds no record.
func writeRaw(t *testing.T, fs vfs.FS, data []byte) bool {
	db, err := pebble.Open("db", &pebble.Options{FS: fs, FormatMajorVersion: pebble.FormatNewest, Logger: pebbleLogger{quietLogger}})
	if err != nil {
		t.Fatal(err)
	}
	// The format record of this build, as Open writes it (the input may
	// overwrite it).
	if err := db.Set(formatKey, encodeFormat(FormatVersion), pebble.NoSync); err != nil {
		t.Fatal(err)
	}
	n := 0
	for len(data) >= 2 {
		kind, klen := data[0], int(data[1])
		data = data[2:]
		if klen > len(data) {
			break
		}
		key := data[:klen]
		data = data[klen:]
		var val []byte
		if len(data) > 0 {
			vlen := min(int(data[0]), len(data)-1)
			val, data = data[1:1+vlen], data[1+vlen:]
		}
		switch kind {
		case prefixObject, prefixMembership, prefixBucket, prefixNext, prefixFormat:
			key = append([]byte{kind}, key...)
		}
		if len(key) == 0 {
			continue
		}
		if err := db.Set(key, val, pebble.NoSync); err != nil {
			t.Fatal(err)
		}
		n++
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	return n > 0
}

func requireIndexErr(t *testing.T, what string, err error) {
	t.Helper()
	if err != nil && !errors.Is(err, ErrCorrupt) && !errors.Is(err, ErrInconsistent) && !errors.Is(err, ErrFormatVersion) {
		t.Fatalf("%s: untyped error %v", what, err)
	}
}

// exercise drives every read of ix, then deletes half of the keys and
// every bucket.
func exercise(t *testing.T, ix *Index) {
	keys := map[string]Location{}
	keysErr := ix.Keys(func(k []byte, loc Location) bool {
		if err := checkKey(k); err != nil {
			t.Fatalf("Keys yielded an invalid key %q: %v", k, err)
		}
		keys[string(k)] = loc
		return true
	})
	requireIndexErr(t, "Keys", keysErr)
	buckets, bErr := ix.Buckets()
	requireIndexErr(t, "Buckets", bErr)
	checkErr := ix.Check()
	requireIndexErr(t, "Check", checkErr)

	ids := map[uint64]bool{}
	for _, m := range buckets {
		ids[m.ID] = true
		if m.ID >= ix.NextBucketID() && m.ID != ^uint64(0) {
			t.Fatalf("bucket %d not below NextBucketID %d", m.ID, ix.NextBucketID())
		}
	}
	var list [][]byte
	for k, loc := range keys {
		ids[loc.Bucket] = true
		list = append(list, []byte(k))
		got, found, err := ix.Get([]byte(k))
		requireIndexErr(t, "Get", err)
		if err == nil && (!found || got != loc) {
			t.Fatalf("Get(%q) = %+v %v, Keys said %+v", k, got, found, loc)
		}
	}
	locs, found, err := ix.GetMany(list)
	requireIndexErr(t, "GetMany", err)
	for i := range locs {
		if err == nil && (!found[i] || locs[i] != keys[string(list[i])]) {
			t.Fatalf("GetMany(%q) disagrees with Keys", list[i])
		}
	}
	consistent := checkErr == nil && keysErr == nil && bErr == nil
	if consistent && int64(len(keys)) != ix.Count() {
		t.Fatalf("Check accepted an index whose Count %d differs from its %d keys", ix.Count(), len(keys))
	}
	// Remove every other key by key, the rest with their buckets.
	var half [][]byte
	for i := 0; i < len(list); i += 2 {
		half = append(half, list[i])
	}
	requireIndexErr(t, "DeleteKeys", ix.DeleteKeys(half))
	for id := range ids {
		members, err := ix.BucketKeys(id)
		requireIndexErr(t, "BucketKeys", err)
		live, lerr := ix.BucketLiveKeys(id)
		requireIndexErr(t, "BucketLiveKeys", lerr)
		if err == nil && lerr == nil && live != len(members) {
			t.Fatalf("bucket %d: %d live keys, %d members", id, live, len(members))
		}
		if consistent {
			for _, k := range members {
				if keys[string(k)].Bucket != id {
					t.Fatalf("Check accepted member %q of bucket %d located in %d", k, id, keys[string(k)].Bucket)
				}
			}
		}
		_, err = ix.DeleteBucket(id)
		requireIndexErr(t, "DeleteBucket", err)
	}
	if consistent {
		if n := ix.Count(); n != 0 {
			t.Fatalf("%d objects left after deleting every bucket", n)
		}
		if err := ix.Check(); err != nil {
			t.Fatalf("Check after deleting every bucket of a consistent index: %v", err)
		}
	}
}
