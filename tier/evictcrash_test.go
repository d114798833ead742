package tier

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/stretchr/testify/require"

	"github.com/tierstore/tierstore/backend/mem"
)

// A crash after the owner answered OnEvict and before the bucket left the
// index (the owner dropped its replicas: for it the keys are gone) must
// not bring the keys back: the next Open completes the eviction. A bucket
// whose eviction the owner refused stays whole across a crash.
func TestCrashAfterTheOwnerAnsweredEviction(t *testing.T) {
	for _, refuse := range []bool{false, true} {
		t.Run(fmt.Sprint("refused=", refuse), func(t *testing.T) {
			fs := vfs.NewCrashableMem()
			mb := mem.New()
			var mu sync.Mutex // guards the fields below (buckets are pipelined)
			var fsImg *vfs.MemFS
			var beImg *mem.Backend
			var asked [][]byte
			onEvict := func(_ context.Context, keys [][]byte) ([][]byte, error) {
				mu.Lock()
				defer mu.Unlock()
				if fsImg != nil {
					return nil, errors.New("not now") // one victim is enough
				}
				asked = append(asked, keys...)
				if refuse {
					return nil, errors.New("owner unreachable")
				}
				// The owner answered; the process dies before the tier's batch.
				fsImg = fs.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: 0})
				beImg = mb.CrashClone()
				return nil, nil
			}
			e, err := Open("/tier", Options{Backend: mb, IndexFS: fs, BucketKeysLimit: 3, Capacity: 40 * 4096 * 4, HighWatermark: 0.9, LowWatermark: 0.5, OnEvict: onEvict})
			require.NoError(t, err)
			for round := 0; round < 8; round++ {
				e.Offload(bg, makeTasks(fmt.Sprintf("r%d", round), 6, 3*4096, uint64(round)), nil)
				mu.Lock()
				n := len(asked)
				mu.Unlock()
				if n > 0 {
					break
				}
			}
			require.NotEmpty(t, asked, "the workload must evict")
			if refuse {
				require.NoError(t, e.Close())
				mu.Lock()
				fsImg, beImg = fs.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: 0}), mb.CrashClone()
				mu.Unlock()
			} else {
				require.NoError(t, e.Close())
			}
			e2, err := Open("/tier", Options{Backend: beImg, IndexFS: fsImg, BucketKeysLimit: 3, Capacity: 40 * 4096 * 4})
			require.NoError(t, err)
			defer e2.Close()
			for i, r := range e2.Load(bg, asked) {
				if refuse {
					require.NoError(t, r.Err, "key %s of a bucket whose eviction was refused", asked[i])
				} else {
					require.ErrorIs(t, r.Err, ErrNotFound, "key %s came back after its eviction was answered", asked[i])
				}
			}
			if !refuse {
				require.EqualValues(t, 1, e2.Stats().Evictions, "the interrupted eviction is counted")
			}
		})
	}
}
