package index

import (
	"errors"
	"sort"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"pgregory.net/rapid"
)

// propModel is the reference the index is compared with: a map from key to
// location and the committed buckets.
type propModel struct {
	objs    map[string]Location
	buckets map[uint64]BucketMeta
	next    uint64
}

// leave records that the object at loc leaves its bucket: the bucket's live
// counts drop, and a bucket left without members loses its record.
func (m *propModel) leave(loc Location) {
	b, ok := m.buckets[loc.Bucket]
	if !ok {
		return
	}
	b.Live--
	b.LiveBytes -= int64(loc.StoredLen)
	if b.Live == 0 {
		delete(m.buckets, loc.Bucket)
		return
	}
	m.buckets[loc.Bucket] = b
}

var propKeys = []string{"a", "b", "c", "d", "e", "f", "k", "n", "\x00", "\xff", "b\x00\x00\x00\x00\x00\x00\x00\x01a", "m\x00\x00\x00\x00\x00\x00\x00\x02"}

// Random sequences of commits, bucket deletions, key deletions and
// crash-reopens keep the index equal to the model. Every reopen is on a
// crash clone holding only synced data, so a write that was acknowledged but
// not synced would show up as a difference.
func TestPropertyIndexMatchesModel(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		mem := vfs.NewCrashableMem()
		ix, err := Open("index", Options{FS: mem, Logger: quietLogger, CacheSize: 1 << 20})
		if err != nil {
			rt.Fatal(err)
		}
		rt.Cleanup(func() { _ = ix.Close() })
		m := &propModel{objs: map[string]Location{}, buckets: map[uint64]BucketMeta{}, next: 1}
		keyGen := rapid.SampledFrom(propKeys)

		rt.Repeat(map[string]func(*rapid.T){
			"commit": func(rt *rapid.T) {
				id := ix.NextBucketID() + rapid.Uint64Range(0, 3).Draw(rt, "gap")
				if len(m.buckets) > 0 && rapid.IntRange(0, 9).Draw(rt, "reuse") == 0 {
					id = rapid.SampledFrom(bucketIDs(m)).Draw(rt, "existing")
				}
				keys := rapid.SliceOfNDistinct(keyGen, 0, 6, func(s string) string { return s }).Draw(rt, "keys")
				meta := BucketMeta{ID: id, Size: rapid.Int64Range(0, 1<<30).Draw(rt, "size"), Keys: len(keys), Created: rapid.Int64().Draw(rt, "created")}
				entries := make([]KeyLoc, len(keys))
				for i, k := range keys {
					entries[i] = KeyLoc{Key: []byte(k), Loc: Location{
						Bucket:    id,
						Offset:    int64(i) * 4096,
						StoredLen: rapid.Uint32().Draw(rt, "stored"),
						ValueLen:  rapid.Uint32().Draw(rt, "vlen"),
						Codec:     rapid.Uint8Range(0, 1).Draw(rt, "codec"),
						CRC:       rapid.Uint32().Draw(rt, "crc"),
					}}
				}
				var drop []uint64
				if len(m.buckets) > 0 && rapid.IntRange(0, 3).Draw(rt, "drop") == 0 {
					if d := rapid.SampledFrom(bucketIDs(m)).Draw(rt, "dropID"); d != id {
						drop = []uint64{d}
					}
				}
				res, err := ix.Commit(Commit{Meta: meta, Entries: entries, Drop: drop})
				if _, exists := m.buckets[id]; exists {
					if !errors.Is(err, ErrBucketExists) {
						rt.Fatalf("commit of existing bucket %d: got %v, want ErrBucketExists", id, err)
					}
					return
				}
				if err != nil {
					rt.Fatalf("commit bucket %d: %v", id, err)
				}
				for _, e := range entries {
					if old, ok := m.objs[string(e.Key)]; ok {
						m.leave(old)
					}
					m.objs[string(e.Key)] = e.Loc
				}
				m.buckets[id] = withLive(meta, entries)
				var dropped []string
				for _, d := range drop {
					for k, loc := range m.objs {
						if loc.Bucket == d {
							dropped = append(dropped, k)
							delete(m.objs, k)
						}
					}
					delete(m.buckets, d)
				}
				sort.Strings(dropped)
				got := make([]string, len(res.Dropped))
				for i, k := range res.Dropped {
					got[i] = string(k)
				}
				if !equalStrings(got, dropped) {
					rt.Fatalf("commit dropping %v removed %q, want %q", drop, got, dropped)
				}
				m.next = max(m.next, id+1)
			},
			"deleteBucket": func(rt *rapid.T) {
				id := rapid.Uint64Range(0, m.next).Draw(rt, "any")
				if len(m.buckets) > 0 && rapid.Bool().Draw(rt, "existing") {
					id = rapid.SampledFrom(bucketIDs(m)).Draw(rt, "id")
				}
				removed, err := ix.DeleteBucket(id)
				if err != nil {
					rt.Fatalf("delete bucket %d: %v", id, err)
				}
				var want []string
				for k, loc := range m.objs {
					if loc.Bucket == id {
						want = append(want, k)
					}
				}
				sort.Strings(want)
				got := make([]string, len(removed))
				for i, k := range removed {
					got[i] = string(k)
				}
				if !equalStrings(got, want) {
					rt.Fatalf("delete bucket %d removed %q, want %q", id, got, want)
				}
				for _, k := range want {
					delete(m.objs, k)
				}
				delete(m.buckets, id)
			},
			"deleteKeys": func(rt *rapid.T) {
				keys := rapid.SliceOfN(keyGen, 0, 5).Draw(rt, "keys")
				bs := make([][]byte, len(keys))
				for i, k := range keys {
					bs[i] = []byte(k)
				}
				if err := ix.DeleteKeys(bs); err != nil {
					rt.Fatalf("delete keys: %v", err)
				}
				for _, k := range keys {
					if old, ok := m.objs[k]; ok {
						m.leave(old)
						delete(m.objs, k)
					}
				}
			},
			"crashReopen": func(rt *rapid.T) {
				// Reopening is the costly step: do it in a quarter of
				// the draws only.
				if rapid.IntRange(0, 3).Draw(rt, "reopen") != 0 {
					return
				}
				mem = mem.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: 0})
				_ = ix.Close()
				ix, err = Open("index", Options{FS: mem, Logger: quietLogger, CacheSize: 1 << 20})
				if err != nil {
					rt.Fatalf("reopen: %v", err)
				}
			},
			"": func(rt *rapid.T) { checkModel(rt, ix, m) },
		})
	})
}

// checkModel compares the index with the model. It uses few iterators (one
// GetMany, one Get, Buckets, one BucketLiveKeys and Check): under -race pebble
// records a stack trace for every sstable iterator it opens.
func checkModel(rt *rapid.T, ix *Index, m *propModel) {
	keys := make([][]byte, len(propKeys))
	for i, k := range propKeys {
		keys[i] = []byte(k)
	}
	locs, found, err := ix.GetMany(keys)
	if err != nil {
		rt.Fatalf("get many: %v", err)
	}
	for i, k := range propKeys {
		want, wantFound := m.objs[k]
		if found[i] != wantFound || locs[i] != want {
			rt.Fatalf("GetMany %q = %+v %v, want %+v %v", k, locs[i], found[i], want, wantFound)
		}
	}
	k := rapid.SampledFrom(propKeys).Draw(rt, "get")
	loc, ok, err := ix.Get([]byte(k))
	if want, wantFound := m.objs[k]; err != nil || ok != wantFound || loc != want {
		rt.Fatalf("Get %q = %+v %v %v, want %+v %v", k, loc, ok, err, want, wantFound)
	}
	if got := ix.Count(); got != int64(len(m.objs)) {
		rt.Fatalf("Count = %d, want %d", got, len(m.objs))
	}
	if got := ix.NextBucketID(); got != m.next {
		rt.Fatalf("NextBucketID = %d, want %d", got, m.next)
	}
	bs, err := ix.Buckets()
	if err != nil {
		rt.Fatal(err)
	}
	ids := bucketIDs(m)
	if len(bs) != len(ids) {
		rt.Fatalf("Buckets has %d, want %d", len(bs), len(ids))
	}
	for i, b := range bs {
		if b != m.buckets[ids[i]] {
			rt.Fatalf("bucket %d = %+v, want %+v", i, b, m.buckets[ids[i]])
		}
	}
	if len(ids) > 0 {
		id := rapid.SampledFrom(ids).Draw(rt, "live")
		live := 0
		for _, loc := range m.objs {
			if loc.Bucket == id {
				live++
			}
		}
		n, err := ix.BucketLiveKeys(id)
		if err != nil || n != live {
			rt.Fatalf("BucketLiveKeys(%d) = %d, %v; want %d", id, n, err, live)
		}
	}
	// Check ties every object record to its membership record and bucket.
	if err := ix.Check(); err != nil {
		rt.Fatal(err)
	}
}

func bucketIDs(m *propModel) []uint64 {
	ids := make([]uint64, 0, len(m.buckets))
	for id := range m.buckets {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	return ids
}

func equalStrings(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
