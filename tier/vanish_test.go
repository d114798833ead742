package tier

import (
	"context"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tierstore/tierstore/backend/mem"
)

// Row B8 of docs/faults.md (invariant 1): a Load that finds its bucket file
// gone (deleted under the engine, lost with its disk) is a miss
// (ErrNotFound), the objects' entries go, so that Exists and Keys (the
// node's re-registration and reconcile) stop offering a replica this node
// cannot serve, and the owner is told through OnEvict.
func TestVanishedBucketFileIsDropped(t *testing.T) {
	var mu sync.Mutex
	var told [][]byte
	be := mem.New()
	e := openEngine(t, t.TempDir(), Options{Backend: be, OnEvict: func(_ context.Context, keys [][]byte) ([][]byte, error) {
		mu.Lock()
		defer mu.Unlock()
		told = append(told, keys...)
		return nil, nil
	}})
	tasks := makeTasks("gone", 3, 5000, 7)
	requireStatus(t, e.Offload(bg, tasks, nil), Persisted)
	files := fileIDs(t, e.Backend())
	require.Len(t, files, 1)
	require.NoError(t, be.Delete(files[0]))

	for i, r := range e.Load(bg, keysOf(tasks)) {
		require.ErrorIs(t, r.Err, ErrNotFound, "key %d", i)
		require.Nil(t, r.Value)
	}
	for _, task := range tasks {
		ok, err := e.Exists(task.Key)
		require.NoError(t, err)
		require.False(t, ok, "Exists of %s after its file vanished", task.Key)
	}
	n := 0
	require.NoError(t, e.Keys(func([]byte, KeyInfo) bool { n++; return true }))
	require.Zero(t, n, "Keys still lists objects of a vanished file")
	mu.Lock()
	defer mu.Unlock()
	require.Len(t, told, len(tasks), "the owner was not told")
}
