package backend

import (
	"context"
	"errors"
	"fmt"
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
	// ErrInjected: a failure injected by a test (see package faulty).
	ErrInjected = errors.New("backend: injected fault")
	// ErrBadRange: a ReadOp with a negative offset or length (set in the
	// op's Err).
	ErrBadRange = errors.New("backend: invalid read range")
)

// ReadOp is one byte range to read from a bucket file. Off and Len need no
// alignment: a backend that uses O_DIRECT reads the aligned range that holds
// them. On return Data holds exactly Len bytes (owned by the caller) or Err is
// set.
type ReadOp struct {
	Off  int64
	Len  int
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

	// Read performs every op against bucket file id; the backend may issue
	// them concurrently. It returns an error only when the file cannot be
	// read at all (ErrNotFound when it does not exist); each op's own failure
	// goes to its Err (ErrShortRead past the end of the file).
	Read(ctx context.Context, id uint64, ops []ReadOp) error

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
