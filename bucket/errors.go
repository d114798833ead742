package bucket

import (
	"errors"
	"fmt"
)

var (
	// ErrCorrupt: a bucket file (header, trailer or footer) is inconsistent.
	ErrCorrupt = errors.New("bucket: corrupt bucket file")
	// ErrChecksum: an object's stored bytes fail their CRC32C or do not
	// decompress to the recorded length.
	ErrChecksum = errors.New("bucket: object checksum mismatch")
	// ErrInvalidKey: an empty key or one longer than keyspec.MaxLen.
	ErrInvalidKey = errors.New("bucket: invalid key")
	// ErrTooLarge: an object that cannot fit in one bucket.
	ErrTooLarge = errors.New("bucket: object larger than the bucket size limit")
	// ErrBadLimits: grouping limits that are not positive.
	ErrBadLimits = errors.New("bucket: invalid limits")
	// ErrUnknownCodec: a codec name or number that is not none or lz4.
	ErrUnknownCodec = errors.New("bucket: unknown codec")
)

// CorruptionError says where a bucket file is inconsistent. It unwraps to
// ErrCorrupt or ErrChecksum.
type CorruptionError struct {
	What string // which structure or object, e.g. "footer", "entry 3"
	Off  int64  // file offset of the structure, -1 if unknown
	Err  error  // ErrCorrupt or ErrChecksum
}

func (e *CorruptionError) Error() string {
	if e.Off >= 0 {
		return fmt.Sprintf("%v: %s at offset %d", e.Err, e.What, e.Off)
	}
	return fmt.Sprintf("%v: %s", e.Err, e.What)
}

func (e *CorruptionError) Unwrap() error { return e.Err }

func corrupt(off int64, format string, args ...any) error {
	return &CorruptionError{What: fmt.Sprintf(format, args...), Off: off, Err: ErrCorrupt}
}
