package index

import (
	"fmt"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// openBench opens an index on the real disk with the default options (8 MiB
// block cache).
func openBench(b *testing.B, dir string) *Index {
	ix, err := Open(dir, Options{Logger: quietLogger})
	require.NoError(b, err)
	b.Cleanup(func() { _ = ix.Close() })
	return ix
}

// benchKey is shaped like a Mooncake KV-cache key: a model prefix and a
// 64-hex-digit block hash.
func benchKey(bucket uint64, i int) []byte {
	return []byte(fmt.Sprintf("Dsv4-flash-bf16@pcp0@dcp0@head_or_tp_rank:0@pp_rank:0@group:0@%016x%048x", bucket, i))
}

func benchBucket(id uint64, n int) (BucketMeta, []KeyLoc) {
	entries := make([]KeyLoc, n)
	for i := range entries {
		entries[i] = KeyLoc{Key: benchKey(id, i), Loc: Location{Bucket: id, Offset: int64(i) << 16, StoredLen: 1 << 16, ValueLen: 1 << 16, CRC: uint32(i)}}
	}
	return BucketMeta{ID: id, Size: int64(n) << 16, Keys: n}, entries
}

// BenchmarkCommitBucket commits buckets of n new keys, each one synced
// batch, on the real disk under the test's temporary directory. n=1 shows the
// fixed cost of a commit (mostly the WAL fdatasync); n=500 is a full bucket.
func BenchmarkCommitBucket(b *testing.B) {
	for _, n := range []int{1, 500} {
		b.Run(fmt.Sprintf("keys=%d", n), func(b *testing.B) {
			ix := openBench(b, filepath.Join(b.TempDir(), "index"))
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				b.StopTimer()
				meta, entries := benchBucket(uint64(i+1), n)
				b.StartTimer()
				if err := ix.CommitBucket(meta, entries); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N*n)/b.Elapsed().Seconds(), "keys/s")
		})
	}
}

// BenchmarkDeleteBucket500 deletes buckets of 500 keys.
func BenchmarkDeleteBucket500(b *testing.B) {
	ix := openBench(b, filepath.Join(b.TempDir(), "index"))
	const n = 500
	for i := 0; b.Loop(); i++ {
		b.StopTimer()
		meta, entries := benchBucket(uint64(i+1), n)
		if err := ix.CommitBucket(meta, entries); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		if _, err := ix.DeleteBucket(uint64(i + 1)); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkGet looks up random keys among 10 buckets of 500 (the memtable
// and, after the reopen, sstables through the block cache).
func BenchmarkGet(b *testing.B) {
	dir := filepath.Join(b.TempDir(), "index")
	ix := openBench(b, dir)
	const buckets, n = 10, 500
	for id := uint64(1); id <= buckets; id++ {
		meta, entries := benchBucket(id, n)
		if err := ix.CommitBucket(meta, entries); err != nil {
			b.Fatal(err)
		}
	}
	if err := ix.Close(); err != nil {
		b.Fatal(err)
	}
	ix = openBench(b, dir)
	keys := make([][]byte, 0, buckets*n)
	for id := uint64(1); id <= buckets; id++ {
		for i := 0; i < n; i++ {
			keys = append(keys, benchKey(id, i))
		}
	}
	b.Run("serial", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			if _, found, err := ix.Get(keys[(i*7919)%len(keys)]); err != nil || !found {
				b.Fatal(err, found)
			}
		}
	})
	b.Run("parallel", func(b *testing.B) {
		b.RunParallel(func(pb *testing.PB) {
			i := 0
			for pb.Next() {
				if _, found, err := ix.Get(keys[(i*7919)%len(keys)]); err != nil || !found {
					b.Error(err, found)
					return
				}
				i++
			}
		})
	})
}

// BenchmarkLookupAbsent500 checks 500 absent keys against an index of 50
// buckets of 500, as an offload's duplicate check does: a Get per key, or
// one GetMany.
func BenchmarkLookupAbsent500(b *testing.B) {
	ix := openBench(b, filepath.Join(b.TempDir(), "index"))
	for id := uint64(1); id <= 50; id++ {
		meta, entries := benchBucket(id, 500)
		require.NoError(b, ix.CommitBucket(meta, entries))
	}
	_, probe := benchBucket(1000, 500)
	keys := make([][]byte, len(probe))
	for i, e := range probe {
		keys[i] = e.Key
	}
	b.Run("Get", func(b *testing.B) {
		for b.Loop() {
			for _, k := range keys {
				if _, found, err := ix.Get(k); err != nil || found {
					b.Fatal(err, found)
				}
			}
		}
	})
	b.Run("GetMany", func(b *testing.B) {
		for b.Loop() {
			if _, _, err := ix.GetMany(keys); err != nil {
				b.Fatal(err)
			}
		}
	})
}
