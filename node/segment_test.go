package node

import (
	"bytes"
	"errors"
	"os"
	"testing"
	"unsafe"
)

func TestSegmentReadWriteBounds(t *testing.T) {
	const size = 3*4096 + 100
	s, err := NewSegment(size)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if s.Size() != size {
		t.Fatalf("Size = %d", s.Size())
	}
	if addr := uintptr(unsafe.Pointer(&s.mem[0])); addr%uintptr(os.Getpagesize()) != 0 {
		t.Fatalf("segment base %#x not page aligned", addr)
	}
	val := bytes.Repeat([]byte("kvcache!"), 1000)
	if err := s.WriteAt(val, 4000); err != nil {
		t.Fatal(err)
	}
	got, err := s.Read(4000, len(val))
	if err != nil || !bytes.Equal(got, val) {
		t.Fatalf("read back mismatch: %v", err)
	}
	// The last byte is addressable; one past it is not.
	if err := s.WriteAt([]byte{1}, size-1); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		off int64
		n   int
	}{{size, 1}, {size - 1, 2}, {-1, 1}, {0, size + 1}, {1 << 62, 1}} {
		if err := s.WriteAt(make([]byte, c.n), c.off); !errors.Is(err, ErrOutOfRange) {
			t.Errorf("WriteAt(%d, %d) = %v, want ErrOutOfRange", c.off, c.n, err)
		}
		if _, err := s.Read(c.off, c.n); !errors.Is(err, ErrOutOfRange) {
			t.Errorf("Read(%d, %d) = %v, want ErrOutOfRange", c.off, c.n, err)
		}
	}
	if _, err := s.Read(0, -1); !errors.Is(err, ErrOutOfRange) {
		t.Errorf("negative length: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.WriteAt([]byte{1}, 0); !errors.Is(err, ErrClosed) {
		t.Errorf("write after close: %v", err)
	}
	if _, err := s.Read(0, 1); !errors.Is(err, ErrClosed) {
		t.Errorf("read after close: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Errorf("second close: %v", err)
	}
}

func TestSegmentBadSize(t *testing.T) {
	for _, n := range []int64{0, -5} {
		if _, err := NewSegment(n); !errors.Is(err, ErrBadConfig) {
			t.Errorf("NewSegment(%d) = %v", n, err)
		}
	}
}
