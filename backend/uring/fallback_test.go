package uring

import (
	"context"
	"log/slog"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/tierstore/tierstore/backend"
	"github.com/tierstore/tierstore/backend/backendtest"
)

// mountRamfs mounts ramfs (which refuses O_DIRECT with EINVAL) on dir until
// the end of the test, or skips without the privilege.
func mountRamfs(t *testing.T, dir string) {
	t.Helper()
	if err := unix.Mount("ramfs", dir, "ramfs", 0, ""); err != nil {
		t.Skipf("cannot mount ramfs on %s: %v", dir, err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(dir, unix.MNT_DETACH); err != nil {
			t.Errorf("unmount %s: %v", dir, err)
		}
	})
}

// TestConformanceDirectRefusedRamfs: on ramfs O_DIRECT is refused at open;
// the backend must run the whole suite in its buffered fallback.
func TestConformanceDirectRefusedRamfs(t *testing.T) {
	backendtest.Run(t, func(t *testing.T, dir string) backend.Backend {
		var fs unix.Statfs_t
		require.NoError(t, unix.Statfs(dir, &fs))
		if fs.Type != unix.RAMFS_MAGIC {
			mountRamfs(t, dir)
		}
		b := openOrFail(t, dir, small(true))
		require.Equal(t, "uring", b.Name(), "on ramfs the backend must fall back to buffered I/O")
		return b
	})
}

// TestFallbackAtFirstWrite: a file system that opens O_DIRECT files but
// refuses the first write with EINVAL (simulated) makes the backend rewrite
// the bucket with buffered I/O, switch for good and log it once.
func TestFallbackAtFirstWrite(t *testing.T) {
	t.Cleanup(func() { testHookWrite = nil })
	calls, refused := 0, 0
	var b *Backend
	testHookWrite = func(off int64, res int32) int32 {
		calls++
		if off == 0 && b.Direct() { // refuse only O_DIRECT writes
			refused++
			return -int32(syscall.EINVAL)
		}
		return res
	}
	var logs syncBuffer
	opts := small(true)
	opts.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	b = openOrFail(t, t.TempDir(), opts).(*Backend)
	defer b.Close()
	require.True(t, b.Direct())
	ctx := context.Background()
	for id := uint64(1); id <= 3; id++ {
		want := backendtest.Pattern(id, 5*64<<10)
		require.NoError(t, b.WriteBucket(ctx, id, backendtest.Split(want, []int{1000, 70000})))
		require.False(t, b.Direct())
		require.Equal(t, "uring", b.Name())
		ops := []backend.ReadOp{{Off: 0, Len: len(want)}, {Off: 12345, Len: 100000}}
		require.NoError(t, backend.ReadFile(ctx, b, id, ops))
		for _, op := range ops {
			require.NoError(t, op.Err)
			require.Equal(t, want[op.Off:op.Off+int64(op.Len)], op.Data)
		}
	}
	require.Positive(t, calls)
	require.Equal(t, 1, refused)
	require.Equal(t, 1, strings.Count(logs.String(), "O_DIRECT is not supported"))
}

// TestShortTransfers: completions that report fewer bytes than asked (as the
// kernel may) are resubmitted for the rest, in both modes.
func TestShortTransfers(t *testing.T) {
	t.Cleanup(func() { testHookWrite, testHookRead = nil, nil })
	var writes, reads int
	short := func(n *int) func(off int64, res int32) int32 {
		return func(off int64, res int32) int32 {
			*n++
			if res > 2*backend.Alignment {
				return res / 2 &^ (backend.Alignment - 1)
			}
			return res
		}
	}
	testHookWrite, testHookRead = short(&writes), short(&reads)
	for _, direct := range []bool{true, false} {
		b := openOrFail(t, t.TempDir(), small(direct))
		ctx := context.Background()
		writes, reads = 0, 0
		want := backendtest.Pattern(9, 7*64<<10)
		require.NoError(t, b.WriteBucket(ctx, 9, backendtest.Split(want, []int{4096 * 3, 1, 99999})))
		ops := []backend.ReadOp{{Off: 0, Len: len(want)}, {Off: 3, Len: 200000}, {Off: 70000, Len: 1}}
		require.NoError(t, backend.ReadFile(ctx, b, 9, ops))
		for _, op := range ops {
			require.NoError(t, op.Err)
			require.Equal(t, want[op.Off:op.Off+int64(op.Len)], op.Data, "direct=%v [%d,+%d)", direct, op.Off, op.Len)
		}
		// 7 chunk writes and 8 read pieces (4+4+1 direct) without
		// resubmission; halving each result at least triples that.
		require.Greater(t, writes, 3*7, "direct=%v: short writes were not resubmitted", direct)
		require.Greater(t, reads, 3*8, "direct=%v: short reads were not resubmitted", direct)
		require.NoError(t, b.Close())
	}
}

// TestNoSpace: on a full device WriteBucket fails with ErrNoSpace (at
// fallocate with O_DIRECT, at a write without), removes the partial file,
// and the backend keeps working for buckets that fit.
func TestNoSpace(t *testing.T) {
	for _, direct := range []bool{true, false} {
		dir := t.TempDir()
		if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "size=1m"); err != nil {
			t.Skipf("cannot mount a small tmpfs: %v", err)
		}
		t.Cleanup(func() { unix.Unmount(dir, unix.MNT_DETACH) })
		b := openOrFail(t, dir, small(direct))
		ctx := context.Background()
		err := b.WriteBucket(ctx, 1, [][]byte{make([]byte, 2<<20)})
		require.ErrorIs(t, err, backend.ErrNoSpace, "direct=%v", direct)
		require.ErrorIs(t, err, syscall.ENOSPC)
		list, err := b.List()
		require.NoError(t, err)
		require.Empty(t, list, "partial bucket file left behind")
		want := backendtest.Pattern(2, 64<<10)
		require.NoError(t, b.WriteBucket(ctx, 2, [][]byte{want}))
		ops := []backend.ReadOp{{Off: 0, Len: len(want)}}
		require.NoError(t, backend.ReadFile(ctx, b, 2, ops))
		require.Equal(t, want, ops[0].Data)
		require.NoError(t, b.Close())
	}
}

// TestCancelMidWrite: a context canceled while chunk writes are in flight
// stops the bucket: the writes in flight are waited for (their slots are
// reused afterwards), the partial file is removed, the ring goes back to the
// pool, and the next bucket is written normally.
func TestCancelMidWrite(t *testing.T) {
	t.Cleanup(func() { testHookWrite = nil })
	b := openOrFail(t, t.TempDir(), small(true)).(*Backend)
	defer b.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	seen := 0
	testHookWrite = func(off int64, res int32) int32 {
		if seen++; seen == 2 {
			cancel()
		}
		return res
	}
	data := backendtest.Pattern(3, 40*b.opts.ChunkSize)
	err := b.WriteBucket(ctx, 3, [][]byte{data})
	require.ErrorIs(t, err, context.Canceled)
	require.Less(t, seen, 40, "the write went on after cancel")
	list, err := b.List()
	require.NoError(t, err)
	require.Empty(t, list)
	w := <-b.pool.idle
	require.True(t, w.idle(), "ring returned with work in flight or slots taken")
	b.pool.idle <- w
	testHookWrite = nil
	require.NoError(t, b.WriteBucket(context.Background(), 3, [][]byte{data}))
	ops := []backend.ReadOp{{Off: 0, Len: len(data)}}
	require.NoError(t, backend.ReadFile(context.Background(), b, 3, ops))
	require.Equal(t, data, ops[0].Data)
}
