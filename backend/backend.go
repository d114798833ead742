package backend

import (
	"context"
	"errors"
	"fmt"
	"unsafe"
)

// Alignment is the file offset and length granularity of bucket files. Every
// bucket file is a multiple of Alignment long, so that O_DIRECT reads and
// writes of whole blocks are always possible.
const Alignment = 4096

// Errors returned by backends. Check them with errors.Is: implementations wrap
// them with the operation and the bucket id.
var (
	// ErrNotFound: the bucket file does not exist.
	ErrNotFound = errors.New("backend: bucket file not found")
	// ErrExists: WriteBucket was asked to create a bucket file that exists.
	ErrExists = errors.New("backend: bucket file already exists")
	// ErrNoSpace: the device or quota is full (ENOSPC, EDQUOT).
	ErrNoSpace = errors.New("backend: no space left on device")
	// ErrClosed: the backend was closed.
	ErrClosed = errors.New("backend: closed")
	// ErrUnaligned: WriteBucket data whose total length is not a multiple of
	// Alignment.
	ErrUnaligned = errors.New("backend: bucket length not a multiple of the alignment")
	// ErrShortRead: a read range extends past the end of the file.
	ErrShortRead = errors.New("backend: read past end of bucket file")
	// ErrSourceChanged: a checked write (CheckedWriter) copied a piece whose
	// bytes do not have the CRC32C the caller gave; nothing was made
	// durable and the file was removed.
	ErrSourceChanged = errors.New("backend: source bytes changed under a checked write")
	// ErrUnchecked: a CheckedWriter that cannot copy the bytes into memory
	// of its own now (an O_DIRECT backend that fell back to buffered
	// writes) refused a checked write before writing anything.
	ErrUnchecked = errors.New("backend: checked write not available")
	// ErrInjected: a failure injected by a test (see package faulty).
	ErrInjected = errors.New("backend: injected fault")
	// ErrBadRange: a ReadOp with a negative offset or length (set in the
	// op's Err).
	ErrBadRange = errors.New("backend: invalid read range")
	// ErrBufferTooSmall: a ReadOp whose Buf is shorter than Len (set in the
	// op's Err; nothing was read or written).
	ErrBufferTooSmall = errors.New("backend: read buffer too small")
)

// ReadOp is one byte range of one bucket file to read. Off and Len need no
// alignment: a backend that uses O_DIRECT reads the aligned range that holds
// them. On return Data holds exactly Len bytes or Err is set.
//
// Buf, when not nil, is the caller's memory for the bytes: on success Data is
// Buf[:Len]. Buf must be at least Len bytes long (else Err wraps
// ErrBufferTooSmall and nothing is written). The backend writes only inside
// Buf[:len(Buf)], and may overwrite all of it: an O_DIRECT backend reads
// whole blocks straight into Buf when Off is a multiple of Alignment, Buf
// starts on an Alignment boundary and len(Buf) >= DirectLen(Len) (see
// AlignedBuffer); otherwise it reads through its own aligned memory and
// copies. When Buf is nil the backend allocates Data, which the caller owns.
// After Read returns (or ReadAsync's done runs) the backend no longer touches
// Buf.
type ReadOp struct {
	ID   uint64 // the bucket file
	Off  int64
	Len  int
	Buf  []byte
	Data []byte
	Err  error
}

// FileInfo describes one bucket file present in the backend.
type FileInfo struct {
	ID   uint64
	Size int64
}

// Backend stores bucket files, each named by a uint64 id and never by a key,
// in one directory. Implementations: pwrite (pwritev + fdatasync), uring
// (io_uring, O_DIRECT), mem (tests, crash simulation) and faulty (fault
// injection around another backend).
//
// A Backend is safe for concurrent use by many goroutines. Operations on
// different bucket ids never block each other for longer than an I/O; the
// caller guarantees that a bucket id is written once and is not deleted while
// it is being written.
type Backend interface {
	// WriteBucket creates bucket file id, which must not exist (ErrExists),
	// writes the concatenation of data to it from offset 0 and makes the
	// contents and the directory entry durable (fdatasync of the file and
	// fsync of the directory) before it returns nil. The total length must be
	// a multiple of Alignment (ErrUnaligned). The backend may issue the writes
	// concurrently (a queue-depth backend keeps several in flight) but there
	// is exactly one durable point, at the end. On error the partial file is
	// removed (best effort) and the error wraps ErrNoSpace when the device is
	// full. The slices in data are not retained after return.
	WriteBucket(ctx context.Context, id uint64, data [][]byte) error

	// Read performs every op, each against the bucket file it names; the
	// backend may issue them concurrently (an io_uring backend submits them
	// together, across files). Each op's failure goes to its Err:
	// ErrNotFound when its file does not exist, ErrShortRead past the end
	// of the file, ErrBadRange, ErrBufferTooSmall. Read returns an error
	// only for the call as a whole (ErrClosed, or ctx's error when ctx ends:
	// the ops not done by then fail with it too). It returns only once the
	// backend has stopped writing into every op's Buf, also when ctx ends.
	Read(ctx context.Context, ops []ReadOp) error

	// Delete removes bucket file id and makes the removal durable (fsync of
	// the directory). ErrNotFound when absent.
	Delete(id uint64) error

	// List returns every bucket file present, in ascending id order. Files in
	// the directory that are not bucket files are ignored.
	List() ([]FileInfo, error)

	// Allocated reports the bytes the bucket files occupy on the device
	// (st_blocks * 512 for real files).
	Allocated() (int64, error)

	// Name is a short name for logs and metrics ("pwrite", "pwrite+direct",
	// "uring", "mem").
	Name() string

	// Close releases the backend's resources. Calls after Close return
	// ErrClosed.
	Close() error
}

// PieceCRC names one piece of a bucket's data (an index into WriteBucket's
// data) and the CRC32C its bytes must have.
type PieceCRC struct {
	Piece int
	CRC   uint32
}

// CheckedWriter is a Backend that copies a bucket's bytes into memory of its
// own before writing them (O_DIRECT staging buffers), so that it can write
// pieces whose memory may change while it runs (views of memory another
// writer may reuse) without the caller copying them first.
type CheckedWriter interface {
	// WriteBucketChecked is WriteBucket, except that it computes the CRC32C
	// of every piece named in checks from the bytes it copied (the bytes it
	// writes), and fails with ErrSourceChanged, nothing durable and the
	// file removed, when one differs from its CRC. It fails with
	// ErrUnchecked, before writing anything, when it cannot copy now.
	WriteBucketChecked(ctx context.Context, id uint64, data [][]byte, checks []PieceCRC) error
}

// AsyncReader is a Backend that can start reads without waiting for them,
// so that one goroutine keeps many reads in flight.
type AsyncReader interface {
	// ReadAsync starts ops as Read does and returns at once. done runs
	// exactly once, on a goroutine other than the caller's, after every op
	// has its Data or Err; its argument is what Read would return. ops and
	// their buffers belong to the backend until done runs.
	ReadAsync(ctx context.Context, ops []ReadOp, done func(err error))
}

// StartRead is ReadAsync for any backend: b's own when it implements
// AsyncReader, else Read on a new goroutine.
func StartRead(ctx context.Context, b Backend, ops []ReadOp, done func(err error)) {
	if ar, ok := b.(AsyncReader); ok {
		ar.ReadAsync(ctx, ops, done)
		return
	}
	go func() { done(b.Read(ctx, ops)) }()
}

// ReadFile reads ops from bucket file id: it sets every op's ID and calls
// b.Read. When the file does not exist it also returns that op error
// (wrapping ErrNotFound), so that a caller reading one file can tell "no
// such file" from per-range failures as it could before reads spanned files.
func ReadFile(ctx context.Context, b Backend, id uint64, ops []ReadOp) error {
	for i := range ops {
		ops[i].ID = id
	}
	if err := b.Read(ctx, ops); err != nil {
		return err
	}
	for i := range ops {
		if errors.Is(ops[i].Err, ErrNotFound) {
			return ops[i].Err
		}
	}
	return nil
}

// DirectLen is the length a buffer needs for an O_DIRECT read of n bytes at
// an aligned offset to land in it without a copy: n rounded up to Alignment.
func DirectLen(n int) int { return (n + Alignment - 1) &^ (Alignment - 1) }

// AlignedBuffer returns n bytes of Go heap memory starting on an Alignment
// boundary, with len and cap DirectLen(n), so that a ReadOp of up to n bytes
// at an aligned offset reads straight into it. The collector never moves
// heap objects, so the kernel may read into it directly.
func AlignedBuffer(n int) []byte {
	n = max(DirectLen(n), Alignment)
	if b := make([]byte, n); uintptr(unsafe.Pointer(&b[0]))&(Alignment-1) == 0 {
		return b
	}
	raw := make([]byte, n+Alignment)
	skip := 0
	if r := int(uintptr(unsafe.Pointer(&raw[0])) & (Alignment - 1)); r != 0 {
		skip = Alignment - r
	}
	return raw[skip : skip+n : skip+n]
}

// Aligned reports whether b starts on an Alignment boundary.
func Aligned(b []byte) bool {
	return len(b) > 0 && uintptr(unsafe.Pointer(&b[0]))&(Alignment-1) == 0
}

// FileName is the name of bucket file id inside a backend's directory. Keys
// never become file names.
func FileName(id uint64) string { return fmt.Sprintf("%016x.bucket", id) }

// ParseFileName returns the bucket id of a file named by FileName.
func ParseFileName(name string) (uint64, bool) {
	var id uint64
	if len(name) != len("0000000000000000.bucket") {
		return 0, false
	}
	if _, err := fmt.Sscanf(name, "%016x.bucket", &id); err != nil {
		return 0, false
	}
	if FileName(id) != name {
		return 0, false
	}
	return id, true
}

// TotalLen is the summed length of data.
func TotalLen(data [][]byte) int64 {
	var n int64
	for _, b := range data {
		n += int64(len(b))
	}
	return n
}
