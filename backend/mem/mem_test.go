package mem_test

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/tierstore/tierstore/backend"
	"github.com/tierstore/tierstore/backend/backendtest"
	"github.com/tierstore/tierstore/backend/mem"
)

var bg = context.Background()

func same(a []uint64, b ...uint64) bool { return slices.Equal(a, b) }

func block(id uint64) []byte { return backendtest.Pattern(id, backend.Alignment) }

// TestCrashDuringWrite crashes inside WriteBucket, after the bytes are in but
// before the durable point: the write fails with ErrCrashed and leaves
// nothing, in place and in the clone taken at that instant.
func TestCrashDuringWrite(t *testing.T) {
	m := mem.New()
	if err := m.WriteBucket(bg, 1, [][]byte{block(1)}); err != nil {
		t.Fatal(err)
	}
	var clone *mem.Backend
	var visible []uint64
	m.SetWriteHook(func(id uint64) {
		if id != 2 {
			return
		}
		visible = backendtest.IDs(t, m) // the in-progress file is visible, like on a real fs
		clone = m.CrashClone()
		m.Crash()
	})
	err := m.WriteBucket(bg, 2, [][]byte{block(2)})
	if !errors.Is(err, mem.ErrCrashed) {
		t.Fatalf("WriteBucket interrupted by Crash = %v, want ErrCrashed", err)
	}
	if !same(visible, 1, 2) {
		t.Fatalf("during the write List = %v, want 1 and 2", visible)
	}
	if got := backendtest.IDs(t, m); !same(got, 1) {
		t.Fatalf("after Crash the backend holds %v, want only the durable 1", got)
	}
	if got := backendtest.IDs(t, clone); !same(got, 1) {
		t.Fatalf("clone taken during the write holds %v, want only 1", got)
	}
	// Writes after the crash are durable again.
	m.SetWriteHook(nil)
	if err := m.WriteBucket(bg, 3, [][]byte{block(3)}); err != nil {
		t.Fatal(err)
	}
	if got := backendtest.IDs(t, m.CrashClone()); !same(got, 1, 3) {
		t.Fatalf("clone after a post-crash write = %v", got)
	}
}

func TestCrashKeepsDurableAndDeletes(t *testing.T) {
	m := mem.New()
	for id := range uint64(4) {
		if err := m.WriteBucket(bg, id, [][]byte{block(id)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := m.Delete(2); err != nil {
		t.Fatal(err)
	}
	if err := m.WriteVolatile(9, [][]byte{block(9)[:100]}); err != nil {
		t.Fatal(err)
	}
	if got := backendtest.IDs(t, m); !same(got, 0, 1, 3, 9) {
		t.Fatalf("before crash: %v", got)
	}
	c := m.CrashClone()
	if got := backendtest.IDs(t, c); !same(got, 0, 1, 3) {
		t.Fatalf("clone: %v, want 0 1 3 (volatile 9 lost, delete of 2 kept)", got)
	}
	// The clone is independent and holds the right bytes.
	ops := []backend.ReadOp{{Off: 0, Len: backend.Alignment}}
	if err := backend.ReadFile(bg, c, 3, ops); err != nil || !bytes.Equal(ops[0].Data, block(3)) {
		t.Fatalf("clone read: %v", err)
	}
	if err := c.Delete(0); err != nil {
		t.Fatal(err)
	}
	if got := backendtest.IDs(t, m); !same(got, 0, 1, 3, 9) {
		t.Fatalf("deleting in the clone changed the original: %v", got)
	}
	m.Crash()
	if got := backendtest.IDs(t, m); !same(got, 0, 1, 3) {
		t.Fatalf("after Crash: %v", got)
	}
}

func TestCloneAfterClose(t *testing.T) {
	m := mem.New()
	if err := m.WriteBucket(bg, 1, [][]byte{block(1)}); err != nil {
		t.Fatal(err)
	}
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	c := m.CrashClone()
	if got := backendtest.IDs(t, c); !same(got, 1) {
		t.Fatalf("clone of a closed backend: %v", got)
	}
}

func TestAllocatedRoundsUp(t *testing.T) {
	m := mem.New()
	if err := m.WriteVolatile(1, [][]byte{make([]byte, 100)}); err != nil {
		t.Fatal(err)
	}
	if err := m.WriteBucket(bg, 2, [][]byte{make([]byte, 2*backend.Alignment)}); err != nil {
		t.Fatal(err)
	}
	if a, err := m.Allocated(); err != nil || a != 3*backend.Alignment {
		t.Fatalf("Allocated = %d, %v; want %d", a, err, 3*backend.Alignment)
	}
}

func TestCanceledDuringWrite(t *testing.T) {
	m := mem.New()
	ctx, cancel := context.WithCancel(bg)
	m.SetWriteHook(func(uint64) { cancel() })
	if err := m.WriteBucket(ctx, 1, [][]byte{block(1)}); !errors.Is(err, context.Canceled) {
		t.Fatalf("WriteBucket canceled before its durable point = %v", err)
	}
	if got := backendtest.IDs(t, m); len(got) != 0 {
		t.Fatalf("canceled write left %v", got)
	}
}
