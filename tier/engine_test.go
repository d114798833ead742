package tier

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tierstore/tierstore/backend"
	"github.com/tierstore/tierstore/backend/mem"
	"github.com/tierstore/tierstore/backend/pwrite"
	"github.com/tierstore/tierstore/backend/uring"
	"github.com/tierstore/tierstore/internal/crc32c"
	"github.com/tierstore/tierstore/internal/keyspec"
)

var bg = context.Background()

func openEngine(t testing.TB, dir string, opts Options) *Engine {
	t.Helper()
	e, err := Open(dir, opts)
	require.NoError(t, err)
	t.Cleanup(func() { e.Close() })
	return e
}

func makeTasks(prefix string, n, size int, seed uint64) []Task {
	r := rand.New(rand.NewPCG(seed, 99))
	tasks := make([]Task, n)
	for i := range tasks {
		v := make([]byte, size)
		for j := 0; j < len(v); j += 8 {
			x := r.Uint64()
			for k := 0; k < 8 && j+k < len(v); k++ {
				v[j+k] = byte(x >> (8 * k))
			}
		}
		tasks[i] = Task{Key: []byte(fmt.Sprintf("%s-%04d", prefix, i)), Value: v}
	}
	return tasks
}

func keysOf(tasks []Task) [][]byte {
	k := make([][]byte, len(tasks))
	for i, t := range tasks {
		k[i] = t.Key
	}
	return k
}

func requireStatus(t testing.TB, out []Outcome, want Status) {
	t.Helper()
	for i, o := range out {
		require.Equal(t, want, o.Status, "task %d (%s): %v", i, o.Key, o.Err)
	}
}

func requireLoads(t testing.TB, e *Engine, tasks []Task) {
	t.Helper()
	res := e.Load(bg, keysOf(tasks))
	for i, r := range res {
		require.NoError(t, r.Err, "key %s", tasks[i].Key)
		require.Equal(t, sha256.Sum256(tasks[i].Value), sha256.Sum256(r.Value), "key %s", tasks[i].Key)
	}
}

func fileIDs(t testing.TB, be backend.Backend) []uint64 {
	t.Helper()
	files, err := be.List()
	require.NoError(t, err)
	ids := make([]uint64, len(files))
	for i, f := range files {
		ids[i] = f.ID
	}
	return ids
}

// Mooncake #4740: eleven 1 MiB objects with the default keys limit of 500 are
// all persisted by a single Offload call (the partial bucket is flushed in
// the same call) and read back from SSD with equal checksums after the DRAM
// copies are gone.
func TestIssue4740TailFlushSingleCall(t *testing.T) {
	dir := t.TempDir()
	e := openEngine(t, dir, Options{})
	tasks := makeTasks("m4", 11, 1<<20, 1)
	sums := make([][32]byte, len(tasks))
	for i, tk := range tasks {
		sums[i] = sha256.Sum256(tk.Value)
	}
	var notified [][]byte
	out := e.Offload(bg, tasks, func(_ context.Context, c []Committed) error {
		for _, x := range c {
			notified = append(notified, x.Key)
		}
		return nil
	})
	requireStatus(t, out, Persisted)
	require.Len(t, notified, 11, "every key is announced by the same call")
	require.EqualValues(t, 1, e.Stats().BucketsWritten)
	// Drop the DRAM copies: the values are only on SSD now.
	keys := keysOf(tasks)
	for i := range tasks {
		tasks[i].Value = nil
	}
	require.NoError(t, e.Close())
	e2 := openEngine(t, dir, Options{})
	res := e2.Load(bg, keys)
	for i, r := range res {
		require.NoError(t, r.Err)
		require.Equal(t, sums[i], sha256.Sum256(r.Value))
	}
}

// Mooncake #2799: when notify fails there is no index entry and no bucket
// file, and Load says not found; when it succeeds, a Load issued the moment
// the master hears of the keys (inside notify) already succeeds.
func TestIssue2799CommitBeforePublish(t *testing.T) {
	dir := t.TempDir()
	e := openEngine(t, dir, Options{})
	tasks := makeTasks("m1", 7, 100_000, 2)

	out := e.Offload(bg, tasks, func(context.Context, []Committed) error {
		return errors.New("master unreachable")
	})
	for _, o := range out {
		require.Equal(t, Failed, o.Status)
		require.True(t, o.Retryable)
		require.ErrorIs(t, o.Err, ErrNotifyFailed)
	}
	for _, r := range e.Load(bg, keysOf(tasks)) {
		require.ErrorIs(t, r.Err, ErrNotFound)
	}
	ok, err := e.Exists(tasks[0].Key)
	require.NoError(t, err)
	require.False(t, ok)
	require.Empty(t, fileIDs(t, e.Backend()), "the rolled-back bucket file must be gone")
	require.Zero(t, e.Stats().Objects)

	// The master publishes the replica inside notify; a reader that looks it
	// up at that instant must find it on the node.
	var inNotify []LoadResult
	out = e.Offload(bg, tasks, func(_ context.Context, c []Committed) error {
		keys := make([][]byte, len(c))
		for i, x := range c {
			keys[i] = x.Key
			require.Equal(t, crc32c.Checksum(tasks[i].Value), x.CRC)
			require.EqualValues(t, len(tasks[i].Value), x.Size)
		}
		inNotify = e.Load(bg, keys)
		return nil
	})
	requireStatus(t, out, Persisted)
	require.Len(t, inNotify, len(tasks))
	for i, r := range inNotify {
		require.NoError(t, r.Err, "index miss right after publish (Mooncake #2799)")
		require.True(t, bytes.Equal(tasks[i].Value, r.Value))
	}
	requireLoads(t, e, tasks)
}

// blockingBackend lets a test hold a Read in flight.
type blockingBackend struct {
	backend.Backend
	mu      sync.Mutex
	block   map[uint64]chan struct{} // reads of these buckets wait on the channel
	entered chan uint64
}

// Read waits, for each held bucket that ops read, until the test releases it.
func (b *blockingBackend) Read(ctx context.Context, ops []backend.ReadOp) error {
	seen := map[uint64]bool{}
	var wait []chan struct{}
	for _, op := range ops {
		b.mu.Lock()
		ch := b.block[op.ID]
		b.mu.Unlock()
		if ch != nil && !seen[op.ID] {
			seen[op.ID] = true
			b.entered <- op.ID
			wait = append(wait, ch)
		}
	}
	for _, ch := range wait {
		<-ch
	}
	return b.Backend.Read(ctx, ops)
}

func (b *blockingBackend) hold(id uint64) chan struct{} {
	b.mu.Lock()
	defer b.mu.Unlock()
	ch := make(chan struct{})
	b.block[id] = ch
	return ch
}

func newBlocking(t testing.TB) *blockingBackend {
	inner, err := pwrite.Open(filepath.Join(t.TempDir(), "buckets"), pwrite.Options{})
	require.NoError(t, err)
	return &blockingBackend{Backend: inner, block: map[uint64]chan struct{}{}, entered: make(chan uint64, 16)}
}

// A failed notify deletes the bucket file only after reads in flight finish.
func TestNotifyFailureWaitsForReaders(t *testing.T) {
	bb := newBlocking(t)
	e := openEngine(t, t.TempDir(), Options{Backend: bb})
	tasks := makeTasks("rb", 3, 8192, 3)
	var release chan struct{}
	var readErr error
	done := make(chan struct{})
	out := e.Offload(bg, tasks, func(_ context.Context, c []Committed) error {
		release = bb.hold(c[0].Bucket)
		go func() {
			defer close(done)
			readErr = e.Load(bg, [][]byte{c[0].Key})[0].Err
		}()
		<-bb.entered // the reader is inside Read of this bucket
		return errors.New("notify refused")
	})
	for _, o := range out {
		require.ErrorIs(t, o.Err, ErrNotifyFailed)
	}
	require.Len(t, fileIDs(t, bb), 1, "file must survive while a reader is in it")
	for _, r := range e.Load(bg, keysOf(tasks)) {
		require.ErrorIs(t, r.Err, ErrNotFound, "rolled-back keys are not served to new readers")
	}
	close(release)
	<-done
	require.NoError(t, readErr, "the reader that was already in the file reads intact bytes")
	require.Empty(t, fileIDs(t, bb), "file deleted when the last reader left")
}

// Mooncake #2827: re-offloading keys already on SSD is a success, and a bucket
// mixing new and present keys commits the new ones.
func TestIssue2827ReoffloadIsIdempotent(t *testing.T) {
	e := openEngine(t, t.TempDir(), Options{BucketKeysLimit: 4})
	tasks := makeTasks("m2", 10, 5000, 4)
	requireStatus(t, e.Offload(bg, tasks[:6], nil), Persisted)
	out := e.Offload(bg, tasks, nil)
	for i, o := range out {
		if i < 6 {
			require.Equal(t, AlreadyPresent, o.Status, "key %d", i)
		} else {
			require.Equal(t, Persisted, o.Status, "key %d: %v", i, o.Err)
		}
		require.NoError(t, o.Err)
	}
	files := fileIDs(t, e.Backend())
	discarded := e.Stats().DiscardedBuckets
	requireStatus(t, e.Offload(bg, tasks, nil), AlreadyPresent)
	// The check is at commit time: the buckets of present keys were written
	// and are deleted again, and counted.
	require.Equal(t, files, fileIDs(t, e.Backend()))
	require.EqualValues(t, 3, e.Stats().DiscardedBuckets-discarded)
	// Duplicates inside one call are folded.
	dup := append(append([]Task{}, tasks[0]), tasks[0], tasks[0])
	requireStatus(t, e.Offload(bg, dup, nil), AlreadyPresent)
	require.EqualValues(t, 10, e.Stats().Objects)
	requireLoads(t, e, tasks)
}

// Mooncake #2827 under concurrency: 32 callers offload overlapping keys; each
// key is committed (and announced) exactly once, no call fails.
func TestIssue2827ConcurrentOffloads(t *testing.T) {
	e := openEngine(t, t.TempDir(), Options{BucketKeysLimit: 8})
	all := makeTasks("conc", 64, 4096, 5)
	var mu sync.Mutex
	announced := map[string]int{}
	persisted := map[string]int{}
	var wg sync.WaitGroup
	for c := 0; c < 32; c++ {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(c), 7))
			batch := make([]Task, 24)
			for i := range batch {
				batch[i] = all[r.IntN(len(all))]
			}
			out := e.Offload(bg, batch, func(_ context.Context, cs []Committed) error {
				mu.Lock()
				defer mu.Unlock()
				for _, x := range cs {
					announced[string(x.Key)]++
				}
				return nil
			})
			mu.Lock()
			defer mu.Unlock()
			for _, o := range out {
				if o.Status == Failed {
					t.Errorf("key %s failed: %v", o.Key, o.Err)
				}
				if o.Status == Persisted {
					persisted[string(o.Key)]++
				}
			}
		})
	}
	wg.Wait()
	for k, n := range announced {
		require.Equal(t, 1, n, "key %s announced %d times", k, n)
		require.Equal(t, 1, persisted[k], "key %s persisted %d times", k, persisted[k])
	}
	require.EqualValues(t, len(announced), e.Stats().Objects)
	var present []Task
	for _, tk := range all {
		if announced[string(tk.Key)] == 1 {
			present = append(present, tk)
		}
	}
	requireLoads(t, e, present)
}

// A key whose commit is waiting on its notify is not "already present" for a
// concurrent caller: if that notify fails, the concurrent caller commits it.
func TestConcurrentOffloadWaitsForPendingNotify(t *testing.T) {
	e := openEngine(t, t.TempDir(), Options{})
	tasks := makeTasks("pend", 2, 4096, 6)
	inNotify := make(chan struct{})
	release := make(chan struct{})
	var once sync.Once
	unblock := func() { once.Do(func() { close(release) }) }
	defer unblock() // a failing assertion must not leave Close waiting
	firstDone := make(chan []Outcome, 1)
	go func() {
		firstDone <- e.Offload(bg, tasks, func(context.Context, []Committed) error {
			close(inNotify)
			<-release
			return errors.New("master gone")
		})
	}()
	<-inNotify
	waiting := make(chan struct{}, 1)
	e.testHookPendingWait = func() { waiting <- struct{}{} }
	secondDone := make(chan []Outcome, 1)
	var announced [][]byte
	go func() {
		secondDone <- e.Offload(bg, tasks, func(_ context.Context, c []Committed) error {
			for _, x := range c {
				announced = append(announced, x.Key)
			}
			return nil
		})
	}()
	select {
	case out := <-secondDone:
		t.Fatalf("second offload answered while the first notify was pending: %+v", out)
	case <-waiting:
	}
	unblock()
	for _, o := range <-firstDone {
		require.ErrorIs(t, o.Err, ErrNotifyFailed)
	}
	requireStatus(t, <-secondDone, Persisted)
	require.Len(t, announced, 2)
	requireLoads(t, e, tasks)
}

func TestBadInput(t *testing.T) {
	_, err := Open("relative/dir", Options{})
	require.ErrorIs(t, err, ErrBadOptions)
	require.ErrorContains(t, err, "absolute")
	for _, o := range []Options{
		{HighWatermark: 1.5},
		{HighWatermark: 0.5, LowWatermark: 0.6},
		{Capacity: -1},
		{Compression: "zstd"},
		{Eviction: "random"},
		{BucketKeysLimit: -1},
		{BucketBytesLimit: 100},
		{Capacity: 1 << 20, BucketBytesLimit: 2 << 20},
	} {
		_, err := Open(t.TempDir(), o)
		require.ErrorIs(t, err, ErrBadOptions, "%+v", o)
	}

	e := openEngine(t, t.TempDir(), Options{BucketBytesLimit: 1 << 20})
	big := make([]byte, 2<<20)
	out := e.Offload(bg, []Task{
		{Key: nil, Value: []byte("x")},
		{Key: make([]byte, keyspec.MaxLen+1), Value: []byte("x")},
		{Key: []byte("big"), Value: big},
		{Key: []byte("fine"), Value: []byte("ok")},
	}, nil)
	require.ErrorIs(t, out[0].Err, ErrInvalidKey)
	require.False(t, out[0].Retryable)
	require.ErrorIs(t, out[1].Err, ErrInvalidKey)
	require.ErrorIs(t, out[2].Err, ErrTooLarge)
	require.False(t, out[2].Retryable)
	require.Equal(t, Persisted, out[3].Status)
	res := e.Load(bg, [][]byte{nil, []byte("fine"), []byte("missing")})
	require.ErrorIs(t, res[0].Err, ErrInvalidKey)
	require.Equal(t, []byte("ok"), res[1].Value)
	require.ErrorIs(t, res[2].Err, ErrNotFound)
	require.ErrorIs(t, e.Remove([]byte("missing")), ErrNotFound)
}

func TestUnwritableDirectory(t *testing.T) {
	if os.Geteuid() == 0 {
		// root ignores permission bits; use a path under a regular file.
		f := filepath.Join(t.TempDir(), "file")
		require.NoError(t, os.WriteFile(f, nil, 0o644))
		_, err := Open(filepath.Join(f, "tier"), Options{})
		require.Error(t, err)
		return
	}
	d := t.TempDir()
	require.NoError(t, os.Chmod(d, 0o500))
	_, err := Open(filepath.Join(d, "tier"), Options{})
	require.Error(t, err)
}

func TestRemoveAndCompression(t *testing.T) {
	e := openEngine(t, t.TempDir(), Options{Compression: "lz4"})
	tasks := []Task{
		{Key: []byte("zeros"), Value: make([]byte, 1<<20)},
		{Key: []byte("text"), Value: bytes.Repeat([]byte("kv-cache block "), 5000)},
	}
	requireStatus(t, e.Offload(bg, tasks, nil), Persisted)
	require.Less(t, e.Stats().BytesWritten, int64(256<<10), "compressible data must be stored compressed")
	requireLoads(t, e, tasks)
	require.NoError(t, e.Remove([]byte("zeros")))
	require.Len(t, fileIDs(t, e.Backend()), 1)
	require.NoError(t, e.Remove([]byte("text")))
	require.Empty(t, fileIDs(t, e.Backend()), "a bucket whose last key is removed is deleted")
	require.Zero(t, e.Stats().BytesUsed)
}

func TestFullDiskLosesNothing(t *testing.T) {
	be := &noSpaceBackend{Backend: mem.New()}
	e := openEngine(t, t.TempDir(), Options{Backend: be})
	first := makeTasks("first", 5, 10000, 8)
	requireStatus(t, e.Offload(bg, first, nil), Persisted)
	be.full = true
	out := e.Offload(bg, makeTasks("second", 5, 10000, 9), nil)
	for _, o := range out {
		require.Equal(t, Failed, o.Status)
		require.True(t, o.Retryable)
		require.ErrorIs(t, o.Err, ErrNoSpace)
	}
	requireLoads(t, e, first)
	require.EqualValues(t, 5, e.Stats().Objects)
}

type noSpaceBackend struct {
	backend.Backend
	full bool
}

func (b *noSpaceBackend) WriteBucket(ctx context.Context, id uint64, data [][]byte) error {
	if b.full {
		return fmt.Errorf("test: %w", backend.ErrNoSpace)
	}
	return b.Backend.WriteBucket(ctx, id, data)
}

func TestClose(t *testing.T) {
	e, err := Open(t.TempDir(), Options{})
	require.NoError(t, err)
	require.NoError(t, e.Close())
	require.ErrorIs(t, e.Close(), ErrClosed)
	out := e.Offload(bg, makeTasks("c", 1, 10, 1), nil)
	require.ErrorIs(t, out[0].Err, ErrClosed)
	require.ErrorIs(t, e.Load(bg, [][]byte{[]byte("k")})[0].Err, ErrClosed)
	_, err = e.Exists([]byte("k"))
	require.ErrorIs(t, err, ErrClosed)
}

// A key on SSD with other bytes (removed and put again at the master) is not
// "already present": the new version replaces the stale one.
func TestReoffloadWithOtherBytesReplaces(t *testing.T) {
	e := openEngine(t, t.TempDir(), Options{})
	v1 := makeTasks("ver", 2, 5000, 1)
	requireStatus(t, e.Offload(bg, v1, nil), Persisted)
	v2 := makeTasks("ver", 2, 6000, 2)
	var announced []Committed
	out := e.Offload(bg, v2, func(_ context.Context, c []Committed) error {
		announced = append(announced, c...)
		return nil
	})
	requireStatus(t, out, Persisted)
	require.Len(t, announced, 2)
	require.Equal(t, crc32c.Checksum(v2[0].Value), announced[0].CRC)
	requireLoads(t, e, v2)
	info, err := e.Stat(v2[1].Key)
	require.NoError(t, err)
	require.EqualValues(t, 6000, info.Size)
	require.Len(t, fileIDs(t, e.Backend()), 1, "the bucket of the stale versions is deleted")
	require.EqualValues(t, 2, e.Stats().Objects)
	_, err = e.Stat([]byte("nope"))
	require.ErrorIs(t, err, ErrNotFound)
}

// A Task's CRC given by the caller (CRCKnown) is the one the index and the
// bucket record, with no pass of the engine's own: a value whose bytes
// changed after the caller took its CRC fails Load with ErrChecksum (and
// its entry is dropped); the values whose CRC matches load with their
// bytes, and a task without a CRC gets the one its bytes have.
func TestOffloadRecordsTheCallersCRC(t *testing.T) {
	e := openEngine(t, t.TempDir(), Options{})
	tasks := makeTasks("crc", 3, 64<<10, 5)
	for i := range tasks[:2] {
		tasks[i].CRC, tasks[i].CRCKnown = crc32c.Checksum(tasks[i].Value), true
	}
	tasks[1].Value[100] ^= 0x04 // changed after its CRC was taken
	requireStatus(t, e.Offload(bg, tasks, nil), Persisted)
	for i, task := range tasks {
		info, err := e.Stat(task.Key)
		require.NoError(t, err)
		if task.CRCKnown {
			require.Equal(t, task.CRC, info.CRC, "task %d", i)
		} else {
			require.Equal(t, crc32c.Checksum(task.Value), info.CRC, "task %d", i)
		}
	}
	got := e.Load(bg, keysOf(tasks))
	require.NoError(t, got[0].Err)
	require.Equal(t, tasks[0].Value, got[0].Value)
	require.ErrorIs(t, got[1].Err, ErrChecksum)
	require.NoError(t, got[2].Err)
	require.Equal(t, tasks[2].Value, got[2].Value)
	ok, err := e.Exists(tasks[1].Key)
	require.NoError(t, err)
	require.False(t, ok, "the entry that failed its CRC is still indexed")
}

// Unstable values (views of memory another writer may reuse) are written
// only as bytes whose CRC32C matched their task: through the io_uring
// backend's checked write and through a backend without one (the engine
// copies them first). A value changed before the write fails its task with
// ErrSourceChanged (retryable); the others of its bucket are written and
// load with their bytes.
func TestOffloadUnstableValues(t *testing.T) {
	for _, tc := range []struct {
		name string
		be   func(dir string) backend.Backend
	}{
		{"uring+direct", func(dir string) backend.Backend {
			be, err := uring.Open(dir, uring.Options{Direct: true})
			require.NoError(t, err)
			return be
		}},
		{"mem", func(string) backend.Backend { return mem.New() }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			e := openEngine(t, dir, Options{Backend: tc.be(filepath.Join(dir, "buckets"))})
			tasks := makeTasks("u", 5, 100<<10, 8)
			for i := range tasks {
				tasks[i].CRC, tasks[i].CRCKnown, tasks[i].Unstable = crc32c.Checksum(tasks[i].Value), true, true
			}
			tasks[2].Value[5000] ^= 0x80 // changed under the offload
			out := e.Offload(bg, tasks, nil)
			for i, o := range out {
				if i == 2 {
					require.Equal(t, Failed, o.Status)
					require.ErrorIs(t, o.Err, ErrSourceChanged)
					require.True(t, o.Retryable)
					continue
				}
				require.Equal(t, Persisted, o.Status, "task %d: %v", i, o.Err)
			}
			got := e.Load(bg, keysOf(tasks))
			for i, r := range got {
				if i == 2 {
					require.ErrorIs(t, r.Err, ErrNotFound)
					continue
				}
				require.NoError(t, r.Err)
				require.Equal(t, tasks[i].Value, r.Value)
			}
		})
	}
}
