package bucket

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"runtime"
	"testing"

	"github.com/tierstore/tierstore/internal/crc32c"
	"github.com/tierstore/tierstore/internal/keyspec"
)

// Fuzz targets for every decoder of bucket bytes read from disk (untrusted:
// a torn write, bit rot or another program's file). FuzzDecode in
// bucket_test.go feeds whole files; the targets here reach each decoder
// directly, and FuzzDecodeResealed re-seals mutated files (fresh checksums)
// so that the checks behind the checksums are reached too. None may panic,
// return an untyped error, or allocate more than the bytes it is given
// describe. See docs/fuzzing.md.

// allocated returns the bytes fn allocated on the heap (process-wide, so
// only an upper bound check against a generous slack is meaningful).
func allocated(fn func()) uint64 {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	fn()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// allocSlack is what a decoder may allocate beyond its bound (runtime
// noise, error messages).
const allocSlack = 64 << 10

func requireTyped(t *testing.T, err error) {
	t.Helper()
	if err != nil && !errors.Is(err, ErrCorrupt) && !errors.Is(err, ErrChecksum) {
		t.Fatalf("untyped error %v", err)
	}
	var ce *CorruptionError
	if err != nil && !errors.As(err, &ce) {
		t.Fatalf("error %v is not a *CorruptionError", err)
	}
}

// seedFile is a small valid bucket: two objects, one lz4-compressed.
func seedFile(tb testing.TB) []byte {
	enc, err := Encode([]Object{
		{Key: []byte("alpha"), Value: bytes.Repeat([]byte("kv-cache "), 600)},
		{Key: []byte("b"), Value: []byte{1, 2, 3}},
	}, EncodeOptions{ID: 7, Created: 11, Compression: CodecLZ4})
	if err != nil {
		tb.Fatal(err)
	}
	return concat(enc.Data)
}

func FuzzDecodeHeader(f *testing.F) {
	f.Add(seedFile(f)[:HeaderSize])
	f.Add([]byte("TSBUCKET"))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := DecodeHeader(b)
		requireTyped(t, err)
		if err != nil {
			return
		}
		// What decodes re-encodes to the same 36 bytes.
		again := make([]byte, headerFieldsLen+4)
		putHeader(again, h.Count, h.ID, h.Created)
		if !bytes.Equal(again, b[:headerFieldsLen+4]) {
			t.Fatalf("header %+v re-encodes differently", h)
		}
	})
}

func FuzzDecodeFooter(f *testing.F) {
	file := seedFile(f)
	f.Add(file[len(file)-FooterSize:], int64(len(file)))
	f.Add(file[len(file)-FooterSize:], int64(-1))
	f.Add(make([]byte, FooterSize), int64(2*Align))
	f.Fuzz(func(t *testing.T, b []byte, size int64) {
		ft, err := DecodeFooter(b, size)
		requireTyped(t, err)
		if err != nil {
			return
		}
		if ft.TrailerOff < HeaderSize || ft.TrailerOff%Align != 0 || ft.TrailerLen < 0 ||
			AlignUp(ft.TrailerOff+ft.TrailerLen+FooterSize) != size ||
			int64(ft.Count)*EntryFixedSize > ft.TrailerLen {
			t.Fatalf("accepted footer %+v of a %d-byte file", ft, size)
		}
	})
}

// FuzzDecodeTrailer decodes arbitrary trailer bytes under a footer that is
// consistent with them (right length and checksum), so that every entry
// check is reached; count and trailerOff come from the fuzzer.
func FuzzDecodeTrailer(f *testing.F) {
	file := seedFile(f)
	ft, err := DecodeFooter(file[len(file)-FooterSize:], int64(len(file)))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(file[ft.TrailerOff:ft.TrailerOff+ft.TrailerLen], ft.Count, ft.TrailerOff)
	f.Add(file[ft.TrailerOff:ft.TrailerOff+ft.TrailerLen], uint32(1<<31), ft.TrailerOff)
	f.Add([]byte{}, uint32(0), int64(HeaderSize))
	f.Fuzz(func(t *testing.T, b []byte, count uint32, trailerOff int64) {
		ft := Footer{Count: count, ID: 1, TrailerOff: trailerOff, TrailerLen: int64(len(b)), TrailerCRC: crc32c.Checksum(b)}
		var entries []Entry
		var err error
		n := allocated(func() { entries, err = DecodeTrailer(b, ft) })
		// An entry is at least EntryFixedSize+1 bytes of trailer; its
		// decoded form is one Entry plus a copy of its key.
		if bound := uint64(len(b))/(EntryFixedSize+1)*uint64(entrySize) + uint64(len(b)) + allocSlack; n > bound {
			t.Fatalf("DecodeTrailer of %d bytes (count %d) allocated %d bytes, bound %d", len(b), count, n, bound)
		}
		requireTyped(t, err)
		if err != nil {
			return
		}
		if len(entries) != int(count) {
			t.Fatalf("%d entries, footer says %d", len(entries), count)
		}
		end := int64(HeaderSize)
		for i, e := range entries {
			// Version 2 placement: a large object starts on a block
			// boundary; a small one anywhere it does not cross one.
			small := int64(e.StoredLen) < PackBelow
			inBlock := e.Offset%Align+int64(e.StoredLen) <= Align
			if e.Offset < end || e.Offset+int64(e.StoredLen) > trailerOff || (e.Offset%Align != 0 && !(small && inBlock)) {
				t.Fatalf("entry %d at %d+%d: outside [%d, %d), overlapping or misplaced", i, e.Offset, e.StoredLen, end, trailerOff)
			}
			if len(e.Key) == 0 || len(e.Key) > keyspec.MaxLen {
				t.Fatalf("entry %d key of %d bytes", i, len(e.Key))
			}
			switch e.Codec {
			case CodecNone:
				if e.StoredLen != e.ValueLen {
					t.Fatalf("entry %d: uncompressed %d stored for %d", i, e.StoredLen, e.ValueLen)
				}
			case CodecLZ4:
				if e.StoredLen == 0 || e.StoredLen > e.ValueLen || uint64(e.ValueLen) > maxLZ4Ratio*uint64(e.StoredLen) {
					t.Fatalf("entry %d: lz4 %d stored for %d", i, e.StoredLen, e.ValueLen)
				}
			default:
				t.Fatalf("entry %d codec %d", i, e.Codec)
			}
			end = e.Offset + int64(e.StoredLen)
			if !small {
				end = AlignUp(end)
			}
		}
	})
}

// entrySize is the in-memory size of an Entry.
const entrySize = 56

// FuzzDecodeValue checks one object's stored bytes against an entry whose
// lengths, codec and CRC come from the fuzzer: the decoded value is never
// larger than lz4 can expand the stored bytes to, and is returned only when
// its CRC32C matches.
func FuzzDecodeValue(f *testing.F) {
	file := seedFile(f)
	bf, err := Decode(file, true)
	if err != nil {
		f.Fatal(err)
	}
	for _, e := range bf.Entries {
		f.Add(file[e.Offset:e.Offset+int64(e.StoredLen)], e.ValueLen, uint8(e.Codec), e.CRC)
	}
	f.Add([]byte{0x1f, 0, 1, 0}, uint32(1<<31), uint8(CodecLZ4), uint32(0))
	f.Fuzz(func(t *testing.T, stored []byte, valueLen uint32, codec uint8, crc uint32) {
		e := Entry{Key: []byte("k"), Offset: HeaderSize, ValueLen: valueLen, StoredLen: uint32(len(stored)), Codec: Codec(codec), CRC: crc}
		var v []byte
		var err error
		n := allocated(func() { v, err = DecodeValue(e, stored) })
		if bound := maxLZ4Ratio*uint64(len(stored)) + allocSlack; n > bound {
			t.Fatalf("DecodeValue of %d stored bytes (value length %d) allocated %d bytes", len(stored), valueLen, n)
		}
		requireTyped(t, err)
		if err != nil {
			return
		}
		if uint32(len(v)) != valueLen || crc32c.Checksum(v) != crc {
			t.Fatalf("accepted a value of %d bytes, crc %08x; entry says %d, %08x", len(v), crc32c.Checksum(v), valueLen, crc)
		}
	})
}

// reseal recomputes the header, trailer and footer checksums of a bucket
// file in place (when the footer's trailer range lies inside the file), so
// that a mutated file passes the checksums and reaches the structural
// checks behind them.
func reseal(file []byte) {
	le := binary.LittleEndian
	if len(file) >= headerFieldsLen+4 {
		le.PutUint32(file[headerFieldsLen:], crc32c.Checksum(file[:headerFieldsLen]))
	}
	if len(file) < FooterSize {
		return
	}
	foot := file[len(file)-FooterSize:]
	off, n := int64(le.Uint64(foot[24:])), int64(le.Uint64(foot[32:]))
	if off >= 0 && n >= 0 && off <= int64(len(file)) && n <= int64(len(file))-off {
		le.PutUint32(foot[40:], crc32c.Checksum(file[off:off+n]))
	}
	le.PutUint32(foot[footerCRCOff:], crc32c.Checksum(foot[:footerCRCOff]))
}

// FuzzDecodeResealed mutates a valid bucket file at fuzzer-chosen offsets
// and re-seals it: Decode must then reject it with a typed error or return
// entries whose values all decode to their checksums.
func FuzzDecodeResealed(f *testing.F) {
	r := rand.New(rand.NewPCG(8, 9))
	files := [][]byte{seedFile(f)}
	for _, n := range []int{1, 4} {
		enc, err := Encode(randObjects(r, n, 5000, true), EncodeOptions{ID: uint64(n), Compression: CodecLZ4})
		if err != nil {
			f.Fatal(err)
		}
		files = append(files, concat(enc.Data))
	}
	f.Add(uint8(0), []byte{})
	f.Add(uint8(1), []byte{0xe0, 0xff, 0x01, 0x00, 0x00, 0x00, 0x00})
	f.Add(uint8(2), []byte{0x40, 0x00, 0x10, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, which uint8, edits []byte) {
		file := bytes.Clone(files[int(which)%len(files)])
		// Each edit is 7 bytes: a 4-byte little-endian offset (counted
		// from the end of the file when its top bit is set) and 3 bytes
		// xored in there.
		for len(edits) >= 7 {
			off := int64(binary.LittleEndian.Uint32(edits) & 0x7fffffff)
			if edits[3]&0x80 != 0 {
				off = int64(len(file)) - 1 - off%int64(len(file))
			}
			off %= int64(len(file))
			for i := range 3 {
				if off+int64(i) < int64(len(file)) {
					file[off+int64(i)] ^= edits[4+i]
				}
			}
			edits = edits[7:]
		}
		reseal(file)
		var bf *File
		var err error
		n := allocated(func() { bf, err = Decode(file, true) })
		if bound := 4*uint64(len(file)) + maxLZ4Ratio*uint64(len(file)) + allocSlack; n > bound {
			t.Fatalf("Decode of %d bytes allocated %d", len(file), n)
		}
		requireTyped(t, err)
		if err != nil {
			return
		}
		for _, e := range bf.Entries {
			v, err := DecodeValue(e, file[e.Offset:e.Offset+int64(e.StoredLen)])
			if err != nil || crc32c.Checksum(v) != e.CRC {
				t.Fatalf("Decode accepted entry %q whose value fails: %v", e.Key, err)
			}
		}
	})
}

// A footer or entry that claims far more than the bytes behind it cannot
// make the decoders allocate it: DecodeTrailer with a huge object count,
// DecodeValue with a huge lz4 value length.
func TestDecodersAllocateWhatTheBytesDescribe(t *testing.T) {
	file := seedFile(t)
	ft, err := DecodeFooter(file[len(file)-FooterSize:], int64(len(file)))
	if err != nil {
		t.Fatal(err)
	}
	trailer := file[ft.TrailerOff : ft.TrailerOff+ft.TrailerLen]
	ft.Count = 1 << 20 // 48 MiB of Entry if trusted
	var derr error
	if n := allocated(func() { _, derr = DecodeTrailer(trailer, ft) }); n > 1<<20 {
		t.Errorf("DecodeTrailer of %d bytes claiming %d entries allocated %d bytes", len(trailer), ft.Count, n)
	}
	if !errors.Is(derr, ErrCorrupt) {
		t.Errorf("DecodeTrailer with a wrong count: %v", derr)
	}

	e := Entry{Key: []byte("k"), Offset: HeaderSize, ValueLen: 64 << 20, StoredLen: 10, Codec: CodecLZ4}
	if n := allocated(func() { _, derr = DecodeValue(e, make([]byte, 10)) }); n > 1<<20 {
		t.Errorf("DecodeValue of 10 lz4 bytes claiming %d allocated %d bytes", e.ValueLen, n)
	}
	if !errors.Is(derr, ErrChecksum) {
		t.Errorf("DecodeValue of an impossible lz4 length: %v", derr)
	}
}

// A trailer entry whose lz4 value is longer than lz4 can expand its stored
// bytes to is corrupt, even with valid checksums.
func TestDecodeRefusesImpossibleLZ4Length(t *testing.T) {
	file := seedFile(t)
	bf, err := Decode(file, true)
	if err != nil {
		t.Fatal(err)
	}
	e := bf.Entries[0]
	if e.Codec != CodecLZ4 {
		t.Fatalf("seed entry 0 is %v, want lz4", e.Codec)
	}
	// Entry 0 is the first trailer entry: its value length is at +8.
	binary.LittleEndian.PutUint32(file[bf.Footer.TrailerOff+8:], maxLZ4Ratio*e.StoredLen+1)
	reseal(file)
	if _, err := Decode(file, false); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Decode of an impossible lz4 length: %v", err)
	}
	binary.LittleEndian.PutUint32(file[bf.Footer.TrailerOff+8:], maxLZ4Ratio*e.StoredLen)
	reseal(file)
	if _, err := Decode(file, false); err != nil {
		t.Fatalf("Decode of the largest possible lz4 length: %v", err)
	}
}
