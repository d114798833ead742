package uring

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tierstore/tierstore/backend"
	"github.com/tierstore/tierstore/backend/backendtest"
	"github.com/tierstore/tierstore/backend/pwrite"
	"github.com/tierstore/tierstore/internal/crc32c"
	iuring "github.com/tierstore/tierstore/internal/uring"
)

// small keeps the rings and slots small for tests: 64 KiB chunks, so that
// buckets of a few hundred KiB already take many chunks and pieces.
func small(direct bool) Options {
	return Options{Direct: direct, QueueDepth: 32, WriteDepth: 4, ChunkSize: 64 << 10}
}

func openOrFail(t *testing.T, dir string, opts Options) backend.Backend {
	t.Helper()
	b, err := Open(dir, opts)
	require.NoError(t, err)
	if _, ok := b.(*Backend); !ok {
		t.Skipf("io_uring unavailable here: got backend %s", b.Name())
	}
	return b
}

func TestConformanceDirect(t *testing.T) {
	backendtest.Run(t, func(t *testing.T, dir string) backend.Backend {
		b := openOrFail(t, dir, small(true))
		require.Equal(t, "uring+direct", b.Name())
		return b
	})
}

// TestConformanceNoFixedBuffers covers plain WRITE from the slots, used when
// registering them fails (RLIMIT_MEMLOCK without CAP_IPC_LOCK).
func TestConformanceNoFixedBuffers(t *testing.T) {
	registerFixed = false
	t.Cleanup(func() { registerFixed = true })
	backendtest.Run(t, func(t *testing.T, dir string) backend.Backend {
		b := openOrFail(t, dir, small(true))
		w := <-b.(*Backend).pool.idle
		require.False(t, w.fixed)
		b.(*Backend).pool.idle <- w
		return b
	})
}

func TestConformanceDefaultOptions(t *testing.T) {
	backendtest.Run(t, func(t *testing.T, dir string) backend.Backend {
		return openOrFail(t, dir, DefaultOptions())
	})
}

func TestConformanceBuffered(t *testing.T) {
	backendtest.Run(t, func(t *testing.T, dir string) backend.Backend {
		b := openOrFail(t, dir, small(false))
		require.Equal(t, "uring", b.Name())
		return b
	})
}

// tmpfsDir returns a directory on a file system known to be tmpfs, or skips.
func tmpfsDir(t *testing.T) string {
	t.Helper()
	var st syscall.Statfs_t
	if err := syscall.Statfs("/dev/shm", &st); err != nil || st.Type != 0x01021994 {
		t.Skip("no tmpfs at /dev/shm")
	}
	d, err := os.MkdirTemp("/dev/shm", "uring-test-")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(d) })
	return d
}

// TestConformanceOnTmpfs runs the suite on tmpfs with Direct set: whether
// the kernel's tmpfs accepts O_DIRECT (Linux >= 6.6) or refuses it (the
// backend must then fall back to buffered I/O), every test must pass.
func TestConformanceOnTmpfs(t *testing.T) {
	shm := tmpfsDir(t)
	backendtest.Run(t, func(t *testing.T, dir string) backend.Backend {
		if fi, err := os.Lstat(dir); err != nil || fi.Mode()&os.ModeSymlink == 0 {
			d, err := os.MkdirTemp(shm, "b-")
			require.NoError(t, err)
			require.NoError(t, os.Remove(dir))
			require.NoError(t, os.Symlink(d, dir))
		}
		return openOrFail(t, dir, small(true))
	})
}

// syncBuffer is a goroutine-safe log sink.
type syncBuffer struct {
	mu sync.Mutex // protects b
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestFallbackToPwrite simulates io_uring_setup failing (as with
// kernel.io_uring_disabled=2, or seccomp): Open must return a working pwrite
// backend and say why.
func TestFallbackToPwrite(t *testing.T) {
	for _, errno := range []syscall.Errno{syscall.ENOSYS, syscall.EPERM, syscall.ENOMEM} {
		t.Run(errno.Error(), func(t *testing.T) {
			orig := newRing
			t.Cleanup(func() { newRing = orig })
			newRing = func(iuring.Config) (*iuring.Ring, error) {
				return nil, &iuring.SetupError{Errno: errno, Reason: "simulated"}
			}
			fallbackOnce = sync.Once{}
			var logs syncBuffer
			opts := small(true)
			opts.Logger = slog.New(slog.NewTextHandler(&logs, nil))
			b, err := Open(t.TempDir(), opts)
			require.NoError(t, err)
			defer b.Close()
			_, isPwrite := b.(*pwrite.Backend)
			require.True(t, isPwrite, "got %T", b)
			require.Equal(t, "pwrite+direct", b.Name())
			require.Contains(t, logs.String(), "io_uring unavailable")
			require.Contains(t, logs.String(), "simulated")
			want := backendtest.Pattern(1, 3*backend.Alignment)
			require.NoError(t, b.WriteBucket(context.Background(), 1, [][]byte{want}))
			ops := []backend.ReadOp{{Off: 5, Len: 9000}}
			require.NoError(t, backend.ReadFile(context.Background(), b, 1, ops))
			require.NoError(t, ops[0].Err)
			require.Equal(t, want[5:9005], ops[0].Data)
			// A second Open does not log again.
			b2, err := Open(t.TempDir(), opts)
			require.NoError(t, err)
			b2.Close()
			require.Equal(t, 1, strings.Count(logs.String(), "io_uring unavailable"))
		})
	}
	// Errors that do not mean "io_uring unavailable" are not hidden.
	orig := newRing
	t.Cleanup(func() { newRing = orig })
	newRing = func(iuring.Config) (*iuring.Ring, error) { return nil, syscall.EINVAL }
	_, err := Open(t.TempDir(), small(true))
	require.ErrorIs(t, err, syscall.EINVAL)
}

func TestOpenBadInput(t *testing.T) {
	for _, o := range []Options{
		{QueueDepth: -1}, {QueueDepth: MaxQueueDepth + 1}, {QueueDepth: 4, WriteDepth: 5},
		{ChunkSize: 1000}, {ChunkSize: MaxChunkSize + backend.Alignment}, {MaxRings: -1},
		{WriteDepth: 4, WriteDepthUnderReads: 5}, {WriteDepthUnderReads: -1},
	} {
		_, err := Open(t.TempDir(), o)
		require.ErrorIs(t, err, ErrBadOptions, "%+v", o)
	}
	_, err := Open("relative/dir", small(true))
	require.ErrorIs(t, err, pwrite.ErrRelativeDir)
	f := filepath.Join(t.TempDir(), "file")
	require.NoError(t, os.WriteFile(f, nil, 0o644))
	_, err = Open(f, small(true))
	require.ErrorIs(t, err, pwrite.ErrNotDirectory)
	// A missing directory is created.
	d := filepath.Join(t.TempDir(), "a", "b")
	b := openOrFail(t, d, small(true))
	require.NoError(t, b.Close())
	fi, err := os.Stat(d)
	require.NoError(t, err)
	require.True(t, fi.IsDir())
}

// TestReadQueueDepth checks that one Read of many objects keeps ReadDepth
// reads in flight on the read ring.
func TestReadQueueDepth(t *testing.T) {
	opts := small(true)
	opts.ReadDepth = 32
	b := openOrFail(t, t.TempDir(), opts).(*Backend)
	defer b.Close()
	const obj, n = 16 << 10, 128
	want := backendtest.Pattern(7, obj*n)
	require.NoError(t, b.WriteBucket(context.Background(), 7, [][]byte{want}))
	ops := make([]backend.ReadOp, n)
	for i := range ops {
		ops[i] = backend.ReadOp{Off: int64(i*obj + 100), Len: obj - 200}
	}
	require.NoError(t, backend.ReadFile(context.Background(), b, 7, ops))
	for _, op := range ops {
		require.NoError(t, op.Err)
		require.Equal(t, want[op.Off:op.Off+int64(op.Len)], op.Data)
	}
	// Read from the caller after its request completed: the loop wrote
	// these before it signalled completion.
	require.EqualValues(t, 32, b.rx.maxInFlight.Load())
	require.Zero(t, b.rx.inflight)
}

// TestIndependentReadsShareTheQueue: 32 callers with one object each keep 32
// reads in flight together (like fio at iodepth 32), through the one read
// ring. The loop is held while the requests arrive, so the figure does not
// depend on timing.
func TestIndependentReadsShareTheQueue(t *testing.T) {
	gate := make(chan struct{})
	var hold atomic.Bool
	testHookTake = func() {
		if hold.CompareAndSwap(true, false) {
			<-gate
		}
	}
	t.Cleanup(func() { testHookTake = nil })
	b := openOrFail(t, t.TempDir(), small(true)).(*Backend)
	defer b.Close()
	const obj, n = 16 << 10, 32
	want := backendtest.Pattern(8, obj*n)
	require.NoError(t, b.WriteBucket(context.Background(), 8, [][]byte{want}))
	hold.Store(true)
	done := make(chan error, n)
	ops := make([][]backend.ReadOp, n)
	for i := range ops {
		ops[i] = []backend.ReadOp{{ID: 8, Off: int64(i * obj), Len: obj, Buf: backend.AlignedBuffer(obj)}}
		b.ReadAsync(context.Background(), ops[i], func(err error) { done <- err })
	}
	close(gate)
	for range n {
		require.NoError(t, <-done)
	}
	for i, o := range ops {
		require.NoError(t, o[0].Err)
		require.Equal(t, want[i*obj:(i+1)*obj], o[0].Data)
	}
	require.EqualValues(t, n, b.rx.maxInFlight.Load())
}

// TestCancelMidRead: a context canceled while a Read's pieces are in flight
// stops it: the pieces in flight are waited for (Read returns only when the
// kernel is done with every buffer), the others are never submitted and fail
// with the context's error, and the read ring keeps working.
func TestCancelMidRead(t *testing.T) {
	t.Cleanup(func() { testHookRead = nil })
	opts := small(true)
	opts.ReadDepth = 2
	b := openOrFail(t, t.TempDir(), opts).(*Backend)
	defer b.Close()
	want := backendtest.Pattern(3, 40*b.opts.ChunkSize)
	require.NoError(t, b.WriteBucket(context.Background(), 3, [][]byte{want}))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	seen := 0
	testHookRead = func(off int64, res int32) int32 {
		if seen++; seen == 2 {
			cancel()
		}
		return res
	}
	ops := make([]backend.ReadOp, 40)
	for i := range ops {
		ops[i] = backend.ReadOp{ID: 3, Off: int64(i * b.opts.ChunkSize), Len: b.opts.ChunkSize, Buf: backend.AlignedBuffer(b.opts.ChunkSize)}
	}
	err := b.Read(ctx, ops)
	require.ErrorIs(t, err, context.Canceled)
	require.Less(t, seen, 10, "the read went on after cancel")
	require.Zero(t, b.rx.inflight, "Read returned with reads in flight")
	canceled := 0
	for i, op := range ops {
		if op.Err != nil {
			require.ErrorIs(t, op.Err, context.Canceled)
			require.Nil(t, op.Data)
			canceled++
			continue
		}
		require.Equal(t, want[i*b.opts.ChunkSize:(i+1)*b.opts.ChunkSize], op.Data)
	}
	require.Greater(t, canceled, 30)
	testHookRead = nil
	require.NoError(t, b.Read(context.Background(), ops))
	for i, op := range ops {
		require.Equal(t, want[i*b.opts.ChunkSize:(i+1)*b.opts.ChunkSize], op.Data)
	}
}

// TestReadsDoNotWaitForRings: calls holding write rings (long bucket
// writes, simulated by taking workers) never make a Read wait, even past
// MaxRings: reads have their own ring.
func TestReadsDoNotWaitForRings(t *testing.T) {
	for _, maxRings := range []int{0, 1} { // the default (64), and 1
		opts := small(true)
		opts.MaxRings = maxRings
		b := openOrFail(t, t.TempDir(), opts).(*Backend)
		want := backendtest.Pattern(1, 8*backend.Alignment)
		require.NoError(t, b.WriteBucket(context.Background(), 1, [][]byte{want}))
		ops := []backend.ReadOp{{Off: 10, Len: 5000}}
		hold := 8 // more than the idle list keeps
		if maxRings == 1 {
			hold = 1
		}
		var held []*worker
		hctx, hcancel := context.WithTimeout(context.Background(), 5*time.Second)
		for range hold {
			w, err := b.pool.get(hctx)
			require.NoError(t, err, "taking ring %d of %d", len(held)+1, hold)
			held = append(held, w)
		}
		hcancel()
		require.NoError(t, backend.ReadFile(context.Background(), b, 1, ops))
		require.NoError(t, ops[0].Err)
		require.Equal(t, want[10:5010], ops[0].Data)
		for _, w := range held {
			b.pool.put(w, false)
		}
		require.NoError(t, b.Close())
	}
}

// TestOneDurablePoint: a bucket of N chunks is N writes in flight at the
// write depth, then exactly one FSYNC (DATASYNC), issued after every write
// completed.
func TestOneDurablePoint(t *testing.T) {
	b := openOrFail(t, t.TempDir(), small(true)).(*Backend)
	defer b.Close()
	w := <-b.pool.idle // the only ring; observe it
	b.pool.idle <- w
	before := w.ring.Stats()
	const chunks = 10
	want := backendtest.Pattern(5, chunks*b.opts.ChunkSize)
	require.NoError(t, b.WriteBucket(context.Background(), 5, backendtest.Split(want, []int{5000, 100000})))
	after := w.ring.Stats()
	writes := after.ByOpcode[iuring.OpWriteFixed] + after.ByOpcode[iuring.OpWrite] - before.ByOpcode[iuring.OpWriteFixed] - before.ByOpcode[iuring.OpWrite]
	require.Equal(t, uint64(chunks), writes)
	require.Equal(t, uint64(1), after.ByOpcode[iuring.OpFsync]-before.ByOpcode[iuring.OpFsync])
	require.Equal(t, b.opts.WriteDepth, w.maxInFlight, "writes were not kept in flight at WriteDepth")
	got, err := os.ReadFile(filepath.Join(b.Dir(), backend.FileName(5)))
	require.NoError(t, err)
	require.Equal(t, want, got)
}

// TestWritesYieldToPendingReads: while a read waits on the read ring, a
// bucket write keeps at most WriteDepthUnderReads chunk writes in flight
// (so the read queues behind two chunks on the device, not WriteDepth);
// once no read is pending it runs at WriteDepth again. The read is held
// in the reactor by the take hook, so the figures do not depend on timing.
func TestWritesYieldToPendingReads(t *testing.T) {
	gate := make(chan struct{})
	var hold atomic.Bool
	testHookTake = func() {
		if hold.CompareAndSwap(true, false) {
			<-gate
		}
	}
	var mu sync.Mutex
	var depths [][2]int
	testHookWriteDepth = func(all, underReads int) {
		mu.Lock()
		depths = append(depths, [2]int{all, underReads})
		mu.Unlock()
	}
	t.Cleanup(func() { testHookTake, testHookWriteDepth = nil, nil })
	opts := small(true) // WriteDepth 4, 64 KiB chunks
	opts.WriteDepthUnderReads = 2
	b := openOrFail(t, t.TempDir(), opts).(*Backend)
	defer b.Close()
	ctx := context.Background()
	const chunks = 16
	data := backendtest.Pattern(9, chunks*opts.ChunkSize)
	require.NoError(t, b.WriteBucket(ctx, 1, [][]byte{data}))

	hold.Store(true)
	done := make(chan error, 1)
	op := []backend.ReadOp{{ID: 1, Off: 0, Len: 4096, Buf: backend.AlignedBuffer(4096)}}
	b.ReadAsync(ctx, op, func(err error) { done <- err })
	require.NoError(t, b.WriteBucket(ctx, 2, [][]byte{data}))
	close(gate)
	require.NoError(t, <-done)
	require.Equal(t, data[:4096], op[0].Data)
	require.NoError(t, b.WriteBucket(ctx, 3, [][]byte{data}))

	mu.Lock()
	defer mu.Unlock()
	require.Len(t, depths, 3)
	require.Equal(t, [2]int{4, 0}, depths[0], "no read pending: full WriteDepth, nothing under reads")
	require.Equal(t, [2]int{2, 2}, depths[1], "a read pending: WriteDepthUnderReads")
	require.Equal(t, [2]int{4, 0}, depths[2], "the read done: full depth again")
	require.Zero(t, b.rx.pending.Load())
}

// A checked write computes each named piece's CRC32C from the bytes it
// copied into its slots (pieces spanning several 64 KiB slots, a piece
// after an unchecked one): with every CRC right the file holds the data;
// with one piece's bytes changed after its CRC was taken it fails with
// backend.ErrSourceChanged and leaves no file. Without O_DIRECT it refuses
// with backend.ErrUnchecked before writing.
func TestWriteBucketChecked(t *testing.T) {
	b := openOrFail(t, t.TempDir(), small(true))
	defer b.Close()
	cw := b.(backend.CheckedWriter)
	ctx := context.Background()
	pieces := [][]byte{bytes.Repeat([]byte{1}, 4096), bytes.Repeat([]byte("ab"), 100<<10), bytes.Repeat([]byte{3}, 12288), bytes.Repeat([]byte("xyz"), 20<<10)}
	pieces[3] = pieces[3][:len(pieces[3])-int(backend.TotalLen(pieces)%backend.Alignment)]
	checks := []backend.PieceCRC{{Piece: 1, CRC: crc32c.Checksum(pieces[1])}, {Piece: 3, CRC: crc32c.Checksum(pieces[3])}}
	require.NoError(t, cw.WriteBucketChecked(ctx, 1, pieces, checks))
	got := make([]byte, backend.TotalLen(pieces))
	ops := []backend.ReadOp{{ID: 1, Off: 0, Len: len(got), Buf: got}}
	require.NoError(t, b.Read(ctx, ops))
	require.NoError(t, ops[0].Err)
	require.Equal(t, bytes.Join(pieces, nil), got)

	for _, bad := range []int{1, 3} {
		changed := slices.Clone(pieces)
		changed[bad] = bytes.Clone(pieces[bad])
		changed[bad][len(changed[bad])-1] ^= 0x20
		err := cw.WriteBucketChecked(ctx, uint64(1+bad), changed, checks)
		require.ErrorIs(t, err, backend.ErrSourceChanged, "piece %d", bad)
	}
	files, err := b.List()
	require.NoError(t, err)
	require.Len(t, files, 1, "a failed checked write left its file")

	buffered := openOrFail(t, t.TempDir(), small(false))
	defer buffered.Close()
	require.ErrorIs(t, buffered.(backend.CheckedWriter).WriteBucketChecked(ctx, 1, pieces, checks), backend.ErrUnchecked)
	files, err = buffered.List()
	require.NoError(t, err)
	require.Empty(t, files)
}
