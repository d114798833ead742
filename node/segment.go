package node

import (
	"fmt"
	"os"
	"sync"

	"golang.org/x/sys/unix"
)

// Segment is a node's DRAM segment: an off-heap, page-aligned anonymous
// memory mapping of a fixed size. The master allocates object ranges inside
// it; peers write and read those ranges through the node's peer service.
//
// Reads and writes are bounds-checked against the segment. The segment does
// not arbitrate between writers and readers of one range: the master hands a
// range to one writer (PutStart .. PutEnd) and lets readers at it only once it
// is complete, and every reader verifies the object's CRC32C.
type Segment struct {
	// mu protects mem against Close: readers and writers hold it shared for
	// the duration of a copy, Close holds it exclusively to unmap.
	mu   sync.RWMutex
	mem  []byte // the usable size bytes of full; nil after Close
	full []byte // the whole mapping as returned by mmap
	size int64
}

// NewSegment maps size bytes of anonymous memory (rounded up to the page
// size). The pages are committed lazily by the kernel on first touch.
func NewSegment(size int64) (*Segment, error) {
	if size <= 0 {
		return nil, fmt.Errorf("%w: segment size %d must be positive", ErrBadConfig, size)
	}
	page := int64(os.Getpagesize())
	mapped := (size + page - 1) / page * page
	if mapped != int64(int(mapped)) {
		return nil, fmt.Errorf("%w: segment size %d too large", ErrBadConfig, size)
	}
	mem, err := unix.Mmap(-1, 0, int(mapped), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_NORESERVE)
	if err != nil {
		return nil, fmt.Errorf("node: mmap %d bytes for the segment: %w", mapped, err)
	}
	return &Segment{mem: mem[:size:size], full: mem, size: size}, nil
}

// Size is the usable length of the segment in bytes.
func (s *Segment) Size() int64 { return s.size }

func (s *Segment) check(off int64, n int) error {
	if off < 0 || n < 0 || off > s.size || int64(n) > s.size-off {
		return fmt.Errorf("%w: [%d, %d+%d) outside segment of %d bytes", ErrOutOfRange, off, off, n, s.size)
	}
	return nil
}

// WriteAt copies p into the segment at off.
func (s *Segment) WriteAt(p []byte, off int64) error {
	if err := s.check(off, len(p)); err != nil {
		return err
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.mem == nil {
		return ErrClosed
	}
	copy(s.mem[off:], p)
	return nil
}

// ReadAt copies len(p) bytes at off into p.
func (s *Segment) ReadAt(p []byte, off int64) error {
	if err := s.check(off, len(p)); err != nil {
		return err
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.mem == nil {
		return ErrClosed
	}
	copy(p, s.mem[off:off+int64(len(p))])
	return nil
}

// readCRC copies len(p) bytes at off into p and returns the CRC32C of
// what it copied (copyCRCUpdate: chunk by chunk, while in cache), holding the
// mapping without a closure (the in-process read's path; no allocation).
func (s *Segment) readCRC(p []byte, off int64) (uint32, error) {
	return s.readCRCUpdate(0, p, off)
}

// readCRCUpdate is readCRC continuing the CRC32C crc of earlier bytes.
func (s *Segment) readCRCUpdate(crc uint32, p []byte, off int64) (uint32, error) {
	if err := s.check(off, len(p)); err != nil {
		return 0, err
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.mem == nil {
		return 0, ErrClosed
	}
	return copyCRCUpdate(crc, p, s.mem[off:off+int64(len(p))]), nil
}

// Read returns a copy of n bytes at off.
func (s *Segment) Read(off int64, n int) ([]byte, error) {
	if err := s.check(off, n); err != nil {
		return nil, err
	}
	p := make([]byte, n)
	if err := s.ReadAt(p, off); err != nil {
		return nil, err
	}
	return p, nil
}

// Close unmaps the segment; later reads and writes return ErrClosed.
func (s *Segment) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.mem == nil {
		return nil
	}
	s.mem = nil
	full := s.full
	s.full = nil
	// Munmap needs the slice exactly as returned by Mmap.
	return unix.Munmap(full)
}

// pin holds the segment mapped (Close waits) until the returned release is
// called, and returns a view function giving direct, uncopied access to a
// range. The bytes may change under the caller (a range freed by a forced
// Remove can be reused by a new put at any time), so a view may only feed
// a consumer that checks the CRC32C afterwards (a data-plane range read,
// whose reader verifies it); the offload round copies instead.
func (s *Segment) pin() (view func(off int64, n int) ([]byte, error), release func()) {
	s.mu.RLock()
	view = func(off int64, n int) ([]byte, error) {
		if err := s.check(off, n); err != nil {
			return nil, err
		}
		if s.mem == nil {
			return nil, ErrClosed
		}
		return s.mem[off : off+int64(n) : off+int64(n)], nil
	}
	return view, s.mu.RUnlock
}
