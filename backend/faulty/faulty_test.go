package faulty_test

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"

	"github.com/tierstore/tierstore/backend"
	"github.com/tierstore/tierstore/backend/backendtest"
	"github.com/tierstore/tierstore/backend/faulty"
	"github.com/tierstore/tierstore/backend/mem"
	"github.com/tierstore/tierstore/backend/pwrite"
)

var bg = context.Background()

func TestConformanceNoRulesMem(t *testing.T) {
	backendtest.Run(t, func(t *testing.T, _ string) backend.Backend { return faulty.Wrap(mem.New()) })
}

func TestConformanceNoRulesPwrite(t *testing.T) {
	backendtest.Run(t, func(t *testing.T, dir string) backend.Backend { return faulty.Wrap(openPwrite(t, dir)) })
}

func openPwrite(t *testing.T, dir string) *pwrite.Backend {
	t.Helper()
	b, err := pwrite.Open(dir, pwrite.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func page(id uint64, blocks int) []byte { return backendtest.Pattern(id, blocks*backend.Alignment) }

func equalIDs(a []uint64, b ...uint64) bool { return slices.Equal(a, b) }

func TestFailNthWrite(t *testing.T) {
	m := mem.New()
	f := faulty.Wrap(m)
	if err := f.WriteBucket(bg, 1, [][]byte{page(1, 1)}); err != nil {
		t.Fatal(err)
	}
	f.FailNth(faulty.OpWrite, 2, syscall.EIO)
	if err := f.WriteBucket(bg, 2, [][]byte{page(2, 1)}); err != nil {
		t.Fatalf("1st write after FailNth(2): %v", err)
	}
	err := f.WriteBucket(bg, 3, [][]byte{page(3, 1)})
	if !errors.Is(err, backend.ErrInjected) || !errors.Is(err, syscall.EIO) {
		t.Fatalf("2nd write after FailNth(2) = %v, want ErrInjected wrapping EIO", err)
	}
	if err := f.WriteBucket(bg, 4, [][]byte{page(4, 1)}); err != nil {
		t.Fatalf("3rd write: %v (the rule fires once)", err)
	}
	if got := backendtest.IDs(t, m); !equalIDs(got, 1, 2, 4) {
		t.Fatalf("inner holds %v; the failed write must not reach it", got)
	}
	if f.Calls(faulty.OpWrite) != 4 || f.Calls(faulty.OpSync) != 3 {
		t.Fatalf("Calls(write)=%d Calls(sync)=%d, want 4 and 3", f.Calls(faulty.OpWrite), f.Calls(faulty.OpSync))
	}
}

func TestFailNthSentinelNotWrapped(t *testing.T) {
	f := faulty.Wrap(mem.New())
	f.FailNth(faulty.OpWrite, 1, backend.ErrNoSpace)
	err := f.WriteBucket(bg, 1, [][]byte{page(1, 1)})
	if !errors.Is(err, backend.ErrNoSpace) || errors.Is(err, backend.ErrInjected) {
		t.Fatalf("injected ErrNoSpace = %v, want ErrNoSpace and not ErrInjected", err)
	}
	f.FailNth(faulty.OpRead, 1, nil)
	if err := backend.ReadFile(bg, f, 1, []backend.ReadOp{{Len: 1}}); !errors.Is(err, backend.ErrInjected) {
		t.Fatalf("nil injected error = %v, want ErrInjected", err)
	}
}

func TestFailAllAndClear(t *testing.T) {
	f := faulty.Wrap(mem.New())
	want := page(1, 2)
	if err := f.WriteBucket(bg, 1, [][]byte{want}); err != nil {
		t.Fatal(err)
	}
	f.FailAll(faulty.OpRead, syscall.EIO)
	for range 3 {
		if err := backend.ReadFile(bg, f, 1, []backend.ReadOp{{Len: 10}}); !errors.Is(err, syscall.EIO) || !errors.Is(err, backend.ErrInjected) {
			t.Fatalf("Read under FailAll = %v", err)
		}
	}
	f.Clear()
	ops := []backend.ReadOp{{Off: 5, Len: 10}}
	if err := backend.ReadFile(bg, f, 1, ops); err != nil || !bytes.Equal(ops[0].Data, want[5:15]) {
		t.Fatalf("Read after Clear: %v", err)
	}
	if f.Calls(faulty.OpRead) != 4 {
		t.Fatalf("Calls(read) = %d, want 4", f.Calls(faulty.OpRead))
	}
}

func TestFailDeleteListAllocatedClose(t *testing.T) {
	m := mem.New()
	f := faulty.Wrap(m)
	if err := f.WriteBucket(bg, 1, [][]byte{page(1, 1)}); err != nil {
		t.Fatal(err)
	}
	f.FailNth(faulty.OpDelete, 1, nil)
	f.FailNth(faulty.OpList, 1, nil)
	f.FailNth(faulty.OpAllocated, 1, nil)
	f.FailNth(faulty.OpClose, 1, nil)
	if err := f.Delete(1); !errors.Is(err, backend.ErrInjected) {
		t.Fatalf("Delete = %v", err)
	}
	if got := backendtest.IDs(t, m); !equalIDs(got, 1) {
		t.Fatalf("failed Delete removed the file: %v", got)
	}
	if _, err := f.List(); !errors.Is(err, backend.ErrInjected) {
		t.Fatalf("List = %v", err)
	}
	if _, err := f.Allocated(); !errors.Is(err, backend.ErrInjected) {
		t.Fatalf("Allocated = %v", err)
	}
	if got := backendtest.IDs(t, f); !equalIDs(got, 1) {
		t.Fatalf("second List = %v", got)
	}
	if err := f.Delete(1); err != nil {
		t.Fatalf("second Delete: %v", err)
	}
	if err := f.Close(); !errors.Is(err, backend.ErrInjected) {
		t.Fatalf("Close = %v", err)
	}
	if _, err := m.List(); !errors.Is(err, backend.ErrClosed) {
		t.Fatalf("inner not closed by a failing Close: %v", err)
	}
}

func TestNoSpace(t *testing.T) {
	m := mem.New()
	f := faulty.Wrap(m)
	f.NoSpace()
	for id := range uint64(3) {
		if err := f.WriteBucket(bg, id, [][]byte{page(id, 1)}); !errors.Is(err, backend.ErrNoSpace) {
			t.Fatalf("WriteBucket under NoSpace = %v", err)
		}
	}
	if got := backendtest.IDs(t, m); len(got) != 0 {
		t.Fatalf("NoSpace wrote %v", got)
	}
}

func TestShortWriteMem(t *testing.T) {
	m := mem.New()
	f := faulty.Wrap(m)
	f.ShortWrite(1)
	want := page(1, 3) // 12288 bytes: half is 6144, not aligned
	err := f.WriteBucket(bg, 1, backendtest.Split(want, []int{1000}))
	if !errors.Is(err, backend.ErrInjected) {
		t.Fatalf("short write = %v, want ErrInjected", err)
	}
	list, err := m.List()
	if err != nil || len(list) != 1 || list[0].Size != int64(len(want)/2) {
		t.Fatalf("after a short write inner lists %v (%v), want bucket 1 of %d bytes", list, err, len(want)/2)
	}
	ops := []backend.ReadOp{{Off: 0, Len: len(want) / 2}}
	if err := backend.ReadFile(bg, m, 1, ops); err != nil || !bytes.Equal(ops[0].Data, want[:len(want)/2]) {
		t.Fatalf("torn file holds the wrong bytes: %v", err)
	}
	if got := backendtest.IDs(t, m.CrashClone()); len(got) != 0 {
		t.Fatalf("the torn file survives a crash: %v", got)
	}
	if err := f.WriteBucket(bg, 2, [][]byte{page(2, 1)}); err != nil {
		t.Fatalf("the next write: %v", err)
	}
}

func TestShortWritePwrite(t *testing.T) {
	dir := t.TempDir()
	p := openPwrite(t, dir)
	f := faulty.Wrap(p)
	defer f.Close()
	f.ShortWrite(2)
	if err := f.WriteBucket(bg, 1, [][]byte{page(1, 1)}); err != nil {
		t.Fatal(err)
	}
	want := page(2, 5)
	if err := f.WriteBucket(bg, 2, [][]byte{want}); !errors.Is(err, backend.ErrInjected) {
		t.Fatalf("short write = %v", err)
	}
	got, err := os.ReadFile(filepath.Join(dir, backend.FileName(2)))
	if err != nil || !bytes.Equal(got, want[:2*backend.Alignment]) {
		t.Fatalf("torn file on disk: %d bytes, %v; want the first 2 blocks of 5", len(got), err)
	}
}

func TestSyncFail(t *testing.T) {
	m := mem.New()
	var innerWrites []uint64
	m.SetWriteHook(func(id uint64) { innerWrites = append(innerWrites, id) })
	f := faulty.Wrap(m)
	var onWrite []uint64
	f.OnWrite(func(id uint64) { onWrite = append(onWrite, id) })
	f.SyncFail(2)
	for id := range uint64(3) {
		err := f.WriteBucket(bg, id, [][]byte{page(id, 1)})
		if (id == 1) != errors.Is(err, backend.ErrInjected) {
			t.Fatalf("write %d: %v (the 2nd must fail at sync)", id, err)
		}
	}
	if !equalIDs(innerWrites, 0, 1, 2) {
		t.Fatalf("inner writes %v: the failed-sync bucket must have been written", innerWrites)
	}
	if got := backendtest.IDs(t, m); !equalIDs(got, 0, 2) {
		t.Fatalf("inner holds %v; the failed-sync file must be removed", got)
	}
	if !equalIDs(onWrite, 0, 2) {
		t.Fatalf("OnWrite saw %v, want 0 and 2 only", onWrite)
	}
}

// TestHooksCrashPoints crashes (CrashClone of mem) before and after the
// durable point of a write.
func TestHooksCrashPoints(t *testing.T) {
	m := mem.New()
	f := faulty.Wrap(m)
	var before, after *mem.Backend
	f.BeforeWrite(func(uint64) { before = m.CrashClone() })
	f.OnWrite(func(uint64) { after = m.CrashClone() })
	if err := f.WriteBucket(bg, 7, [][]byte{page(7, 1)}); err != nil {
		t.Fatal(err)
	}
	if got := backendtest.IDs(t, before); len(got) != 0 {
		t.Fatalf("crash before the write: %v survive", got)
	}
	if got := backendtest.IDs(t, after); !equalIDs(got, 7) {
		t.Fatalf("crash after the durable point: %v survive, want 7", got)
	}
}

func TestCorrupt(t *testing.T) {
	f := faulty.Wrap(mem.New())
	want := page(1, 2)
	for id := range uint64(2) {
		if err := f.WriteBucket(bg, id, [][]byte{want}); err != nil {
			t.Fatal(err)
		}
	}
	f.Corrupt(1, 5000)
	ops := []backend.ReadOp{{Off: 4990, Len: 20}, {Off: 0, Len: 100}, {Off: 5000, Len: 1}}
	if err := backend.ReadFile(bg, f, 1, ops); err != nil {
		t.Fatal(err)
	}
	if d := ops[0].Data; d[10] != want[5000]^0xff || !bytes.Equal(d[:10], want[4990:5000]) || !bytes.Equal(d[11:], want[5001:5010]) {
		t.Fatal("op covering the corrupt offset: wrong corruption")
	}
	if !bytes.Equal(ops[1].Data, want[:100]) || ops[2].Data[0] != want[5000]^0xff {
		t.Fatal("ops: corruption misplaced")
	}
	ops = []backend.ReadOp{{Off: 0, Len: len(want)}}
	if err := backend.ReadFile(bg, f, 0, ops); err != nil || !bytes.Equal(ops[0].Data, want) {
		t.Fatalf("other bucket corrupted: %v", err)
	}
}

func TestPwriteInnerFailedWriteLeavesNoFile(t *testing.T) {
	dir := t.TempDir()
	f := faulty.Wrap(openPwrite(t, dir))
	defer f.Close()
	f.SyncFail(1)
	f.FailNth(faulty.OpWrite, 2, syscall.EIO)
	for id := range uint64(2) {
		if err := f.WriteBucket(bg, id, [][]byte{page(id, 1)}); !errors.Is(err, backend.ErrInjected) {
			t.Fatalf("write %d = %v", id, err)
		}
		if _, err := os.Stat(filepath.Join(dir, backend.FileName(id))); !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("file %d left: %v", id, err)
		}
	}
}
