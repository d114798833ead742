package bucket

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"

	"github.com/tierstore/tierstore/internal/crc32c"
	"github.com/tierstore/tierstore/internal/keyspec"
)

func concat(data [][]byte) []byte {
	var b bytes.Buffer
	for _, d := range data {
		b.Write(d)
	}
	return b.Bytes()
}

func randObjects(r *rand.Rand, n, maxSize int, compressible bool) []Object {
	objs := make([]Object, n)
	for i := range objs {
		v := make([]byte, r.IntN(maxSize+1))
		if compressible {
			for j := range v {
				v[j] = byte(j / 64 % 7)
			}
		} else {
			for j := range v {
				v[j] = byte(r.Uint32())
			}
		}
		objs[i] = Object{Key: []byte(fmt.Sprintf("key-%d-%d", i, r.Uint32())), Value: v}
	}
	return objs
}

func TestEncodeDecodeRoundTrip(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, tc := range []struct {
		name         string
		codec        Codec
		compressible bool
	}{
		{"none", CodecNone, false},
		{"lz4-incompressible", CodecLZ4, false},
		{"lz4-compressible", CodecLZ4, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			objs := randObjects(r, 37, 20000, tc.compressible)
			objs = append(objs, Object{Key: []byte("empty"), Value: nil})
			enc, err := Encode(objs, EncodeOptions{ID: 42, Created: 7, Compression: tc.codec})
			require.NoError(t, err)
			file := concat(enc.Data)
			require.EqualValues(t, enc.Size, len(file))
			require.Zero(t, len(file)%Align)
			f, err := Decode(file, true)
			require.NoError(t, err)
			require.EqualValues(t, 42, f.Header.ID)
			require.EqualValues(t, 7, f.Header.Created)
			require.Equal(t, enc.Entries, f.Entries)
			compressed := 0
			for i, e := range f.Entries {
				if e.StoredLen >= PackBelow {
					require.Zero(t, e.Offset%Align, "object data must be aligned for O_DIRECT")
				} else {
					require.Equal(t, e.Offset/Align, (e.Offset+int64(max(e.StoredLen, 1))-1)/Align, "a packed object stays inside one block")
				}
				require.Equal(t, objs[i].Key, e.Key)
				v, err := DecodeValue(e, file[e.Offset:e.Offset+int64(e.StoredLen)])
				require.NoError(t, err)
				require.True(t, bytes.Equal(objs[i].Value, v))
				if e.Codec == CodecLZ4 {
					compressed++
					require.LessOrEqual(t, int64(e.StoredLen)*10, int64(e.ValueLen)*9, "lz4 kept only when it saves 10%")
				}
			}
			if tc.compressible {
				require.Greater(t, compressed, 30)
			} else {
				require.Zero(t, compressed, "random data must not be stored compressed")
			}
		})
	}
}

func TestEncodeReferencesValues(t *testing.T) {
	v := bytes.Repeat([]byte{0xAB}, 3*Align)
	enc, err := Encode([]Object{{Key: []byte("k"), Value: v}}, EncodeOptions{})
	require.NoError(t, err)
	found := false
	for _, d := range enc.Data {
		if len(d) > 0 && &d[0] == &v[0] {
			found = true
		}
	}
	require.True(t, found, "Encode must reference the value, not copy it")
}

func TestEncodeRejectsBadKeys(t *testing.T) {
	_, err := Encode([]Object{{Key: nil, Value: []byte("x")}}, EncodeOptions{})
	require.ErrorIs(t, err, ErrInvalidKey)
	_, err = Encode([]Object{{Key: make([]byte, keyspec.MaxLen+1)}}, EncodeOptions{})
	require.ErrorIs(t, err, ErrInvalidKey)
	_, err = Encode([]Object{{Key: make([]byte, keyspec.MaxLen)}}, EncodeOptions{})
	require.NoError(t, err)
	_, err = Encode(nil, EncodeOptions{Compression: 9})
	require.ErrorIs(t, err, ErrUnknownCodec)
}

// Every single-byte flip is detected: structural bytes as ErrCorrupt, value
// bytes as ErrChecksum; padding bytes are the only ones allowed to change.
func TestEveryByteFlipDetected(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	objs := randObjects(r, 3, 5000, false)
	enc, err := Encode(objs, EncodeOptions{ID: 1})
	require.NoError(t, err)
	file := concat(enc.Data)
	meaningful := make([]bool, len(file))
	for i := 0; i < headerFieldsLen+4; i++ {
		meaningful[i] = true
	}
	for _, e := range enc.Entries {
		for i := e.Offset; i < e.Offset+int64(e.StoredLen); i++ {
			meaningful[i] = true
		}
	}
	f, err := Decode(file, true)
	require.NoError(t, err)
	for i := f.Footer.TrailerOff; i < f.Footer.TrailerOff+f.Footer.TrailerLen; i++ {
		meaningful[i] = true
	}
	for i := len(file) - FooterSize; i < len(file); i++ {
		meaningful[i] = true
	}
	for i := range file {
		file[i] ^= 0x5A
		_, err := Decode(file, true)
		file[i] ^= 0x5A
		if !meaningful[i] {
			continue
		}
		require.Error(t, err, "flip at %d undetected", i)
		var ce *CorruptionError
		require.True(t, errors.As(err, &ce), "flip at %d: %v", i, err)
		require.True(t, errors.Is(err, ErrCorrupt) || errors.Is(err, ErrChecksum))
	}
}

func TestDecodeValueDetectsCorruption(t *testing.T) {
	v := bytes.Repeat([]byte("abcdefgh"), 1000)
	enc, err := Encode([]Object{{Key: []byte("k"), Value: v}}, EncodeOptions{Compression: CodecLZ4})
	require.NoError(t, err)
	e := enc.Entries[0]
	require.Equal(t, CodecLZ4, e.Codec)
	file := concat(enc.Data)
	stored := bytes.Clone(file[e.Offset : e.Offset+int64(e.StoredLen)])
	stored[len(stored)/2] ^= 1
	_, err = DecodeValue(e, stored)
	require.ErrorIs(t, err, ErrChecksum)
	_, err = DecodeValue(e, stored[:len(stored)-1])
	require.ErrorIs(t, err, ErrChecksum)
}

func TestDecodeRejectsTruncatedAndGarbage(t *testing.T) {
	_, err := Decode(nil, false)
	require.ErrorIs(t, err, ErrCorrupt)
	_, err = Decode(make([]byte, 3*Align), false)
	require.ErrorIs(t, err, ErrCorrupt)
	enc, err := Encode([]Object{{Key: []byte("a"), Value: []byte("b")}}, EncodeOptions{})
	require.NoError(t, err)
	file := concat(enc.Data)
	_, err = Decode(file[:len(file)-Align], false)
	require.ErrorIs(t, err, ErrCorrupt)
}

func FuzzDecode(f *testing.F) {
	r := rand.New(rand.NewPCG(5, 6))
	for _, n := range []int{0, 1, 3} {
		enc, err := Encode(randObjects(r, n, 3000, n == 3), EncodeOptions{ID: uint64(n), Compression: CodecLZ4})
		if err != nil {
			f.Fatal(err)
		}
		f.Add(concat(enc.Data))
	}
	f.Fuzz(func(t *testing.T, file []byte) {
		bf, err := Decode(file, true)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) && !errors.Is(err, ErrChecksum) {
				t.Fatalf("untyped error %v", err)
			}
			return
		}
		for _, e := range bf.Entries {
			if e.Offset+int64(e.StoredLen) > int64(len(file)) {
				t.Fatalf("entry beyond file")
			}
		}
	})
}

// Mooncake #4740: 11 objects of 1 MiB with a keys limit of 500 are grouped
// into one bucket emitted in the same call.
func TestGroupEmitsPartialTail(t *testing.T) {
	items := make([]Item, 11)
	for i := range items {
		items[i] = Item{Key: []byte(fmt.Sprintf("obj-%d", i)), Size: 1 << 20}
	}
	g, err := Group(items, DefaultLimits())
	require.NoError(t, err)
	require.Len(t, g.Buckets, 1)
	require.Len(t, g.Buckets[0], 11)
	require.Empty(t, g.Folded)
	require.Empty(t, g.TooLarge)
}

func TestGroupFoldsDuplicatesAndRefusesTooLarge(t *testing.T) {
	lim := Limits{MaxKeys: 2, MaxBytes: 1 << 20}
	items := []Item{
		{Key: []byte("a"), Size: 10},
		{Key: []byte("b"), Size: 2 << 20},
		{Key: []byte("a"), Size: 10},
		{Key: []byte("c"), Size: 10},
		{Key: []byte("d"), Size: 10},
	}
	g, err := Group(items, lim)
	require.NoError(t, err)
	require.Equal(t, [][]int{{0, 3}, {4}}, g.Buckets)
	require.Equal(t, map[int]int{2: 0}, g.Folded)
	require.Equal(t, []int{1}, g.TooLarge)

	_, err = Group(items, Limits{MaxKeys: 0, MaxBytes: 1 << 20})
	require.ErrorIs(t, err, ErrBadLimits)
	_, err = Group(items, Limits{MaxKeys: 1, MaxBytes: 100})
	require.ErrorIs(t, err, ErrBadLimits)
}

func TestGroupProperties(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		lim := Limits{
			MaxKeys:  rapid.IntRange(1, 8).Draw(t, "keys"),
			MaxBytes: rapid.Int64Range(Size(1, 1, 0), 64*Align).Draw(t, "bytes"),
		}
		n := rapid.IntRange(0, 40).Draw(t, "n")
		items := make([]Item, n)
		for i := range items {
			items[i] = Item{
				Key:  []byte{byte(rapid.IntRange(1, 30).Draw(t, "k"))},
				Size: rapid.Int64Range(0, 20*Align).Draw(t, "size"),
			}
		}
		g, err := Group(items, lim)
		if err != nil {
			t.Fatal(err)
		}
		seen := make([]int, n)
		last := -1
		for _, b := range g.Buckets {
			if len(b) == 0 || len(b) > lim.MaxKeys {
				t.Fatalf("bucket of %d keys", len(b))
			}
			objs := make([]Object, len(b))
			for j, i := range b {
				seen[i]++
				if i <= last {
					t.Fatalf("order not preserved")
				}
				last = i
				objs[j] = Object{Key: items[i].Key, Value: make([]byte, items[i].Size)}
			}
			enc, err := Encode(objs, EncodeOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if enc.Size > lim.MaxBytes {
				t.Fatalf("bucket of %d bytes exceeds %d", enc.Size, lim.MaxBytes)
			}
		}
		for i, j := range g.Folded {
			seen[i]++
			if string(items[i].Key) != string(items[j].Key) || j >= i {
				t.Fatalf("bad fold %d->%d", i, j)
			}
		}
		for _, i := range g.TooLarge {
			seen[i]++
		}
		for i, c := range seen {
			if c != 1 {
				t.Fatalf("index %d appears %d times", i, c)
			}
		}
	})
}

func BenchmarkEncode(b *testing.B) {
	for _, size := range []int{64 << 10, 1 << 20} {
		b.Run(fmt.Sprintf("%dKiB", size>>10), func(b *testing.B) {
			objs := randObjects(rand.New(rand.NewPCG(1, 1)), 64, size, false)
			for i := range objs {
				objs[i].Value = objs[i].Value[:cap(objs[i].Value)]
				if len(objs[i].Value) < size {
					objs[i].Value = make([]byte, size)
				}
			}
			b.SetBytes(int64(64 * size))
			for b.Loop() {
				if _, err := Encode(objs, EncodeOptions{}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// Small objects are packed: four 1 KiB objects share a block, an object that
// does not fit in the rest of a block starts the next one, large objects
// start on a block boundary; the file is about a quarter of what aligning
// every object would take. Version 1 files (every object aligned) still
// decode, and an unaligned object in one is corruption.
func TestSmallObjectsPacked(t *testing.T) {
	var objs []Object
	for i := range 16 {
		objs = append(objs, Object{Key: []byte(fmt.Sprintf("small-%02d", i)), Value: bytes.Repeat([]byte{byte(i)}, 1024)})
	}
	objs = append(objs, Object{Key: []byte("three-k"), Value: make([]byte, 3000)}, Object{Key: []byte("big"), Value: make([]byte, 5000)},
		Object{Key: []byte("after"), Value: make([]byte, 100)})
	enc, err := Encode(objs, EncodeOptions{ID: 3})
	require.NoError(t, err)
	for i := range 16 {
		require.EqualValues(t, HeaderSize+i*1024, enc.Entries[i].Offset, "object %d", i)
	}
	require.EqualValues(t, HeaderSize+4*Align, enc.Entries[16].Offset, "3000 bytes do not fit after 16 KiB of small objects in a full block")
	require.EqualValues(t, HeaderSize+5*Align, enc.Entries[17].Offset, "a large object starts a block")
	require.EqualValues(t, HeaderSize+7*Align, enc.Entries[18].Offset, "the block after a large object")
	require.EqualValues(t, HeaderSize+9*Align, enc.Size, "then the trailer block")
	f, err := Decode(concat(enc.Data), true)
	require.NoError(t, err)
	require.EqualValues(t, Version, f.Footer.Version)

	// A file of another version (1: every object aligned, never released)
	// is refused, naming both versions.
	file := concat(enc.Data)
	v1 := bytes.Clone(file)
	foot := v1[len(v1)-FooterSize:]
	binary.LittleEndian.PutUint16(foot[8:], 1)
	binary.LittleEndian.PutUint32(foot[footerCRCOff:], crc32c.Checksum(foot[:footerCRCOff]))
	_, err = Decode(v1, false)
	require.ErrorIs(t, err, ErrCorrupt)
	require.ErrorContains(t, err, "footer version 1, this build reads version 2")

	// A small object across a block boundary is corrupt: entry 15 (the
	// last 1 KiB of block 4) moved 100 bytes on, checksums fixed.
	bad := bytes.Clone(file)
	tr := bad[f.Footer.TrailerOff : f.Footer.TrailerOff+f.Footer.TrailerLen]
	p := 0
	for range 15 {
		p += EntryFixedSize + int(binary.LittleEndian.Uint16(tr[p+22:]))
	}
	binary.LittleEndian.PutUint64(tr[p:], uint64(enc.Entries[15].Offset+100))
	foot = bad[len(bad)-FooterSize:]
	binary.LittleEndian.PutUint32(foot[40:], crc32c.Checksum(tr))
	binary.LittleEndian.PutUint32(foot[footerCRCOff:], crc32c.Checksum(foot[:footerCRCOff]))
	_, err = Decode(bad, false)
	require.ErrorIs(t, err, ErrCorrupt)
	require.ErrorContains(t, err, "not a small object inside one")
}

// A CRC the caller computed (Object.CRCKnown) is the one recorded: a value
// whose bytes changed after its CRC was taken fails DecodeValue with
// ErrChecksum, stored plain or compressed, and a matching one decodes.
func TestEncodeRecordsTheCallersCRC(t *testing.T) {
	for _, codec := range []Codec{CodecNone, CodecLZ4} {
		good := bytes.Repeat([]byte("abcdefgh"), 1000)
		flipped := bytes.Clone(good)
		want := crc32c.Checksum(good)
		flipped[len(flipped)/3] ^= 0x10 // changed after its CRC was taken
		objs := []Object{
			{Key: []byte("good"), Value: good, CRC: want, CRCKnown: true},
			{Key: []byte("flipped"), Value: flipped, CRC: want, CRCKnown: true},
			{Key: []byte("computed"), Value: flipped},
		}
		enc, err := Encode(objs, EncodeOptions{Compression: codec})
		require.NoError(t, err)
		file := concat(enc.Data)
		f, err := Decode(file, false)
		require.NoError(t, err)
		require.Equal(t, enc.Entries, f.Entries)
		require.Equal(t, want, f.Entries[0].CRC)
		require.Equal(t, want, f.Entries[1].CRC)
		require.Equal(t, crc32c.Checksum(flipped), f.Entries[2].CRC, "no CRC given: Encode computes it")
		for i, e := range f.Entries {
			v, err := DecodeValue(e, file[e.Offset:e.Offset+int64(e.StoredLen)])
			if i == 1 {
				require.ErrorIs(t, err, ErrChecksum, "codec %d", codec)
				continue
			}
			require.NoError(t, err)
			require.Equal(t, objs[i].Value, v)
		}
	}
}
