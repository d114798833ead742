package tier

import (
	"context"
	"path/filepath"
	"slices"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tierstore/tierstore/backend"
	"github.com/tierstore/tierstore/backend/pwrite"
)

// readCounter is a real bucket directory (pwrite) that records which
// buckets each Read touches.
type readCounter struct {
	backend.Backend
	mu  sync.Mutex
	ids []uint64
}

func (c *readCounter) Read(ctx context.Context, ops []backend.ReadOp) error {
	c.mu.Lock()
	for _, op := range ops {
		c.ids = append(c.ids, op.ID)
	}
	c.mu.Unlock()
	return c.Backend.Read(ctx, ops)
}

func (c *readCounter) read() []uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	ids := slices.Clone(c.ids)
	slices.Sort(ids)
	return slices.Compact(ids)
}

func openCounting(t *testing.T, dir string) (*Engine, *readCounter) {
	t.Helper()
	be, err := pwrite.Open(filepath.Join(dir, "buckets"), pwrite.Options{})
	require.NoError(t, err)
	rc := &readCounter{Backend: be}
	e, err := Open(dir, Options{Backend: rc, BucketKeysLimit: 2})
	require.NoError(t, err)
	return e, rc
}

// The session record (tier format 3): Open after a clean close reads no
// bucket file; Open after a crash reads exactly the buckets the crashed
// session wrote; every object stays readable with its bytes, and the dead
// bytes of buckets not read are those recorded at their commit.
func TestOpenReadsOnlyUnprovenBuckets(t *testing.T) {
	dir := t.TempDir()
	e, rc := openCounting(t, dir)
	require.Empty(t, rc.read(), "a new tier has nothing to read")
	first := makeTasks("s1", 6, 5000, 1) // 3 buckets
	requireStatus(t, e.Offload(bg, first, nil), Persisted)
	require.NoError(t, e.Remove(first[0].Key)) // one dead object
	before := e.Stats()
	require.Positive(t, before.DeadBytes)
	require.NoError(t, e.Close())

	// Clean close: nothing is read.
	e, rc = openCounting(t, dir)
	require.Empty(t, rc.read(), "Open after a clean close reads no bucket")
	s := e.Stats()
	require.Zero(t, s.OpenBucketReads)
	require.True(t, s.OpenAfterCleanClose)
	require.Equal(t, before.LiveBytes, s.LiveBytes)
	require.Equal(t, before.DeadBytes, s.DeadBytes)
	require.Equal(t, before.Objects, s.Objects)
	old := fileIDs(t, e.Backend())
	second := makeTasks("s2", 4, 5000, 2) // 2 buckets
	requireStatus(t, e.Offload(bg, second, nil), Persisted)
	var crashed []uint64
	for _, id := range fileIDs(t, e.Backend()) {
		if !slices.Contains(old, id) {
			crashed = append(crashed, id)
		}
	}
	require.Len(t, crashed, 2)
	require.NoError(t, e.close(false)) // as a kill -9: no clean-close record

	// After the crash: only the crashed session's buckets are read.
	e, rc = openCounting(t, dir)
	require.Equal(t, crashed, rc.read(), "Open after a crash reads the crashed session's buckets only")
	s = e.Stats()
	require.EqualValues(t, 2, s.OpenBucketReads)
	require.False(t, s.OpenAfterCleanClose)
	requireLoads(t, e, first[1:])
	requireLoads(t, e, second)
	require.NoError(t, e.ix.Check())
	// That Open proved them: a second crash with nothing written reads none.
	require.NoError(t, e.close(false))
	e, rc = openCounting(t, dir)
	require.Empty(t, rc.read())
	require.NoError(t, e.Close())
}
