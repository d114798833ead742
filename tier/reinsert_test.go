package tier

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/stretchr/testify/require"

	"github.com/tierstore/tierstore/backend/mem"
)

// leases models the master's read leases: the owner keeps every leased key
// of a victim, and every key a reader is reading (Mooncake #4508,
// invariant 4).
type leases struct {
	mu      sync.Mutex // guards leased and reading
	leased  map[string]bool
	reading map[string]int
}

func (l *leases) onEvict(_ context.Context, keys [][]byte) ([][]byte, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var keep [][]byte
	for _, k := range keys {
		if l.leased[string(k)] || l.reading[string(k)] > 0 {
			keep = append(keep, k)
		}
	}
	return keep, nil
}

// The case that stopped admission: at capacity, under steady reads, one key
// of every recent bucket is leased (more buckets than the tier holds, so
// eviction meets them). Every offload still persists, the capacity is never
// exceeded, and the leased keys load throughout (concurrent readers, each
// holding a lease while it reads, never miss one) and after a reopen.
func TestLeasedKeysNeverStopAdmission(t *testing.T) {
	capacity := 10 * bucketBytes
	guard := &capacityGuard{Backend: mem.New(), t: t, limit: capacity}
	l := &leases{leased: map[string]bool{}, reading: map[string]int{}}
	dir := t.TempDir()
	opts := Options{Backend: guard, Capacity: capacity, BucketKeysLimit: 4, Eviction: "fifo", OnEvict: l.onEvict}
	e := openEngine(t, dir, opts)
	const window = 12 // leases end: only the last buckets' keys are leased
	var window_ []Task
	readable := 0 // window_[:readable] are on SSD (the last one may not be yet)
	stop := make(chan struct{})
	var readers sync.WaitGroup
	reads := 0
	for r := range 4 {
		readers.Go(func() {
			for n := 0; ; n++ {
				select {
				case <-stop:
					return
				default:
				}
				l.mu.Lock()
				if readable == 0 {
					l.mu.Unlock()
					continue
				}
				tk := window_[(n*5+r)%readable]
				l.reading[string(tk.Key)]++
				l.mu.Unlock()
				res := e.Load(bg, [][]byte{tk.Key})[0]
				l.mu.Lock()
				l.reading[string(tk.Key)]--
				reads++
				l.mu.Unlock()
				if res.Err != nil || string(res.Value) != string(tk.Value) {
					t.Errorf("leased key %s: %v", tk.Key, res.Err)
					return
				}
			}
		})
	}
	for b := range 40 {
		tasks := makeTasks(fmt.Sprintf("b%02d", b), 4, objSize, uint64(b))
		// Lease one key of the bucket before it is written: it may be a
		// victim's kept key from the next offload on.
		l.mu.Lock()
		l.leased[string(tasks[b%4].Key)] = true
		window_ = append(window_, tasks[b%4])
		if len(window_) > window {
			delete(l.leased, string(window_[0].Key))
			window_ = window_[1:]
		}
		readable = len(window_) - 1
		l.mu.Unlock()
		requireStatus(t, e.Offload(bg, tasks, nil), Persisted)
		l.mu.Lock()
		readable = len(window_)
		l.mu.Unlock()
		require.LessOrEqual(t, e.Stats().BytesUsed, capacity)
	}
	close(stop)
	readers.Wait()
	s := e.Stats()
	require.Positive(t, s.Evictions)
	require.Positive(t, s.ReinsertedObjects)
	require.LessOrEqual(t, guard.peak, capacity)
	require.Positive(t, reads)
	requireLoads(t, e, window_)
	require.NoError(t, e.ix.Check())
	require.NoError(t, e.Close())
	opts.Backend = guard.Backend.(*mem.Backend).CrashClone()
	e2 := openEngine(t, dir, opts)
	requireLoads(t, e2, window_)
}

// reinsertCrash runs an eviction that keeps one key of the victim, on a mem
// backend and pebble's crashable filesystem, and takes a crash image at the
// point chosen: after the re-insertion bucket is written (before its
// commit), or after the commit (before the victim's file is deleted).
func reinsertCrash(t *testing.T, afterCommit bool) (img *crashImage, victim [][]Task) {
	fs := vfs.NewCrashableMem()
	mb := mem.New()
	l := &leases{leased: map[string]bool{"b00-0001": true}, reading: map[string]int{}}
	asked := false // OnEvict ran: the next commit is the re-insertion's
	onEvict := func(ctx context.Context, keys [][]byte) ([][]byte, error) {
		asked = true
		return l.onEvict(ctx, keys)
	}
	e, err := Open("/tier", Options{Backend: mb, IndexFS: fs, Capacity: 10 * bucketBytes, BucketKeysLimit: 4,
		Eviction: "fifo", OnEvict: onEvict})
	require.NoError(t, err)
	defer e.Close()
	snap := func() {
		if img == nil {
			img = &crashImage{fs: fs.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: 0}), be: mb.CrashClone()}
		}
	}
	if afterCommit {
		e.testHookReinserted = func(uint64) { snap() }
	} else {
		e.testHookCommit = func(uint64) error {
			if asked {
				snap()
			}
			return nil
		}
	}
	victim = fillBuckets(t, e, 0, 9)
	require.Nil(t, img)
	fillBuckets(t, e, 9, 1)
	require.NotNil(t, img)
	return img, victim
}

// A crash in the middle of a re-insertion leaves index and files consistent
// after Open: before the commit, the owner had answered, so Open completes
// the eviction (the victim goes whole, the kept key with it: the evicting
// record does not say which keys were kept) and both files are orphans;
// after it, the kept key is in the new bucket, the others are gone, and
// the victim's file is an orphan.
func TestReinsertionCrashSafe(t *testing.T) {
	for _, afterCommit := range []bool{false, true} {
		t.Run(fmt.Sprintf("afterCommit=%v", afterCommit), func(t *testing.T) {
			img, buckets := reinsertCrash(t, afterCommit)
			e, err := Open("/tier", Options{Backend: img.be, IndexFS: img.fs})
			require.NoError(t, err)
			defer e.Close()
			orphans := 2 // the re-insertion's file and the victim's
			if afterCommit {
				orphans = 1
			}
			require.EqualValues(t, orphans, e.Stats().OrphanFilesRemoved)
			for i, r := range e.Load(bg, keysOf(buckets[0])) {
				if i == 1 && afterCommit {
					require.NoError(t, r.Err, "key %d", i)
					require.Equal(t, buckets[0][i].Value, r.Value)
				} else {
					require.ErrorIs(t, r.Err, ErrNotFound, "key %d", i)
				}
			}
			for _, tasks := range buckets[1:] {
				requireLoads(t, e, tasks)
			}
			files, err := img.be.List()
			require.NoError(t, err)
			require.EqualValues(t, len(files), e.Stats().Buckets)
			require.NoError(t, e.ix.Check())
		})
	}
}

// Re-insertion is bounded: an owner keeping more than half of a victim gets
// that victim passed over (its other keys are evicted, the kept ones stay
// where they are), and the next victims go instead.
func TestReinsertionBounds(t *testing.T) {
	capacity := 10 * bucketBytes
	l := &leases{leased: map[string]bool{"b00-0000": true, "b00-0001": true, "b00-0002": true}, reading: map[string]int{}}
	e := openEngine(t, t.TempDir(), Options{Backend: mem.New(), Capacity: capacity, BucketKeysLimit: 4,
		Eviction: "fifo", OnEvict: l.onEvict})
	buckets := fillBuckets(t, e, 0, 10)
	for i, r := range e.Load(bg, keysOf(buckets[0])) {
		if i < 3 {
			require.NoError(t, r.Err, "kept key %d stays", i)
		} else {
			require.ErrorIs(t, r.Err, ErrNotFound, "the evicted key of the passed-over victim")
		}
	}
	for b, tasks := range buckets[1:] {
		require.Equal(t, b >= 2, loaded(e, tasks), "bucket %d", b+1)
	}
	require.Zero(t, e.Stats().ReinsertedObjects)
	require.NoError(t, e.ix.Check())
}
