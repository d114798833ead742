package tier

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tierstore/tierstore/backend"
	"github.com/tierstore/tierstore/backend/mem"
	"github.com/tierstore/tierstore/backend/uring"
)

// testBackends are the backends the load tests run on: the in-memory one,
// and io_uring with O_DIRECT on a real directory (pwrite where io_uring is
// unavailable).
func testBackends(t *testing.T) map[string]func() backend.Backend {
	return map[string]func() backend.Backend{
		"mem": func() backend.Backend { return mem.New() },
		"uring": func() backend.Backend {
			b, err := uring.Open(filepath.Join(t.TempDir(), "buckets"), uring.Options{Direct: true})
			require.NoError(t, err)
			return b
		},
	}
}

// LoadInto puts values in the caller's buffers: aligned buffers from
// NewBuffer, plain ones, lz4 values; a buffer too small fails its key alone
// and is left untouched; nothing is written past any buffer.
func TestLoadInto(t *testing.T) {
	for name, open := range testBackends(t) {
		t.Run(name, func(t *testing.T) {
			e := openEngine(t, t.TempDir(), Options{Backend: open(), Compression: "lz4", BucketKeysLimit: 3})
			tasks := makeTasks("into", 7, 20000, 1)
			tasks = append(tasks, Task{Key: []byte("zeros"), Value: make([]byte, 30000)}) // stored lz4
			requireStatus(t, e.Offload(bg, tasks, nil), Persisted)
			const guard = 64
			bufs := make([][]byte, len(tasks))
			guards := make([][]byte, len(tasks)) // the bytes right after each buffer
			for i, tk := range tasks {
				n := len(tk.Value)
				var backing []byte
				switch i % 3 {
				case 0: // aligned, the whole blocks: read without a copy
					backing = NewBuffer(BufferSize(n) + guard)
					bufs[i], guards[i] = backing[:BufferSize(n)], backing[BufferSize(n):]
				case 1: // exactly the value's size, unaligned
					backing = make([]byte, 1+n+guard)
					bufs[i], guards[i] = backing[1:1+n], backing[1+n:]
				case 2: // too small by one byte
					backing = make([]byte, n-1+guard)
					bufs[i], guards[i] = backing[:n-1], backing[n-1:]
				}
				for j := range backing {
					backing[j] = 0xEE
				}
			}
			res := e.LoadInto(bg, keysOf(tasks), bufs)
			for i, r := range res {
				require.Equal(t, bytes.Repeat([]byte{0xEE}, len(guards[i])), guards[i], "key %d: written past its buffer", i)
				if i%3 == 2 {
					require.ErrorIs(t, r.Err, ErrBufferTooSmall, "key %d", i)
					require.ErrorContains(t, r.Err, string(tasks[i].Key))
					require.Nil(t, r.Value)
					require.Equal(t, bytes.Repeat([]byte{0xEE}, len(bufs[i])), bufs[i], "key %d: a too small buffer was written", i)
					continue
				}
				require.NoError(t, r.Err, "key %d", i)
				require.Equal(t, tasks[i].Value, r.Value)
				require.Same(t, &bufs[i][0], &r.Value[0], "key %d: the value is not in the caller's buffer", i)
			}
			// A buffer count that does not match the keys is refused.
			for _, r := range e.LoadInto(bg, keysOf(tasks), bufs[:2]) {
				require.ErrorIs(t, r.Err, ErrBufferTooSmall)
			}
		})
	}
}

// LoadAsync returns at once and calls done once per call; one goroutine
// starting many keeps them all in flight; results match LoadInto's.
func TestLoadAsync(t *testing.T) {
	for name, open := range testBackends(t) {
		t.Run(name, func(t *testing.T) {
			e := openEngine(t, t.TempDir(), Options{Backend: open(), BucketKeysLimit: 4})
			tasks := makeTasks("async", 32, 16384, 2)
			requireStatus(t, e.Offload(bg, tasks, nil), Persisted)
			type answer struct {
				i   int
				res []LoadResult
			}
			answers := make(chan answer, len(tasks)+1)
			bufs := make([][]byte, len(tasks))
			for i, tk := range tasks {
				bufs[i] = NewBuffer(len(tk.Value))
				e.LoadAsync(bg, [][]byte{tk.Key}, bufs[i:i+1], func(res []LoadResult) { answers <- answer{i, res} })
			}
			e.LoadAsync(bg, [][]byte{[]byte("missing"), nil}, nil, func(res []LoadResult) { answers <- answer{-1, res} })
			seen := map[int]bool{}
			for range len(tasks) + 1 {
				a := <-answers
				require.False(t, seen[a.i], "done called twice for call %d", a.i)
				seen[a.i] = true
				if a.i < 0 {
					require.ErrorIs(t, a.res[0].Err, ErrNotFound)
					require.ErrorIs(t, a.res[1].Err, ErrInvalidKey)
					continue
				}
				require.Len(t, a.res, 1)
				require.NoError(t, a.res[0].Err)
				require.Equal(t, tasks[a.i].Value, a.res[0].Value)
				require.Same(t, &bufs[a.i][0], &a.res[0].Value[0])
			}
			select {
			case a := <-answers:
				t.Fatalf("an extra done call: %+v", a)
			default:
			}
		})
	}
}

// Close waits for asynchronous loads to deliver their results; after Close
// LoadAsync answers ErrClosed through done.
func TestLoadAsyncAndClose(t *testing.T) {
	bb := newBlocking(t)
	e, err := Open(t.TempDir(), Options{Backend: bb})
	require.NoError(t, err)
	tasks := makeTasks("ac", 2, 5000, 3)
	requireStatus(t, e.Offload(bg, tasks, nil), Persisted)
	info, err := e.Stat(tasks[0].Key)
	require.NoError(t, err)
	release := bb.hold(info.Bucket)
	got := make(chan []LoadResult, 1)
	e.LoadAsync(bg, keysOf(tasks), nil, func(res []LoadResult) { got <- res })
	<-bb.entered
	closed := make(chan error, 1)
	go func() { closed <- e.Close() }()
	close(release)
	res := <-got
	require.NoError(t, <-closed)
	for i, r := range res {
		require.NoError(t, r.Err)
		require.Equal(t, tasks[i].Value, r.Value)
	}
	e.LoadAsync(bg, keysOf(tasks), nil, func(res []LoadResult) { got <- res })
	require.ErrorIs(t, (<-got)[0].Err, ErrClosed)
}

// cancelingBackend cancels the load's context once the reads are issued,
// as a caller giving up mid-read would.
type cancelingBackend struct {
	backend.Backend
	cancel context.CancelFunc
}

func (c *cancelingBackend) Read(ctx context.Context, ops []backend.ReadOp) error {
	c.cancel()
	return c.Backend.Read(ctx, ops)
}

// A Load whose context ends mid-read answers the context's error for the
// keys not read, writes nothing into the buffers after it returns, and
// leaves no bucket pinned: the buckets can be removed right after.
func TestLoadCanceledMidRead(t *testing.T) {
	for name, open := range testBackends(t) {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(bg)
			defer cancel()
			cb := &cancelingBackend{Backend: open(), cancel: cancel}
			e := openEngine(t, t.TempDir(), Options{Backend: cb, BucketKeysLimit: 2})
			tasks := makeTasks("cancel", 6, 40000, 4)
			requireStatus(t, e.Offload(bg, tasks, nil), Persisted)
			bufs := make([][]byte, len(tasks))
			for i := range bufs {
				bufs[i] = NewBuffer(len(tasks[i].Value))
			}
			res := e.LoadInto(ctx, keysOf(tasks), bufs)
			snapshot := make([][]byte, len(bufs))
			for i, r := range res {
				snapshot[i] = bytes.Clone(bufs[i])
				if r.Err == nil {
					require.Equal(t, tasks[i].Value, r.Value)
					continue
				}
				require.ErrorIs(t, r.Err, context.Canceled, "key %d", i)
				require.Nil(t, r.Value)
			}
			require.Error(t, res[len(res)-1].Err, "the read was not canceled")
			// Every bucket is unpinned: removing every key deletes every
			// file at once.
			for _, tk := range tasks {
				require.NoError(t, e.Remove(tk.Key))
			}
			require.Empty(t, fileIDs(t, e.Backend()))
			for i := range bufs {
				require.Equal(t, snapshot[i], bufs[i], "buffer %d written after LoadInto returned", i)
			}
		})
	}
}

// Many single-key LoadAsync calls from one goroutine and concurrent
// LoadInto calls share the backend and all come back right (run with -race,
// -count and GOMAXPROCS=1 for the concurrency).
func TestConcurrentLoadIntoAndAsync(t *testing.T) {
	for name, open := range testBackends(t) {
		t.Run(name, func(t *testing.T) {
			e := openEngine(t, t.TempDir(), Options{Backend: open(), BucketKeysLimit: 8})
			tasks := makeTasks("mix", 64, 8192, 5)
			requireStatus(t, e.Offload(bg, tasks, nil), Persisted)
			var wg sync.WaitGroup
			errs := make(chan error, 256)
			for r := range 4 {
				wg.Go(func() {
					buf := [][]byte{NewBuffer(8192)}
					for n := range 32 {
						tk := tasks[(n*7+r)%len(tasks)]
						res := e.LoadInto(bg, [][]byte{tk.Key}, buf)
						if res[0].Err != nil || !bytes.Equal(res[0].Value, tk.Value) {
							errs <- fmt.Errorf("LoadInto %s: %v", tk.Key, res[0].Err)
						}
					}
				})
			}
			var async sync.WaitGroup
			for i, tk := range tasks {
				async.Add(1)
				e.LoadAsync(bg, [][]byte{tk.Key}, nil, func(res []LoadResult) {
					defer async.Done()
					if res[0].Err != nil || !bytes.Equal(res[0].Value, tasks[i].Value) {
						errs <- fmt.Errorf("LoadAsync %s: %v", tk.Key, res[0].Err)
					}
				})
			}
			async.Wait()
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Error(err)
			}
		})
	}
}

// waitOrFail waits for ch, failing the test if it takes longer than a
// bound far above any healthy wait: the failure it detects is a hang.
func waitOrFail[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(20 * time.Second):
		t.Fatalf("%s did not complete: it waited for a blocked WAL sync", what)
	}
	panic("unreachable")
}

var errSentinel = errors.New("test sentinel")

// Small objects are packed several to a block (bucket format version 2);
// they load through every path: Load, LoadInto with aligned and plain
// buffers, LoadAsync, with O_DIRECT reads of the block that holds them.
func TestLoadPackedObjects(t *testing.T) {
	for name, open := range testBackends(t) {
		t.Run(name, func(t *testing.T) {
			e := openEngine(t, t.TempDir(), Options{Backend: open()})
			var tasks []Task
			for i, size := range []int{1, 100, 1024, 1024, 3000, 2048, 5000, 700, 4095} {
				tasks = append(tasks, makeTasks(fmt.Sprintf("p%d", i), 1, size, uint64(i))...)
			}
			requireStatus(t, e.Offload(bg, tasks, nil), Persisted)
			require.EqualValues(t, 9*4096, e.Stats().BytesUsed, "small objects share blocks (aligned, they would take 12)")
			requireLoads(t, e, tasks)
			bufs := make([][]byte, len(tasks))
			for i, tk := range tasks {
				if i%2 == 0 {
					bufs[i] = NewBuffer(len(tk.Value))
				} else {
					bufs[i] = make([]byte, len(tk.Value))
				}
			}
			for i, r := range e.LoadInto(bg, keysOf(tasks), bufs) {
				require.NoError(t, r.Err)
				require.Equal(t, tasks[i].Value, r.Value)
			}
			got := make(chan []LoadResult, 1)
			e.LoadAsync(bg, keysOf(tasks), nil, func(res []LoadResult) { got <- res })
			for i, r := range <-got {
				require.NoError(t, r.Err)
				require.Equal(t, tasks[i].Value, r.Value)
			}
		})
	}
}
