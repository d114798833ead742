package tier

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tierstore/tierstore/backend"
	"github.com/tierstore/tierstore/backend/mem"
	"github.com/tierstore/tierstore/bucket"
)

// capacityGuard fails the test if the bucket files would ever exceed limit.
type capacityGuard struct {
	backend.Backend
	t     testing.TB
	limit int64
	mu    sync.Mutex
	peak  int64
}

func (g *capacityGuard) WriteBucket(ctx context.Context, id uint64, data [][]byte) error {
	g.mu.Lock()
	files, err := g.Backend.List()
	require.NoError(g.t, err)
	total := backend.TotalLen(data)
	for _, f := range files {
		total += f.Size
	}
	g.peak = max(g.peak, total)
	g.mu.Unlock()
	if total > g.limit {
		g.t.Errorf("writing bucket %d would use %d bytes, capacity %d", id, total, g.limit)
	}
	return g.Backend.WriteBucket(ctx, id, data)
}

const objSize = 15 * 4096 // 4 objects + header + trailer block = 17 blocks

var bucketBytes = bucket.Size(4, 4*int64(len("b00-0000")), 4*objSize)

type evictRecorder struct {
	mu      sync.Mutex
	evicted [][]byte
	calls   int
	e       *Engine
	// loadOK records whether every evicted key was still loadable when
	// the callback ran (the owner is told before the bytes disappear).
	loadOK bool
	fail   error
	// keep, when set, keeps the keys with this prefix (as a lease would).
	keep string
}

func (r *evictRecorder) onEvict(ctx context.Context, keys [][]byte) ([][]byte, error) {
	if r.fail != nil {
		return nil, r.fail
	}
	var kept [][]byte
	ok := true
	for _, res := range r.e.Load(ctx, keys) {
		if res.Err != nil {
			ok = false
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, k := range keys {
		if r.keep != "" && strings.HasPrefix(string(k), r.keep) {
			kept = append(kept, k)
			continue
		}
		r.evicted = append(r.evicted, k)
	}
	r.calls++
	r.loadOK = ok
	return kept, nil
}

func fillBuckets(t *testing.T, e *Engine, first, n int) [][]Task {
	var out [][]Task
	for b := first; b < first+n; b++ {
		tasks := makeTasks(fmt.Sprintf("b%02d", b), 4, objSize, uint64(b))
		requireStatus(t, e.Offload(bg, tasks, nil), Persisted)
		out = append(out, tasks)
	}
	return out
}

func loaded(e *Engine, tasks []Task) bool {
	for _, r := range e.Load(bg, keysOf(tasks)) {
		if r.Err != nil {
			return false
		}
	}
	return true
}

// Filling past the high watermark evicts the least recently read buckets
// down to the low watermark, tells the owner first, and never exceeds the
// capacity.
func TestEvictionLRU(t *testing.T) {
	capacity := 10 * bucketBytes
	guard := &capacityGuard{Backend: mem.New(), t: t, limit: capacity}
	rec := &evictRecorder{}
	e := openEngine(t, t.TempDir(), Options{
		Backend: guard, Capacity: capacity, BucketKeysLimit: 4, OnEvict: rec.onEvict,
	})
	rec.e = e
	buckets := fillBuckets(t, e, 0, 9) // 90%: at the high watermark
	require.Zero(t, e.Stats().Evictions)
	requireLoads(t, e, buckets[0]) // bucket 0 is now the most recently read
	buckets = append(buckets, fillBuckets(t, e, 9, 1)...)
	// 10 buckets would cross 90%: evict down to 80% = 8 buckets, the least
	// recently read first: buckets 1 and 2.
	require.EqualValues(t, 2, e.Stats().Evictions)
	require.Equal(t, 2, rec.calls, "the owner is told once per victim bucket")
	require.True(t, rec.loadOK, "evicted keys must be readable while the owner is told")
	want := append(keysOf(buckets[1]), keysOf(buckets[2])...)
	require.ElementsMatch(t, want, rec.evicted)
	for b, tasks := range buckets {
		require.Equal(t, b != 1 && b != 2, loaded(e, tasks), "bucket %d", b)
	}
	// Keep going: the capacity is never exceeded.
	fillBuckets(t, e, 10, 20)
	require.LessOrEqual(t, e.Stats().BytesUsed, capacity)
	require.LessOrEqual(t, guard.peak, capacity)
}

func TestEvictionFIFO(t *testing.T) {
	capacity := 10 * bucketBytes
	e := openEngine(t, t.TempDir(), Options{Backend: mem.New(), Capacity: capacity, BucketKeysLimit: 4, Eviction: "fifo"})
	buckets := fillBuckets(t, e, 0, 9)
	requireLoads(t, e, buckets[0]) // reading does not protect under fifo
	buckets = append(buckets, fillBuckets(t, e, 9, 1)...)
	for b, tasks := range buckets {
		require.Equal(t, b >= 2, loaded(e, tasks), "bucket %d", b)
	}
}

// A bucket being read is not chosen as a victim and is not deleted under
// its reader.
func TestEvictionSkipsBucketUnderRead(t *testing.T) {
	bb := &blockingBackend{Backend: mem.New(), block: map[uint64]chan struct{}{}, entered: make(chan uint64, 1)}
	capacity := 10 * bucketBytes
	e := openEngine(t, t.TempDir(), Options{Backend: bb, Capacity: capacity, BucketKeysLimit: 4, Eviction: "fifo"})
	buckets := fillBuckets(t, e, 0, 9)
	loc, _, err := e.ix.Get(buckets[0][0].Key)
	require.NoError(t, err)
	release := bb.hold(loc.Bucket)
	var once sync.Once
	unblock := func() { once.Do(func() { close(release) }) }
	defer unblock() // a failing assertion must not leave Close waiting
	done := make(chan LoadResult, 1)
	go func() { done <- e.Load(bg, [][]byte{buckets[0][0].Key})[0] }()
	<-bb.entered
	// If eviction picked the bucket under read it would wait for the reader,
	// which this test releases only afterwards: bound that wait.
	ctx, cancel := context.WithTimeout(bg, 20*time.Second)
	defer cancel()
	next := makeTasks("b09", 4, objSize, 9)
	requireStatus(t, e.Offload(ctx, next, nil), Persisted)
	buckets = append(buckets, next)
	require.Contains(t, fileIDs(t, bb), loc.Bucket, "the bucket under read must survive")
	unblock()
	r := <-done
	require.NoError(t, r.Err)
	require.Equal(t, buckets[0][0].Value, r.Value)
	// fifo would have taken buckets 0 and 1; 0 was being read, so 1 and 2 went.
	for b, tasks := range buckets {
		require.Equal(t, b == 0 || b >= 3, loaded(e, tasks), "bucket %d", b)
	}
}

// When the owner refuses to let buckets go, nothing is deleted: writes go on
// up to the capacity, then fail with a retryable no-space error.
func TestEvictionCallbackFailureKeepsData(t *testing.T) {
	capacity := 10 * bucketBytes
	rec := &evictRecorder{fail: errors.New("master unreachable")}
	guard := &capacityGuard{Backend: mem.New(), t: t, limit: capacity}
	e := openEngine(t, t.TempDir(), Options{Backend: guard, Capacity: capacity, BucketKeysLimit: 4, OnEvict: rec.onEvict})
	buckets := fillBuckets(t, e, 0, 10) // the 10th crosses the high watermark but fits
	out := e.Offload(bg, makeTasks("b10", 4, objSize, 10), nil)
	for _, o := range out {
		require.Equal(t, Failed, o.Status)
		require.True(t, o.Retryable)
		require.ErrorIs(t, o.Err, ErrNoSpace)
		require.ErrorContains(t, o.Err, "master unreachable")
	}
	for _, tasks := range buckets {
		require.True(t, loaded(e, tasks))
	}
	require.Zero(t, e.Stats().Evictions)
	rec.fail = nil
	rec.e = e
	requireStatus(t, e.Offload(bg, makeTasks("b10", 4, objSize, 10), nil), Persisted)
	require.LessOrEqual(t, guard.peak, capacity)
}

// A key the owner keeps (a reader holds a lease on it) is re-inserted into
// a new bucket; the rest of its bucket is evicted, and the victim's file
// goes. Nothing is announced for the kept key: same key, size and CRC.
func TestEvictionReinsertsKeptKeys(t *testing.T) {
	capacity := 10 * bucketBytes
	guard := &capacityGuard{Backend: mem.New(), t: t, limit: capacity}
	rec := &evictRecorder{keep: "b01-0002"}
	dir := t.TempDir()
	e := openEngine(t, dir, Options{Backend: guard, Capacity: capacity, BucketKeysLimit: 4, Eviction: "fifo", OnEvict: rec.onEvict})
	rec.e = e
	buckets := fillBuckets(t, e, 0, 10)
	// fifo takes bucket 0, then bucket 1 less its kept key (re-inserted:
	// about a quarter of a bucket), then bucket 2.
	for b, tasks := range buckets {
		for i, r := range e.Load(bg, keysOf(tasks)) {
			switch {
			case b == 1 && i == 2:
				require.NoError(t, r.Err, "the kept key")
				require.Equal(t, tasks[i].Value, r.Value)
			case b <= 2:
				require.ErrorIs(t, r.Err, ErrNotFound, "bucket %d key %d", b, i)
			default:
				require.NoError(t, r.Err)
			}
		}
	}
	kept, err := e.Stat(buckets[1][2].Key)
	require.NoError(t, err)
	s := e.Stats()
	require.EqualValues(t, 1, s.ReinsertedObjects)
	require.Positive(t, s.ReinsertedBytes)
	require.EqualValues(t, 3, s.Evictions)
	require.EqualValues(t, 11, s.EvictedKeys)
	require.Len(t, rec.evicted, 11)
	require.LessOrEqual(t, guard.peak, capacity)
	require.LessOrEqual(t, s.BytesUsed, capacity)
	ids := fileIDs(t, guard)
	require.Equal(t, ids[len(ids)-1], kept.Bucket, "the kept key lives in the newest bucket")
	require.Len(t, ids, 8, "buckets 3..9 and the re-insertion bucket")
	require.NoError(t, e.ix.Check())
}

// A write that cannot fit even after evicting every evictable bucket (here
// both are being read) fails with a retryable no-space error.
func TestNoEvictableSpace(t *testing.T) {
	bb := &blockingBackend{Backend: mem.New(), block: map[uint64]chan struct{}{}, entered: make(chan uint64, 2)}
	capacity := 2*bucketBytes + bucketBytes/2
	e := openEngine(t, t.TempDir(), Options{Backend: bb, Capacity: capacity, BucketKeysLimit: 4, BucketBytesLimit: bucketBytes})
	buckets := fillBuckets(t, e, 0, 2)
	var releases []chan struct{}
	for _, ts := range buckets {
		loc, _, err := e.ix.Get(ts[0].Key)
		require.NoError(t, err)
		releases = append(releases, bb.hold(loc.Bucket))
	}
	done := make(chan []LoadResult)
	go func() { done <- e.Load(bg, [][]byte{buckets[0][0].Key, buckets[1][0].Key}) }()
	<-bb.entered
	<-bb.entered
	out := e.Offload(bg, makeTasks("b02", 4, objSize, 2), nil)
	for _, o := range out {
		require.Equal(t, Failed, o.Status)
		require.True(t, o.Retryable)
		require.ErrorIs(t, o.Err, ErrNoSpace)
	}
	for _, r := range releases {
		close(r)
	}
	for _, r := range <-done {
		require.NoError(t, r.Err)
	}
	requireStatus(t, e.Offload(bg, makeTasks("b02", 4, objSize, 2), nil), Persisted)
	require.LessOrEqual(t, e.Stats().BytesUsed, capacity)
}

// Loads race with offloads that evict, with removals and with re-offloads:
// a Load returns the key's own bytes or ErrNotFound, never other bytes and
// never a read error from a file deleted underneath it.
func TestConcurrentLoadsDuringEviction(t *testing.T) {
	capacity := 6 * bucketBytes
	e := openEngine(t, t.TempDir(), Options{Backend: mem.New(), Capacity: capacity, BucketKeysLimit: 4})
	const nb = 24
	all := make([][]Task, nb)
	want := map[string][]byte{}
	for b := range all {
		all[b] = makeTasks(fmt.Sprintf("c%02d", b), 4, objSize/4, uint64(b))
		for _, tk := range all[b] {
			want[string(tk.Key)] = tk.Value
		}
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var hits sync.Map
	for r := 0; r < 4; r++ {
		wg.Go(func() {
			for n := 0; ; n++ {
				select {
				case <-stop:
					return
				default:
				}
				b := all[(n*7+r)%nb]
				for i, res := range e.Load(bg, keysOf(b)) {
					if res.Err != nil {
						if !errors.Is(res.Err, ErrNotFound) {
							t.Errorf("load %s: %v", b[i].Key, res.Err)
						}
						continue
					}
					hits.Store(string(b[i].Key), true)
					if string(res.Value) != string(want[string(b[i].Key)]) {
						t.Errorf("load %s returned other bytes", b[i].Key)
					}
				}
			}
		})
	}
	for round := 0; round < 3; round++ {
		for b := range all {
			for _, o := range e.Offload(bg, all[b], nil) {
				require.NotEqual(t, Failed, o.Status, "%v", o.Err)
			}
			if b%5 == 0 {
				_ = e.Remove(all[b][0].Key)
			}
		}
	}
	close(stop)
	wg.Wait()
	require.Positive(t, e.Stats().Evictions)
	require.LessOrEqual(t, e.Stats().BytesUsed, capacity)
	n := 0
	hits.Range(func(any, any) bool { n++; return true })
	require.Positive(t, n, "some loads must have hit")
}

// With EvictToFit, a write that would cross the high watermark evicts only
// the victims it needs (one bucket here), not down to the low watermark
// (two, TestEvictionLRU); the capacity still holds.
func TestEvictionToFit(t *testing.T) {
	capacity := 10 * bucketBytes
	guard := &capacityGuard{Backend: mem.New(), t: t, limit: capacity}
	rec := &evictRecorder{}
	e := openEngine(t, t.TempDir(), Options{
		Backend: guard, Capacity: capacity, BucketKeysLimit: 4, OnEvict: rec.onEvict, EvictToFit: true,
	})
	rec.e = e
	buckets := fillBuckets(t, e, 0, 9) // 90%: at the high watermark
	require.Zero(t, e.Stats().Evictions)
	requireLoads(t, e, buckets[0])
	buckets = append(buckets, fillBuckets(t, e, 9, 1)...)
	// 10 buckets would cross 90%: one victim (bucket 1, the least recently
	// read) makes room, and the SSD stays at 9 buckets.
	require.EqualValues(t, 1, e.Stats().Evictions)
	require.ElementsMatch(t, keysOf(buckets[1]), rec.evicted)
	for b, tasks := range buckets {
		require.Equal(t, b != 1, loaded(e, tasks), "bucket %d", b)
	}
	fillBuckets(t, e, 10, 20)
	require.EqualValues(t, 21, e.Stats().Evictions, "one eviction per bucket written at the watermark")
	require.LessOrEqual(t, e.Stats().BytesUsed, int64(0.9*float64(capacity)))
	require.LessOrEqual(t, guard.peak, capacity)
}
