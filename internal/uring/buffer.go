package uring

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// PageSize is the size of a memory page; Buffer memory is a whole number of
// pages and starts on a page boundary.
var PageSize = os.Getpagesize()

// Buffer is page-aligned memory outside the Go heap (an anonymous private
// mmap). The kernel may read or write it for as long as an operation is in
// flight without any cooperation from the garbage collector, and its address
// is aligned for O_DIRECT on every block device. A Buffer is not safe for
// concurrent use; Free it exactly once, and never while an operation using
// it is in flight.
type Buffer struct {
	mem []byte // the mapping; nil after Free
}

// NewBuffer maps size bytes, rounded up to a whole number of pages.
func NewBuffer(size int) (*Buffer, error) {
	if size <= 0 {
		return nil, fmt.Errorf("%w: size %d must be positive", ErrBadBuffer, size)
	}
	n := (size + PageSize - 1) / PageSize * PageSize
	mem, err := unix.Mmap(-1, 0, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		return nil, fmt.Errorf("uring: mmap buffer of %d bytes: %w", n, err)
	}
	return &Buffer{mem: mem}, nil
}

// Bytes returns the whole buffer. The slice is invalid after Free.
func (b *Buffer) Bytes() []byte { return b.mem }

// Len is the buffer size in bytes.
func (b *Buffer) Len() int { return len(b.mem) }

// Free unmaps the buffer.
func (b *Buffer) Free() error {
	if b.mem == nil {
		return fmt.Errorf("%w: already freed", ErrBadBuffer)
	}
	err := unix.Munmap(b.mem)
	b.mem = nil
	if err != nil {
		return fmt.Errorf("uring: munmap buffer: %w", err)
	}
	return nil
}
