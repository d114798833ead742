package tier

import (
	"context"
	"errors"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
	"github.com/stretchr/testify/require"

	"github.com/tierstore/tierstore/backend"
	"github.com/tierstore/tierstore/backend/mem"
	"github.com/tierstore/tierstore/bucket"
)

// walGate holds pebble's WAL syncs while armed: the sync that arrives
// waits until release. entered receives one value per held sync.
type walGate struct {
	armed   atomic.Bool
	entered chan struct{}
	gate    chan struct{}
	once    sync.Once
}

func newWALGate() *walGate {
	return &walGate{entered: make(chan struct{}, 16), gate: make(chan struct{})}
}

func (g *walGate) injector() errorfs.Injector {
	return errorfs.InjectorFunc(func(op errorfs.Op) error {
		if g.armed.Load() && strings.HasSuffix(op.Path, ".log") &&
			(op.Kind == errorfs.OpFileSync || op.Kind == errorfs.OpFileSyncData || op.Kind == errorfs.OpFileSyncTo) {
			g.entered <- struct{}{}
			<-g.gate
		}
		return nil
	})
}

func (g *walGate) release() {
	g.armed.Store(false)
	g.once.Do(func() { close(g.gate) })
}

// No read waits behind a WAL sync: while the synced index write of an
// offload commit, a notify rollback, a removal, an eviction or a checksum
// drop is stuck in its WAL sync, Load, LoadAsync, Exists and Stats of other
// objects complete. (Holding the engine lock across any of these commits
// makes this test fail.)
func TestNoReadBehindWALSync(t *testing.T) {
	cases := []struct {
		name string
		// act starts a synced index write that arms g at the right time.
		act func(t *testing.T, e *Engine, g *walGate)
	}{
		{"offload commit", func(t *testing.T, e *Engine, g *walGate) {
			g.armed.Store(true)
			requireStatus(t, e.Offload(bg, makeTasks("new", 3, 5000, 9), nil), Persisted)
		}},
		{"notify rollback", func(t *testing.T, e *Engine, g *walGate) {
			e.Offload(bg, makeTasks("new", 3, 5000, 9), func(context.Context, []Committed) error {
				g.armed.Store(true)
				return errors.New("refused")
			})
		}},
		{"remove", func(t *testing.T, e *Engine, g *walGate) {
			g.armed.Store(true)
			require.NoError(t, e.Remove([]byte("lone")))
		}},
		{"eviction", func(t *testing.T, e *Engine, g *walGate) {
			e.opts.OnEvict = func(context.Context, [][]byte) ([][]byte, error) {
				g.armed.Store(true)
				return nil, nil
			}
			for i := range 12 {
				e.Offload(bg, makeTasks(string(rune('a'+i))+"fill", 4, objSize, uint64(i)), nil)
			}
		}},
		{"checksum drop", func(t *testing.T, e *Engine, g *walGate) {
			info, err := e.Stat([]byte("lone"))
			require.NoError(t, err)
			e.be.(*corruptingBackend).bad.Store(info.Bucket)
			g.armed.Store(true)
			require.ErrorIs(t, e.Load(bg, [][]byte{[]byte("lone")})[0].Err, ErrChecksum)
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			g := newWALGate()
			be := &corruptingBackend{Backend: mem.New()}
			e, err := Open("/tier", Options{Backend: be, IndexFS: errorfs.Wrap(vfs.NewMem(), g.injector()),
				Capacity: 10 * bucketBytes, BucketKeysLimit: 4})
			require.NoError(t, err)
			defer e.Close()
			defer g.release() // before Close, which waits for the blocked calls
			resident := makeTasks("res", 4, 5000, 1)
			requireStatus(t, e.Offload(bg, resident, nil), Persisted)
			requireStatus(t, e.Offload(bg, []Task{{Key: []byte("lone"), Value: []byte("only key of its bucket")}}, nil), Persisted)
			requireLoads(t, e, resident) // the most recently read: not the eviction victim

			acted := make(chan struct{})
			go func() {
				defer close(acted)
				c.act(t, e, g)
			}()
			waitOrFail(t, g.entered, "the write to block")
			loaded := make(chan []LoadResult, 2)
			go func() { loaded <- e.Load(bg, keysOf(resident)) }()
			go e.LoadAsync(bg, keysOf(resident), nil, func(res []LoadResult) { loaded <- res })
			for range 2 {
				for i, r := range waitOrFail(t, loaded, "Load during a blocked WAL sync") {
					require.NoError(t, r.Err)
					require.Equal(t, resident[i].Value, r.Value)
				}
			}
			answered := make(chan error, 1)
			go func() {
				ok, err := e.Exists(resident[0].Key)
				if err == nil && !ok {
					err = errors.New("resident key not found")
				}
				e.Stats()
				answered <- err
			}()
			require.NoError(t, waitOrFail(t, answered, "Exists and Stats during a blocked WAL sync"))
			g.release()
			waitOrFail(t, acted, "the blocked write")
		})
	}
}

// corruptingBackend flips a byte of every read of bucket bad.
type corruptingBackend struct {
	*mem.Backend
	bad atomic.Uint64
}

func (c *corruptingBackend) Read(ctx context.Context, ops []backend.ReadOp) error {
	err := c.Backend.Read(ctx, ops)
	for i := range ops {
		if ops[i].ID == c.bad.Load() && ops[i].Err == nil && len(ops[i].Data) > 0 {
			ops[i].Data[0] ^= 0xFF
		}
	}
	return err
}

// Re-offloading keys with other bytes replaces the stale versions in the
// same index batch as the new bucket's commit. When that commit fails,
// nothing changed: the stale versions still load, and no file or byte
// leaks (before the single batch, the stale versions were deleted first and
// their emptied bucket's file stayed until the next Open).
func TestStaleReplacementCommitFailureLeaksNothing(t *testing.T) {
	e := openEngine(t, t.TempDir(), Options{Backend: mem.New()})
	v1 := makeTasks("ver", 3, 5000, 1)
	requireStatus(t, e.Offload(bg, v1, nil), Persisted)
	before := e.Stats()
	files := fileIDs(t, e.Backend())
	require.Len(t, files, 1)

	e.testHookCommit = func(uint64) error { return errSentinel }
	v2 := makeTasks("ver", 3, 6000, 2)
	for _, o := range e.Offload(bg, v2, func(context.Context, []Committed) error {
		t.Error("notify of an uncommitted bucket")
		return nil
	}) {
		require.Equal(t, Failed, o.Status)
		require.True(t, o.Retryable)
		require.ErrorIs(t, o.Err, errSentinel)
	}
	requireLoads(t, e, v1)
	require.Equal(t, files, fileIDs(t, e.Backend()), "the new file is removed, the stale one kept")
	after := e.Stats()
	require.Equal(t, before.BytesUsed, after.BytesUsed, "bytes leaked")
	require.Equal(t, before.Buckets, after.Buckets)
	require.EqualValues(t, 3, after.Objects)

	e.testHookCommit = nil
	requireStatus(t, e.Offload(bg, v2, nil), Persisted)
	requireLoads(t, e, v2)
	require.Len(t, fileIDs(t, e.Backend()), 1, "the stale versions' bucket went with the replacing commit")
	require.Equal(t, e.Stats().BytesUsed, bucket.Size(3, int64(3*len("ver-0000")), 3*bucket.AlignUp(6000)))
	require.NoError(t, e.ix.Check())
}

// A crash between the bucket write and its index commit (the file durable,
// the commit not) loses nothing acknowledged: after Open the file is an
// orphan and removed, the keys it held are not there, and the stale
// versions it would have replaced still load intact.
func TestCrashBetweenWriteAndCommit(t *testing.T) {
	fs := vfs.NewCrashableMem()
	mb := mem.New()
	e, err := Open("/tier", Options{Backend: mb, IndexFS: fs})
	require.NoError(t, err)
	v1 := makeTasks("ver", 3, 5000, 1)
	requireStatus(t, e.Offload(bg, v1, nil), Persisted)
	var img *crashImage
	e.testHookCommit = func(id uint64) error {
		img = &crashImage{fs: fs.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: 0}), be: mb.CrashClone()}
		return nil
	}
	v2 := append(makeTasks("ver", 2, 6000, 2), makeTasks("new", 2, 7000, 3)...)
	requireStatus(t, e.Offload(bg, v2, nil), Persisted)
	require.NoError(t, e.Close())
	require.NotNil(t, img)
	files, err := img.be.List()
	require.NoError(t, err)
	require.Len(t, files, 2, "the new bucket's file was durable at the crash")

	e2, err := Open("/tier", Options{Backend: img.be, IndexFS: img.fs})
	require.NoError(t, err)
	defer e2.Close()
	require.EqualValues(t, 1, e2.Stats().OrphanFilesRemoved)
	requireLoads(t, e2, v1)
	for _, r := range e2.Load(bg, keysOf(v2[2:])) {
		require.ErrorIs(t, r.Err, ErrNotFound)
	}
	require.Len(t, fileIDs(t, img.be), 1)
	require.EqualValues(t, 3, e2.Stats().Objects)
	require.NoError(t, e2.ix.Check())
}

// Open works per bucket: it reads each bucket's trailer and footer once and
// checks them against the bucket record (trailer CRC, size, object count),
// not each object. A bucket file replaced by another valid bucket file of
// the same size (same id, other objects) is caught by that check.
func TestOpenChecksTrailerAgainstRecord(t *testing.T) {
	dir := t.TempDir()
	e, err := Open(dir, Options{BucketKeysLimit: 2})
	require.NoError(t, err)
	tasks := makeTasks("rec", 4, 5000, 7)
	requireStatus(t, e.Offload(bg, tasks, nil), Persisted)
	info, err := e.Stat(tasks[0].Key)
	require.NoError(t, err)
	// Not a clean close: this session's buckets are read at the next
	// Open (after a clean close none is, TestOpenReadsOnlyUnprovenBuckets).
	require.NoError(t, e.close(false))
	// Same id, same size, other keys: a valid bucket, but not this one.
	other, err := bucket.Encode([]bucket.Object{
		{Key: []byte("xxx-0000"), Value: make([]byte, 5000)}, {Key: []byte("xxx-0001"), Value: make([]byte, 5000)},
	}, bucket.EncodeOptions{ID: info.Bucket})
	require.NoError(t, err)
	var raw []byte
	for _, d := range other.Data {
		raw = append(raw, d...)
	}
	require.NoError(t, os.WriteFile(bucketPath(dir, info.Bucket), raw, 0o644))

	e2 := openEngine(t, dir, Options{})
	require.EqualValues(t, 2, e2.Stats().EntriesDropped)
	require.EqualValues(t, 2, e2.Stats().Objects)
	ok, err := e2.Exists(tasks[0].Key)
	require.NoError(t, err)
	require.False(t, ok)
	require.NoError(t, e2.ix.Check())
}
