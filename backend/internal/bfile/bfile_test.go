package bfile

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"strings"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/tierstore/tierstore/backend"
)

func TestAlignedAlloc(t *testing.T) {
	for _, n := range []int{1, 100, 4096, 5000, 32 << 10, 64 << 10, 68 << 10, 1 << 20, 1<<20 + 4096} {
		for range 20 {
			b := AlignedAlloc(n)
			require.Len(t, b, n)
			require.Equal(t, n, cap(b))
			require.Zero(t, uintptr(unsafe.Pointer(&b[0]))%backend.Alignment, "n=%d", n)
		}
	}
}

var errTestDirect = errors.New("test: O_DIRECT not supported")

// TestWriteBucket: a failing write leaves no file, an existing file is
// ErrExists and kept; an O_DIRECT refusal is retried buffered, and the
// switch is logged once.
func TestWriteBucket(t *testing.T) {
	var logs strings.Builder
	log := slog.New(slog.NewTextHandler(&logs, nil))
	d, err := Open(Config{Path: t.TempDir(), Direct: true, Pkg: "test", ErrDirect: errTestDirect, Log: log})
	require.NoError(t, err)
	defer d.Close(nil)
	ctx, data := context.Background(), [][]byte{make([]byte, backend.Alignment)}
	var calls []bool
	write := func(_ context.Context, fd int, _ [][]byte, direct bool) error {
		calls = append(calls, direct)
		if direct {
			return errTestDirect
		}
		_, err := unix.Pwrite(fd, []byte{42}, 0)
		return err
	}
	require.NoError(t, d.WriteBucket(ctx, 1, data, write))
	require.NoError(t, d.WriteBucket(ctx, 2, data, write))
	require.False(t, d.Direct())
	// On tmpfs the first O_DIRECT attempt fails at open, before write.
	require.Equal(t, []bool{false, false}, calls[len(calls)-2:])
	require.Equal(t, 1, strings.Count(logs.String(), "test: O_DIRECT is not supported"))
	got, err := os.ReadFile(d.File(1))
	require.NoError(t, err)
	require.Equal(t, []byte{42}, got)
	err = d.WriteBucket(ctx, 1, data, write)
	require.ErrorIs(t, err, backend.ErrExists)
	require.Contains(t, err.Error(), "test: write bucket 0000000000000001")
	require.FileExists(t, d.File(1))
	boom := errors.New("boom")
	require.ErrorIs(t, d.WriteBucket(ctx, 3, data, func(context.Context, int, [][]byte, bool) error { return boom }), boom)
	require.NoFileExists(t, d.File(3))
}

// openFDs counts the process's open file descriptors.
func openFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	require.NoError(t, err)
	return len(ents)
}

// The descriptor cache keeps at most OpenFiles files open between reads,
// and a deleted file's descriptor goes with its name: a rewritten id reads
// the new file.
func TestDescriptorCache(t *testing.T) {
	d, err := Open(Config{Path: t.TempDir(), Pkg: "test", ErrDirect: errTestDirect, Log: slog.Default(), OpenFiles: 2})
	require.NoError(t, err)
	defer d.Close(nil)
	ctx := context.Background()
	write := func(_ context.Context, fd int, data [][]byte, _ bool) error {
		_, err := unix.Pwrite(fd, data[0], 0)
		return err
	}
	block := func(b byte) [][]byte { return [][]byte{bytes.Repeat([]byte{b}, backend.Alignment)} }
	for id := uint64(1); id <= 5; id++ {
		require.NoError(t, d.WriteBucket(ctx, id, block(byte(id)), write))
	}
	before := openFDs(t)
	read := func(id uint64) byte {
		ops := []backend.ReadOp{{ID: id, Off: 0, Len: 1}}
		rs, err := d.StartRead(ctx, ops)
		require.NoError(t, err)
		defer rs.Finish(ctx) // also when an assertion fails: Close waits for it
		require.NotNil(t, rs.Files[0])
		buf := make([]byte, 1)
		_, err = unix.Pread(rs.Files[0].Fd, buf, 0)
		require.NoError(t, err)
		return buf[0]
	}
	for id := uint64(1); id <= 5; id++ {
		require.Equal(t, byte(id), read(id))
	}
	require.Equal(t, before+2, openFDs(t), "more files kept open than OpenFiles")
	require.NoError(t, d.Delete(5))
	require.NoError(t, d.WriteBucket(ctx, 5, block(55), write))
	require.Equal(t, byte(55), read(5), "a deleted file's descriptor was reused")
	ops := []backend.ReadOp{{ID: 4, Off: 0, Len: 1}}
	require.NoError(t, d.Delete(4))
	rs, err := d.StartRead(ctx, ops)
	require.NoError(t, err)
	defer rs.Finish(ctx)
	require.ErrorIs(t, ops[0].Err, backend.ErrNotFound)
}
