package index

import (
	"encoding/hex"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// The byte layouts documented in docs/format/index.md.
func TestRecordLayoutGolden(t *testing.T) {
	loc := Location{Bucket: 0x0102030405060708, Offset: 0x1000, StoredLen: 0xaabb, ValueLen: 0xccdd, Codec: 1, CRC: 0xdeadbeef}
	require.Equal(t,
		"01"+"0102030405060708"+"0000000000001000"+"0000aabb"+"0000ccdd"+"01"+"deadbeef",
		hex.EncodeToString(encodeObject(loc)))
	meta := BucketMeta{ID: 9, Size: 0x10000, Keys: 500, Created: 0x1122334455667788,
		Live: 3, LiveBytes: 0x3000, TrailerOff: 0xf000, TrailerLen: 0x77, TrailerCRC: 0xcafebabe, Written: 0x5000}
	require.Equal(t,
		"03"+"0000000000010000"+"00000000000001f4"+"1122334455667788"+"0000000000000003"+"0000000000003000"+
			"000000000000f000"+"0000000000000077"+"cafebabe"+"0000000000005000",
		hex.EncodeToString(encodeBucket(meta)))
	// A bucket record of version 2 (format 2, no written bytes) is corrupt.
	v2, err := hex.DecodeString("02" + strings.Repeat("00", 60))
	require.NoError(t, err)
	_, err = decodeBucket(9, v2)
	require.ErrorIs(t, err, ErrCorrupt)
	require.Equal(t, "73", hex.EncodeToString(sessionKey))
	require.Equal(t, "01"+"0000000000000102"+"01", hex.EncodeToString(encodeSession(Session{ProvenBelow: 0x102, Clean: true})))
	for _, s := range []Session{{}, {ProvenBelow: 7}, {ProvenBelow: 9, Clean: true}} {
		got, err := decodeSession(encodeSession(s))
		require.NoError(t, err)
		require.Equal(t, s, got)
	}
	_, err = decodeSession([]byte{1, 0, 0, 0, 0, 0, 0, 0, 1, 2})
	require.ErrorIs(t, err, ErrCorrupt)
	// A bucket record of another version is corrupt, not guessed at.
	v1, err := hex.DecodeString("01" + "0000000000010000" + "00000000000001f4" + "1122334455667788")
	require.NoError(t, err)
	_, err = decodeBucket(9, v1)
	require.ErrorIs(t, err, ErrCorrupt)
	require.Equal(t, "01"+"000000000000002a", hex.EncodeToString(encodeNext(42)))
	require.Equal(t, "01", hex.EncodeToString(membershipValue))

	require.Equal(t, "6b"+"6162", hex.EncodeToString(objectKey([]byte("ab"))))
	require.Equal(t, "62"+"0000000000000102"+"6162", hex.EncodeToString(membershipKey(0x0102, []byte("ab"))))
	require.Equal(t, "6d"+"0000000000000102", hex.EncodeToString(bucketKey(0x0102)))
	require.Equal(t, "6e", hex.EncodeToString(nextKey))
	require.Equal(t, "66", hex.EncodeToString(formatKey))
	require.Equal(t, "01"+"00000001", hex.EncodeToString(encodeFormat(1)))

	got, err := decodeObject([]byte("ab"), encodeObject(loc))
	require.NoError(t, err)
	require.Equal(t, loc, got)
	gotMeta, err := decodeBucket(9, encodeBucket(meta))
	require.NoError(t, err)
	require.Equal(t, meta, gotMeta)
	n, err := decodeNext(encodeNext(42))
	require.NoError(t, err)
	require.Equal(t, uint64(42), n)
}

func TestPrefixUpperBound(t *testing.T) {
	require.Equal(t, []byte("l"), prefixUpperBound([]byte("k")))
	require.Equal(t, []byte{'b', 0, 2}, prefixUpperBound([]byte{'b', 0, 1, 0xff, 0xff}))
	require.Panics(t, func() { prefixUpperBound([]byte{0xff}) })
}

// The decoders never panic, and what they accept re-encodes to the same
// bytes.
func FuzzDecodeRecords(f *testing.F) {
	f.Add(encodeObject(Location{Bucket: 1, Offset: 4096, StoredLen: 10, ValueLen: 20, CRC: 7}))
	f.Add(encodeBucket(BucketMeta{ID: 1, Size: 4096, Keys: 3, Created: 5}))
	f.Add(encodeNext(3))
	f.Add([]byte{})
	f.Add([]byte{2, 0, 0})
	f.Fuzz(func(t *testing.T, v []byte) {
		if loc, err := decodeObject([]byte("k"), v); err == nil {
			require.Equal(t, v, encodeObject(loc))
		} else {
			require.ErrorIs(t, err, ErrCorrupt)
		}
		if m, err := decodeBucket(1, v); err == nil {
			require.Equal(t, v, encodeBucket(m))
		} else {
			require.ErrorIs(t, err, ErrCorrupt)
		}
		if n, err := decodeNext(v); err == nil {
			require.Equal(t, v, encodeNext(n))
		} else {
			require.ErrorIs(t, err, ErrCorrupt)
		}
		if err := decodeMembership(1, []byte("k"), v); err != nil {
			require.ErrorIs(t, err, ErrCorrupt)
		}
	})
}
