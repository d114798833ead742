package index

import (
	"errors"
	"fmt"
)

// Errors returned by the index. Check them with errors.Is; they are wrapped
// with the operation and the key or bucket concerned.
var (
	// ErrInvalidOptions: Open was given an empty directory name or invalid
	// Options; the message names the field.
	ErrInvalidOptions = errors.New("index: invalid options")
	// ErrInvalidKey: a key is empty or longer than keyspec.MaxLen bytes.
	ErrInvalidKey = errors.New("index: invalid key")
	// ErrInvalidEntry: CommitBucket was given an entry that does not belong
	// to the bucket being committed (Loc.Bucket differs from meta.ID), a
	// negative offset or size, or the same key twice.
	ErrInvalidEntry = errors.New("index: invalid entry")
	// ErrBucketExists: CommitBucket was asked to commit a bucket id that is
	// already committed. A bucket id is committed once.
	ErrBucketExists = errors.New("index: bucket already committed")
	// ErrCorrupt: a stored record fails to decode. The concrete error is a
	// *CorruptError naming the record.
	ErrCorrupt = errors.New("index: corrupt record")
	// ErrClosed: the index was closed.
	ErrClosed = errors.New("index: closed")
	// ErrReadOnly: a write was attempted on an index opened with ReadOnly.
	ErrReadOnly = errors.New("index: read-only")
	// ErrFailed: a write to the underlying pebble database failed (the WAL
	// could not be written or synced). pebble cannot continue after such a
	// failure and its in-memory state may hold the failed batch, so every
	// later call returns ErrFailed; Close the index and Open it again. After
	// the reopen, the failed batch is either wholly present or wholly absent.
	ErrFailed = errors.New("index: storage failure, reopen the index")
	// ErrInconsistent: Check found records that break an invariant of the
	// index.
	ErrInconsistent = errors.New("index: inconsistent records")
	// ErrFormatVersion: Open found an index of another format version than
	// FormatVersion (the message names both); nothing was changed.
	ErrFormatVersion = errors.New("index: format version mismatch")
)

// CorruptError describes a record that failed to decode. It matches
// ErrCorrupt with errors.Is.
type CorruptError struct {
	// Kind is the record kind: "object", "membership", "bucket" or
	// "next-bucket-id".
	Kind string
	// Key is the object key (for object and membership records), nil
	// otherwise.
	Key []byte
	// Bucket is the bucket id (for membership and bucket records).
	Bucket uint64
	// Reason says what is wrong with the record.
	Reason string
}

func (e *CorruptError) Error() string {
	switch e.Kind {
	case kindObject:
		return fmt.Sprintf("index: corrupt %s record for key %q: %s", e.Kind, e.Key, e.Reason)
	case kindMembership:
		return fmt.Sprintf("index: corrupt %s record for bucket %d key %q: %s", e.Kind, e.Bucket, e.Key, e.Reason)
	case kindBucket:
		return fmt.Sprintf("index: corrupt %s record for bucket %d: %s", e.Kind, e.Bucket, e.Reason)
	default:
		return fmt.Sprintf("index: corrupt %s record: %s", e.Kind, e.Reason)
	}
}

// Unwrap makes errors.Is(err, ErrCorrupt) true.
func (e *CorruptError) Unwrap() error { return ErrCorrupt }
