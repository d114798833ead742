package pwrite_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/tierstore/tierstore/backend"
	"github.com/tierstore/tierstore/backend/backendtest"
	"github.com/tierstore/tierstore/backend/pwrite"
)

func open(t *testing.T, dir string, opts pwrite.Options) *pwrite.Backend {
	t.Helper()
	b, err := pwrite.Open(dir, opts)
	if err != nil {
		t.Fatalf("Open(%s): %v", dir, err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

func TestOpenRelativeDir(t *testing.T) {
	_, err := pwrite.Open("relative/buckets", pwrite.Options{})
	if !errors.Is(err, pwrite.ErrRelativeDir) || !strings.Contains(err.Error(), "relative/buckets") {
		t.Fatalf("Open of a relative path = %v, want ErrRelativeDir naming the path", err)
	}
}

func TestOpenCreatesDir(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "a", "b", "buckets")
	b := open(t, dir, pwrite.Options{})
	fi, err := os.Stat(dir)
	if err != nil || !fi.IsDir() || fi.Mode().Perm() != 0o755&^umask() {
		t.Fatalf("Open did not create %s as a 0755 directory: %v %v", dir, fi, err)
	}
	if b.Dir() != dir {
		t.Fatalf("Dir() = %q, want %q", b.Dir(), dir)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 0 {
		t.Fatalf("Open left files behind in %s: %v", dir, entries)
	}
}

func TestOpenRemovesStaleProbeFiles(t *testing.T) {
	dir := t.TempDir()
	stale := filepath.Join(dir, ".pwrite-probe-123456")
	other := filepath.Join(dir, "keep.txt")
	for _, p := range []string{stale, other} {
		if err := os.WriteFile(p, []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	open(t, dir, pwrite.Options{Direct: true})
	if _, err := os.Stat(stale); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("stale probe file survives Open: %v", err)
	}
	if _, err := os.Stat(other); err != nil {
		t.Fatalf("Open removed a foreign file: %v", err)
	}
}

func umask() os.FileMode {
	m := unix.Umask(0)
	unix.Umask(m)
	return os.FileMode(m)
}

func TestOpenNotADirectory(t *testing.T) {
	file := filepath.Join(t.TempDir(), "plain")
	if err := os.WriteFile(file, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{file, filepath.Join(file, "sub")} {
		_, err := pwrite.Open(dir, pwrite.Options{})
		if !errors.Is(err, pwrite.ErrNotDirectory) || !strings.Contains(err.Error(), dir) {
			t.Fatalf("Open(%s) = %v, want ErrNotDirectory naming the path", dir, err)
		}
	}
}

func TestOpenUnwritable(t *testing.T) {
	// /proc/sys/kernel is a directory in which nobody, not even root, can
	// create a file.
	const procDir = "/proc/sys/kernel"
	if fi, err := os.Stat(procDir); err == nil && fi.IsDir() {
		_, err := pwrite.Open(procDir, pwrite.Options{})
		if !errors.Is(err, pwrite.ErrNotWritable) || !strings.Contains(err.Error(), procDir) {
			t.Fatalf("Open(%s) = %v, want ErrNotWritable naming the path", procDir, err)
		}
		_, err = pwrite.Open(procDir+"/tierstore-buckets", pwrite.Options{})
		if !errors.Is(err, pwrite.ErrNotWritable) || !strings.Contains(err.Error(), procDir+"/tierstore-buckets") {
			t.Fatalf("Open of a directory that cannot be created = %v, want ErrNotWritable naming the path", err)
		}
	}
	// A read-only mount, when we may mount.
	dir := t.TempDir()
	if err := unix.Mount("tmpfs", dir, "tmpfs", unix.MS_RDONLY, "size=1m"); err != nil {
		t.Skipf("cannot mount a read-only tmpfs: %v", err)
	}
	defer unix.Unmount(dir, unix.MNT_DETACH)
	_, err := pwrite.Open(dir, pwrite.Options{})
	if !errors.Is(err, pwrite.ErrNotWritable) || !strings.Contains(err.Error(), dir) || !errors.Is(err, unix.EROFS) {
		t.Fatalf("Open on a read-only mount = %v, want ErrNotWritable (EROFS) naming %s", err, dir)
	}
}

// realDiskDir returns a fresh directory on a real disk (t.TempDir(), or one
// next to the package sources when that is on tmpfs).
func realDiskDir(t *testing.T) string {
	t.Helper()
	if dir := t.TempDir(); isRealDisk(t, dir) {
		return dir
	}
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp(wd, ".testdisk-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if !isRealDisk(t, dir) {
		t.Skipf("no real disk: %s is on tmpfs", dir)
	}
	return dir
}

func TestDirectOnRealDisk(t *testing.T) {
	dir := realDiskDir(t)
	b := open(t, dir, pwrite.Options{Direct: true})
	if !b.Direct() || b.Name() != "pwrite+direct" {
		t.Fatalf("Direct on %s: Direct()=%v Name()=%q, want O_DIRECT in use", dir, b.Direct(), b.Name())
	}
	if nb := open(t, t.TempDir(), pwrite.Options{}); nb.Direct() || nb.Name() != "pwrite" {
		t.Fatalf("buffered: Direct()=%v Name()=%q", nb.Direct(), nb.Name())
	}
}

// logCounter is a slog handler that counts records containing a substring.
type logCounter struct {
	sub string
	n   *atomic.Int64
}

func (h logCounter) Enabled(context.Context, slog.Level) bool { return true }
func (h logCounter) Handle(_ context.Context, r slog.Record) error {
	if strings.Contains(r.Message, h.sub) {
		h.n.Add(1)
	}
	return nil
}
func (h logCounter) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h logCounter) WithGroup(string) slog.Handler      { return h }

func TestDirectFallbackLogsOnce(t *testing.T) {
	dir := t.TempDir()
	mountOn(t, dir, "ramfs", "")
	var n atomic.Int64
	b := open(t, dir, pwrite.Options{Direct: true, Logger: slog.New(logCounter{sub: "O_DIRECT", n: &n})})
	if b.Direct() || b.Name() != "pwrite" {
		t.Fatalf("on ramfs: Direct()=%v Name()=%q, want the buffered fallback", b.Direct(), b.Name())
	}
	for id := range uint64(3) {
		want := backendtest.Pattern(id, 2*backend.Alignment)
		if err := b.WriteBucket(context.Background(), id, [][]byte{want}); err != nil {
			t.Fatal(err)
		}
		ops := []backend.ReadOp{{Off: 1, Len: 5000}}
		if err := backend.ReadFile(context.Background(), b, id, ops); err != nil || ops[0].Err != nil || !bytes.Equal(ops[0].Data, want[1:5001]) {
			t.Fatalf("read back: %v %v", err, ops[0].Err)
		}
	}
	if n.Load() != 1 {
		t.Fatalf("fallback logged %d times, want once", n.Load())
	}
}

// TestNoSpace fills a 1 MiB tmpfs: the write that does not fit fails with
// ErrNoSpace, leaves no file behind, and the earlier buckets stay readable.
func TestNoSpace(t *testing.T) {
	for _, direct := range []bool{false, true} {
		t.Run(map[bool]string{false: "buffered", true: "direct"}[direct], func(t *testing.T) {
			dir := t.TempDir()
			mountOn(t, dir, "tmpfs", "size=1m")
			b := open(t, dir, pwrite.Options{Direct: direct})
			var kept [][]byte
			for id := range uint64(3) {
				want := backendtest.Pattern(id, 256<<10)
				if err := b.WriteBucket(context.Background(), id, backendtest.Split(want, []int{100_000})); err != nil {
					t.Fatalf("WriteBucket(%d) on an empty 1 MiB tmpfs: %v", id, err)
				}
				kept = append(kept, want)
			}
			err := b.WriteBucket(context.Background(), 9, [][]byte{backendtest.Pattern(9, 512<<10)})
			if !errors.Is(err, backend.ErrNoSpace) || !errors.Is(err, unix.ENOSPC) {
				t.Fatalf("WriteBucket past the capacity = %v, want ErrNoSpace wrapping ENOSPC", err)
			}
			entries, err := os.ReadDir(dir)
			if err != nil {
				t.Fatal(err)
			}
			var names []string
			for _, e := range entries {
				names = append(names, e.Name())
			}
			if len(names) != 3 || names[0] != backend.FileName(0) || names[2] != backend.FileName(2) {
				t.Fatalf("directory after ENOSPC holds %v, want only the three earlier buckets", names)
			}
			for id, want := range kept {
				ops := []backend.ReadOp{{Off: 0, Len: len(want)}}
				if err := backend.ReadFile(context.Background(), b, uint64(id), ops); err != nil || ops[0].Err != nil || !bytes.Equal(ops[0].Data, want) {
					t.Fatalf("bucket %d after ENOSPC: %v %v", id, err, ops[0].Err)
				}
			}
			// The space is usable again once a bucket is deleted.
			if err := b.Delete(0); err != nil {
				t.Fatal(err)
			}
			if err := b.WriteBucket(context.Background(), 10, [][]byte{backendtest.Pattern(10, 256<<10)}); err != nil {
				t.Fatalf("WriteBucket after freeing space: %v", err)
			}
		})
	}
}

// countdownCtx is a context whose Err turns to Canceled after n calls: a
// deterministic "canceled in the middle of the write".
type countdownCtx struct {
	context.Context
	n atomic.Int64
}

func (c *countdownCtx) Err() error {
	if c.n.Add(-1) < 0 {
		return context.Canceled
	}
	return nil
}

func TestCancelMidWriteRemovesFile(t *testing.T) {
	for _, direct := range []bool{false, true} {
		dir := realDiskDir(t)
		b := open(t, dir, pwrite.Options{Direct: direct})
		data := backendtest.Split(backendtest.Pattern(1, 4<<20), []int{1000})
		ctx := &countdownCtx{Context: context.Background()}
		ctx.n.Store(3) // WriteBucket's entry check plus two chunks
		err := b.WriteBucket(ctx, 1, data)
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("direct=%v: WriteBucket with a context canceled mid-way = %v, want Canceled", direct, err)
		}
		if ctx.n.Load() >= 0 {
			t.Fatalf("direct=%v: context checked only %d times; the test did not cancel mid-way", direct, 3-ctx.n.Load())
		}
		if _, err := os.Stat(filepath.Join(dir, backend.FileName(1))); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("direct=%v: partial file left after cancel: %v", direct, err)
		}
	}
}

// TestReadUnalignedForeignFile reads a bucket-named file whose length is not
// a multiple of the alignment (not written by a backend): O_DIRECT must read
// its tail correctly.
func TestReadUnalignedForeignFile(t *testing.T) {
	for _, c := range []struct {
		direct bool
		size   int
	}{{false, 3*backend.Alignment + 100}, {true, 3*backend.Alignment + 100}, {true, 3<<20 + 100}} {
		direct := c.direct
		dir := realDiskDir(t)
		// The 3 MiB file is read in pieces (large O_DIRECT ops are split).
		want := backendtest.Pattern(5, c.size)
		if err := os.WriteFile(filepath.Join(dir, backend.FileName(5)), want, 0o644); err != nil {
			t.Fatal(err)
		}
		b := open(t, dir, pwrite.Options{Direct: direct})
		n := int64(len(want))
		ops := []backend.ReadOp{{Off: n - 50, Len: 50}, {Off: 0, Len: int(n)}, {Off: 4000, Len: int(n) - 4000}, {Off: n - 50, Len: 51}}
		if err := backend.ReadFile(context.Background(), b, 5, ops); err != nil {
			t.Fatal(err)
		}
		for _, op := range ops[:3] {
			if op.Err != nil || !bytes.Equal(op.Data, want[op.Off:op.Off+int64(op.Len)]) {
				t.Fatalf("direct=%v op [%d,+%d): %v", direct, op.Off, op.Len, op.Err)
			}
		}
		if !errors.Is(ops[3].Err, backend.ErrShortRead) {
			t.Fatalf("direct=%v read past the unaligned end: %v", direct, ops[3].Err)
		}
	}
}

// TestCloseDuringOps closes the backend while readers run: each read either
// completes with the right bytes or fails with ErrClosed.
func TestCloseDuringOps(t *testing.T) {
	b := open(t, t.TempDir(), pwrite.Options{})
	want := backendtest.Pattern(1, 64<<10)
	if err := b.WriteBucket(context.Background(), 1, [][]byte{want}); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var closedSeen atomic.Int64
	start := make(chan struct{})
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			for range 200 {
				ops := []backend.ReadOp{{Off: 0, Len: len(want)}}
				err := backend.ReadFile(context.Background(), b, 1, ops)
				if errors.Is(err, backend.ErrClosed) {
					closedSeen.Add(1)
					return
				}
				if err != nil || ops[0].Err != nil || !bytes.Equal(ops[0].Data, want) {
					t.Errorf("Read during Close: %v %v", err, ops[0].Err)
					return
				}
			}
		}()
	}
	close(start)
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if err := b.Delete(1); !errors.Is(err, backend.ErrClosed) {
		t.Fatalf("Delete after Close = %v", err)
	}
}

// TestDirectFallbackAtRuntime: O_DIRECT refused after Open (at the first
// WriteBucket, or at the first Read) falls back to buffered I/O, succeeds, and
// logs once.
func TestDirectFallbackAtRuntime(t *testing.T) {
	for _, first := range []string{"write", "read"} {
		t.Run(first, func(t *testing.T) {
			dir := t.TempDir()
			mountOn(t, dir, "ramfs", "")
			var n atomic.Int64
			b := open(t, dir, pwrite.Options{Logger: slog.New(logCounter{sub: "O_DIRECT", n: &n})})
			want := backendtest.Pattern(1, 3*backend.Alignment)
			if first == "read" {
				if err := b.WriteBucket(context.Background(), 1, [][]byte{want}); err != nil {
					t.Fatal(err)
				}
			}
			b.ForceDirect()
			if first == "write" {
				if err := b.WriteBucket(context.Background(), 1, [][]byte{want}); err != nil {
					t.Fatalf("WriteBucket with O_DIRECT refused: %v, want the buffered fallback", err)
				}
			}
			ops := []backend.ReadOp{{Off: 7, Len: 9000}}
			if err := backend.ReadFile(context.Background(), b, 1, ops); err != nil || ops[0].Err != nil || !bytes.Equal(ops[0].Data, want[7:9007]) {
				t.Fatalf("Read: %v %v", err, ops[0].Err)
			}
			if b.Direct() || n.Load() != 1 {
				t.Fatalf("after the fallback Direct()=%v, logged %d times; want false, once", b.Direct(), n.Load())
			}
		})
	}
}
