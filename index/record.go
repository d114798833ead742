package index

import (
	"encoding/binary"
	"fmt"

	"github.com/tierstore/tierstore/internal/keyspec"
)

// Record layout (documented in docs/format/index.md). Every pebble key starts
// with a one-byte prefix naming its kind; the object key follows the prefix
// verbatim (object records) or after a fixed-width bucket id (membership
// records), so arbitrary key bytes can never make two kinds collide.
const (
	prefixObject     = 'k' // 'k' key                 -> objectValue
	prefixMembership = 'b' // 'b' be64(bucket) key    -> membershipValue
	prefixBucket     = 'm' // 'm' be64(bucket)        -> bucketValue
	prefixNext       = 'n' // 'n'                     -> nextValue
	prefixFormat     = 'f' // 'f'                     -> formatValue
	prefixEvicting   = 'e' // 'e' be64(bucket)        -> evictingValue (since format 2)
	prefixSession    = 's' // 's'                     -> sessionValue (since format 3)

	// recordVersion is the first byte of every value but the bucket
	// record's.
	recordVersion = 1
	// bucketVersion is the first byte of a bucket record.
	bucketVersion = 3

	objectValueLen     = 1 + 8 + 8 + 4 + 4 + 1 + 4 // 30
	membershipValueLen = 1
	bucketValueLen     = 1 + 8 + 8 + 8 + 8 + 8 + 8 + 8 + 4 + 8 // 69
	nextValueLen       = 1 + 8
	formatValueLen     = 1 + 4
	evictingValueLen   = 1
	sessionValueLen    = 1 + 8 + 1

	kindObject     = "object"
	kindMembership = "membership"
	kindBucket     = "bucket"
	kindNext       = "next-bucket-id"
	kindFormat     = "format"
	kindEvicting   = "evicting"
	kindSession    = "session"
)

func checkKey(key []byte) error {
	if len(key) == 0 {
		return fmt.Errorf("%w: empty key", ErrInvalidKey)
	}
	if len(key) > keyspec.MaxLen {
		return fmt.Errorf("%w: key of %d bytes exceeds the limit of %d", ErrInvalidKey, len(key), keyspec.MaxLen)
	}
	return nil
}

func objectKey(key []byte) []byte {
	k := make([]byte, 1+len(key))
	k[0] = prefixObject
	copy(k[1:], key)
	return k
}

func membershipPrefix(id uint64) []byte {
	k := make([]byte, 9)
	k[0] = prefixMembership
	binary.BigEndian.PutUint64(k[1:], id)
	return k
}

func membershipKey(id uint64, key []byte) []byte {
	k := make([]byte, 9+len(key))
	k[0] = prefixMembership
	binary.BigEndian.PutUint64(k[1:], id)
	copy(k[9:], key)
	return k
}

func bucketKey(id uint64) []byte {
	k := make([]byte, 9)
	k[0] = prefixBucket
	binary.BigEndian.PutUint64(k[1:], id)
	return k
}

var nextKey = []byte{prefixNext}

var formatKey = []byte{prefixFormat}

// FormatVersion is the on-disk format of an SSD tier directory that this
// build reads and writes: the index records of docs/format/index.md and the
// bucket files they list (bucket.Version). It is recorded in the index
// (the format record) when the index is created, and any change of a record
// layout or of the bucket file format bumps it (docs/design.md, "Format and
// protocol versions"). Open refuses another version (ErrFormatVersion).
// Version 2 added the evicting record ('e'); version 3 the session record
// ('s') and the written bytes of the bucket record (record version 3).
const FormatVersion = 3

var sessionKey = []byte{prefixSession}

func encodeSession(s Session) []byte {
	v := make([]byte, sessionValueLen)
	v[0] = recordVersion
	binary.BigEndian.PutUint64(v[1:], s.ProvenBelow)
	if s.Clean {
		v[9] = 1
	}
	return v
}

func decodeSession(v []byte) (Session, error) {
	if err := checkValue(v, sessionValueLen); err != "" {
		return Session{}, &CorruptError{Kind: kindSession, Reason: err}
	}
	if v[9] > 1 {
		return Session{}, &CorruptError{Kind: kindSession, Reason: fmt.Sprintf("clean flag is %d, want 0 or 1", v[9])}
	}
	return Session{ProvenBelow: binary.BigEndian.Uint64(v[1:]), Clean: v[9] == 1}, nil
}

func encodeFormat(version uint32) []byte {
	v := make([]byte, formatValueLen)
	v[0] = recordVersion
	binary.BigEndian.PutUint32(v[1:], version)
	return v
}

func decodeFormat(v []byte) (uint32, error) {
	if err := checkValue(v, formatValueLen); err != "" {
		return 0, &CorruptError{Kind: kindFormat, Reason: err}
	}
	return binary.BigEndian.Uint32(v[1:]), nil
}

// prefixUpperBound returns the smallest key greater than every key that has
// prefix p (p must not be all 0xff bytes).
func prefixUpperBound(p []byte) []byte {
	u := append([]byte(nil), p...)
	for i := len(u) - 1; i >= 0; i-- {
		if u[i] != 0xff {
			u[i]++
			return u[:i+1]
		}
	}
	panic("index: prefixUpperBound of an all-0xff prefix")
}

func encodeObject(loc Location) []byte {
	v := make([]byte, objectValueLen)
	v[0] = recordVersion
	binary.BigEndian.PutUint64(v[1:], loc.Bucket)
	binary.BigEndian.PutUint64(v[9:], uint64(loc.Offset))
	binary.BigEndian.PutUint32(v[17:], loc.StoredLen)
	binary.BigEndian.PutUint32(v[21:], loc.ValueLen)
	v[25] = loc.Codec
	binary.BigEndian.PutUint32(v[26:], loc.CRC)
	return v
}

// keyReason says why a key read back from a record is not a valid object
// key ("" when it is): a record written by this package always holds one.
func keyReason(key []byte) string {
	if len(key) == 0 || len(key) > keyspec.MaxLen {
		return fmt.Sprintf("object key of %d bytes (want 1 to %d)", len(key), keyspec.MaxLen)
	}
	return ""
}

func decodeObject(key, v []byte) (Location, error) {
	if r := keyReason(key); r != "" {
		return Location{}, &CorruptError{Kind: kindObject, Key: clone(key), Reason: r}
	}
	if err := checkValue(v, objectValueLen); err != "" {
		return Location{}, &CorruptError{Kind: kindObject, Key: clone(key), Reason: err}
	}
	loc := Location{
		Bucket:    binary.BigEndian.Uint64(v[1:]),
		Offset:    int64(binary.BigEndian.Uint64(v[9:])),
		StoredLen: binary.BigEndian.Uint32(v[17:]),
		ValueLen:  binary.BigEndian.Uint32(v[21:]),
		Codec:     v[25],
		CRC:       binary.BigEndian.Uint32(v[26:]),
	}
	if loc.Offset < 0 {
		return Location{}, &CorruptError{Kind: kindObject, Key: clone(key), Reason: fmt.Sprintf("negative offset %d", loc.Offset)}
	}
	return loc, nil
}

func encodeBucket(m BucketMeta) []byte {
	v := make([]byte, bucketValueLen)
	v[0] = bucketVersion
	binary.BigEndian.PutUint64(v[1:], uint64(m.Size))
	binary.BigEndian.PutUint64(v[9:], uint64(m.Keys))
	binary.BigEndian.PutUint64(v[17:], uint64(m.Created))
	binary.BigEndian.PutUint64(v[25:], uint64(m.Live))
	binary.BigEndian.PutUint64(v[33:], uint64(m.LiveBytes))
	binary.BigEndian.PutUint64(v[41:], uint64(m.TrailerOff))
	binary.BigEndian.PutUint64(v[49:], uint64(m.TrailerLen))
	binary.BigEndian.PutUint32(v[57:], m.TrailerCRC)
	binary.BigEndian.PutUint64(v[61:], uint64(m.Written))
	return v
}

// decodeBucket decodes a bucket record.
func decodeBucket(id uint64, v []byte) (BucketMeta, error) {
	if len(v) > 0 && v[0] != bucketVersion {
		return BucketMeta{}, &CorruptError{Kind: kindBucket, Bucket: id, Reason: fmt.Sprintf("unknown record version %d (want %d)", v[0], bucketVersion)}
	}
	if err := checkLen(v, bucketValueLen); err != "" {
		return BucketMeta{}, &CorruptError{Kind: kindBucket, Bucket: id, Reason: err}
	}
	m, err := checkBucket(BucketMeta{
		ID:         id,
		Size:       int64(binary.BigEndian.Uint64(v[1:])),
		Keys:       int(binary.BigEndian.Uint64(v[9:])),
		Created:    int64(binary.BigEndian.Uint64(v[17:])),
		Live:       int(binary.BigEndian.Uint64(v[25:])),
		LiveBytes:  int64(binary.BigEndian.Uint64(v[33:])),
		TrailerOff: int64(binary.BigEndian.Uint64(v[41:])),
		TrailerLen: int64(binary.BigEndian.Uint64(v[49:])),
		TrailerCRC: binary.BigEndian.Uint32(v[57:]),
		Written:    int64(binary.BigEndian.Uint64(v[61:])),
	})
	if err == nil && (m.Live < 0 || m.LiveBytes < 0 || m.TrailerOff < 0 || m.TrailerLen < 0 || m.Written < 0) {
		return BucketMeta{}, &CorruptError{Kind: kindBucket, Bucket: id, Reason: fmt.Sprintf("negative live count %d, live bytes %d, written bytes %d or trailer %d+%d", m.Live, m.LiveBytes, m.Written, m.TrailerOff, m.TrailerLen)}
	}
	return m, err
}

func checkBucket(m BucketMeta) (BucketMeta, error) {
	if m.Size < 0 || m.Keys < 0 {
		return BucketMeta{}, &CorruptError{Kind: kindBucket, Bucket: m.ID, Reason: fmt.Sprintf("negative size %d or key count %d", m.Size, m.Keys)}
	}
	return m, nil
}

var membershipValue = []byte{recordVersion}

var evictingValue = []byte{recordVersion}

func evictingKey(id uint64) []byte {
	k := make([]byte, 9)
	k[0] = prefixEvicting
	binary.BigEndian.PutUint64(k[1:], id)
	return k
}

func decodeMembership(id uint64, key, v []byte) error {
	if r := keyReason(key); r != "" {
		return &CorruptError{Kind: kindMembership, Bucket: id, Key: clone(key), Reason: r}
	}
	if err := checkValue(v, membershipValueLen); err != "" {
		return &CorruptError{Kind: kindMembership, Bucket: id, Key: clone(key), Reason: err}
	}
	return nil
}

func encodeNext(n uint64) []byte {
	v := make([]byte, nextValueLen)
	v[0] = recordVersion
	binary.BigEndian.PutUint64(v[1:], n)
	return v
}

func decodeNext(v []byte) (uint64, error) {
	if err := checkValue(v, nextValueLen); err != "" {
		return 0, &CorruptError{Kind: kindNext, Reason: err}
	}
	return binary.BigEndian.Uint64(v[1:]), nil
}

// checkValue returns "" when v has the current version byte and length want,
// else the reason it is not.
func checkValue(v []byte, want int) string {
	if len(v) == 0 {
		return "empty value"
	}
	if v[0] != recordVersion {
		return fmt.Sprintf("unknown record version %d (want %d)", v[0], recordVersion)
	}
	return checkLen(v, want)
}

// checkLen returns "" when v is want bytes long, else the reason it is not.
func checkLen(v []byte, want int) string {
	if len(v) == 0 {
		return "empty value"
	}
	if len(v) != want {
		return fmt.Sprintf("value is %d bytes, want %d", len(v), want)
	}
	return ""
}

func clone(b []byte) []byte { return append([]byte(nil), b...) }
