package index

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
	"github.com/stretchr/testify/require"
)

// crash returns the state of fs after a crash now: exactly the synced data.
func crash(fs *vfs.MemFS) *vfs.MemFS {
	return fs.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: 0})
}

// Every CommitBucket, DeleteBucket and DeleteKeys that returned nil survives a
// crash: the batches are synced. (Committing with pebble.NoSync makes this
// test fail.)
func TestWritesSurviveCrash(t *testing.T) {
	mem := vfs.NewCrashableMem()
	ix := open(t, "index", mem)
	for id := uint64(1); id <= 5; id++ {
		commit(t, ix, id, keysN(string(rune('a'+id)), 20)...)
	}
	removed, err := ix.DeleteBucket(2)
	require.NoError(t, err)
	require.Len(t, removed, 20)
	require.NoError(t, ix.DeleteKeys([][]byte{[]byte("d00003"), []byte("d00004")}))
	want := allKeys(t, ix)
	wantBuckets, err := ix.Buckets()
	require.NoError(t, err)
	require.Len(t, want, 78)

	// Crash with the index still open: nothing is flushed by a Close.
	ix2 := open(t, "index", crash(mem))
	require.Equal(t, want, allKeys(t, ix2))
	gotBuckets, err := ix2.Buckets()
	require.NoError(t, err)
	require.Equal(t, wantBuckets, gotBuckets)
	require.Equal(t, int64(78), ix2.Count())
	require.Equal(t, uint64(6), ix2.NextBucketID())
	n, err := ix2.BucketLiveKeys(3)
	require.NoError(t, err)
	require.Equal(t, 18, n)
	require.NoError(t, ix2.Check())
}

// walFault injects errorfs.ErrInjected into the given operation kinds on
// pebble's WAL files while on.
func walFault(kinds ...errorfs.OpKind) *errorfs.Toggle {
	return &errorfs.Toggle{Injector: errorfs.InjectorFunc(func(op errorfs.Op) error {
		if !strings.HasSuffix(op.Path, ".log") {
			return nil
		}
		for _, k := range kinds {
			if op.Kind == k {
				return errorfs.ErrInjected
			}
		}
		return nil
	})}
}

// A WAL write or sync that fails makes CommitBucket return an error, turns
// the index unusable until reopened, and leaves no half-committed bucket:
// after a crash it is absent; after a clean reopen of the same files it is
// either wholly present or wholly absent.
func TestFailedCommitLeavesNoHalfCommit(t *testing.T) {
	for _, tc := range []struct {
		name  string
		kinds []errorfs.OpKind
	}{
		{"write", []errorfs.OpKind{errorfs.OpFileWrite, errorfs.OpFileWriteAt}},
		{"sync", []errorfs.OpKind{errorfs.OpFileSync, errorfs.OpFileSyncData, errorfs.OpFileSyncTo}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mem := vfs.NewCrashableMem()
			fault := walFault(tc.kinds...)
			ix := open(t, "index", errorfs.Wrap(mem, fault))
			commit(t, ix, 1, "a", "b", "c")

			fault.On()
			meta, entries := bucketOf(2, "b", "d", "e", "f")
			err := ix.CommitBucket(meta, entries)
			fault.Off()
			require.ErrorIs(t, err, ErrFailed)
			require.ErrorContains(t, err, "injected")

			// Unusable until reopened: the failed batch may sit in pebble's
			// memtable and must not be served.
			_, _, err = ix.Get([]byte("d"))
			require.ErrorIs(t, err, ErrFailed)
			m2, e2 := bucketOf(3, "g")
			require.ErrorIs(t, ix.CommitBucket(m2, e2), ErrFailed)
			_, err = ix.Buckets()
			require.ErrorIs(t, err, ErrFailed)
			crashed := crash(mem)
			_ = ix.Close() // may report the WAL error again

			// After a crash: bucket 1 wholly present, bucket 2 absent.
			ixc := open(t, "index", crashed)
			require.Equal(t, map[string]Location{"a": locFor(1, 0), "b": locFor(1, 1), "c": locFor(1, 2)}, allKeys(t, ixc))
			bs, err := ixc.Buckets()
			require.NoError(t, err)
			require.Len(t, bs, 1)
			require.Equal(t, uint64(2), ixc.NextBucketID())
			require.NoError(t, ixc.Check())
			// And it works again.
			commit(t, ixc, 2, "b", "d")
			require.NoError(t, ixc.Check())

			// After a clean reopen of the same files: all or nothing.
			ixs := open(t, "index", mem)
			require.NoError(t, ixs.Check())
			bs, err = ixs.Buckets()
			require.NoError(t, err)
			keys := allKeys(t, ixs)
			if len(bs) == 2 {
				require.Len(t, keys, 6)
				loc, found, err := ixs.Get([]byte("b"))
				require.NoError(t, err)
				require.True(t, found)
				require.Equal(t, uint64(2), loc.Bucket)
			} else {
				require.Len(t, bs, 1)
				require.Len(t, keys, 3)
			}
		})
	}
}

// A DeleteBucket whose WAL sync fails leaves the bucket wholly in place after
// a crash.
func TestFailedDeleteBucketLeavesBucket(t *testing.T) {
	mem := vfs.NewCrashableMem()
	fault := walFault(errorfs.OpFileSync, errorfs.OpFileSyncData, errorfs.OpFileSyncTo)
	ix := open(t, "index", errorfs.Wrap(mem, fault))
	commit(t, ix, 1, "a", "b")
	commit(t, ix, 2, "c")
	fault.On()
	_, err := ix.DeleteBucket(1)
	fault.Off()
	require.ErrorIs(t, err, ErrFailed)
	crashed := crash(mem)
	_ = ix.Close()

	ixc := open(t, "index", crashed)
	require.Len(t, allKeys(t, ixc), 3)
	n, err := ixc.BucketLiveKeys(1)
	require.NoError(t, err)
	require.Equal(t, 2, n)
	require.NoError(t, ixc.Check())
}

// Crashes taken while commits are in flight, keeping a random half of the
// unsynced data: every acknowledged bucket survives, every surviving bucket
// is whole, and the survivors are a prefix of the commit order.
func TestCrashDuringCommits(t *testing.T) {
	mem := vfs.NewCrashableMem()
	ix := open(t, "index", mem)
	const buckets, perBucket = 40, 30
	acked := make(chan uint64, buckets)
	done := make(chan error, 1)
	go func() {
		for id := uint64(1); id <= buckets; id++ {
			meta, entries := bucketOf(id, keysN(fmt.Sprintf("b%02d-", id), perBucket)...)
			if err := ix.CommitBucket(meta, entries); err != nil {
				done <- err
				return
			}
			acked <- id
		}
		done <- nil
	}()

	rng := rand.New(rand.NewPCG(1, 2))
	var last uint64
	var clones []*vfs.MemFS
	var ackedAt []uint64
	for last < buckets {
		last = <-acked
		if last%8 == 3 {
			// Crash now: last is acknowledged; the next may be in flight.
			clones = append(clones, mem.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: 50, RNG: rng}))
			ackedAt = append(ackedAt, last)
		}
	}
	require.NoError(t, <-done)
	require.NotEmpty(t, clones)

	for i, fs := range clones {
		c := open(t, "index", fs)
		require.NoError(t, c.Check(), "crash %d", i)
		bs, err := c.Buckets()
		require.NoError(t, err)
		require.GreaterOrEqual(t, len(bs), int(ackedAt[i]), "crash %d lost an acknowledged bucket", i)
		for j, b := range bs {
			require.Equal(t, uint64(j+1), b.ID, "crash %d: survivors are not a prefix", i)
			n, err := c.BucketLiveKeys(b.ID)
			require.NoError(t, err)
			require.Equal(t, perBucket, n, "crash %d: bucket %d is partial", i, b.ID)
		}
		require.Equal(t, int64(len(bs)*perBucket), c.Count())
		require.Equal(t, uint64(len(bs)+1), c.NextBucketID())
		require.NoError(t, c.Close())
	}
}

// A Commit that moves keys and drops a bucket is one batch: after a crash
// right after it returns, all of it is there.
func TestCommitWithDropSurvivesCrash(t *testing.T) {
	mem := vfs.NewCrashableMem()
	ix := open(t, "index", mem)
	commit(t, ix, 1, "a", "b", "c")
	meta, entries := bucketOf(2, "b")
	_, err := ix.Commit(Commit{Meta: meta, Entries: entries, Drop: []uint64{1}})
	require.NoError(t, err)
	ix2 := open(t, "index", crash(mem))
	require.Equal(t, map[string]Location{"b": locFor(2, 0)}, allKeys(t, ix2))
	bs, err := ix2.Buckets()
	require.NoError(t, err)
	require.Equal(t, []BucketMeta{withLive(meta, entries)}, bs)
	require.NoError(t, ix2.Check())
}
