package bucket

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"

	"github.com/pierrec/lz4/v4"

	"github.com/tierstore/tierstore/internal/crc32c"
	"github.com/tierstore/tierstore/internal/keyspec"
)

// Format constants; see docs/format/bucket.md.
const (
	// Align is the block size: object data starts on an Align boundary and
	// every bucket file is a multiple of Align long.
	Align = 4096
	// HeaderSize is the size of the header block.
	HeaderSize = Align
	// FooterSize is the size of the footer, the last bytes of the file.
	FooterSize = 64
	// EntryFixedSize is the size of a trailer entry without its key.
	EntryFixedSize = 24
	// Version is the format version this package writes and reads
	// (docs/format/bucket.md): version 2 packs small objects (see Encode).
	// A file of another version is refused (ErrCorrupt naming both).
	Version = 2
	// PackBelow: an object whose stored bytes are fewer than this is packed
	// (Version 2): it starts right after the previous small object instead
	// of on a block boundary, and never crosses one, so one block read
	// still holds it.
	PackBelow = Align
	// MaxValueLen is the longest value, in bytes.
	MaxValueLen = math.MaxUint32

	headerFieldsLen = 32
	footerCRCOff    = 60

	// maxLZ4Ratio bounds how much an lz4 block expands: every input byte
	// yields at most 255 output bytes (a match-length byte of 255), so a
	// value longer than maxLZ4Ratio times its stored bytes cannot decode
	// and is refused before its buffer is allocated.
	maxLZ4Ratio = 255
)

var (
	headerMagic = [8]byte{'T', 'S', 'B', 'U', 'C', 'K', 'E', 'T'}
	footerMagic = [8]byte{'T', 'S', 'B', 'F', 'O', 'O', 'T', 'R'}
	// zeros is the shared padding block; never written to.
	zeros = make([]byte, Align)
)

// Codec is how an object's value is stored.
type Codec uint8

const (
	// CodecNone stores the value as is.
	CodecNone Codec = 0
	// CodecLZ4 stores the lz4 block compression of the value.
	CodecLZ4 Codec = 1
)

func (c Codec) String() string {
	switch c {
	case CodecNone:
		return "none"
	case CodecLZ4:
		return "lz4"
	}
	return fmt.Sprintf("codec(%d)", uint8(c))
}

// ParseCodec maps "none" (or "") and "lz4" to a Codec.
func ParseCodec(s string) (Codec, error) {
	switch s {
	case "", "none":
		return CodecNone, nil
	case "lz4":
		return CodecLZ4, nil
	}
	return 0, fmt.Errorf("%w %q (valid: none, lz4)", ErrUnknownCodec, s)
}

// AlignUp rounds n up to a multiple of Align.
func AlignUp(n int64) int64 { return (n + Align - 1) &^ (Align - 1) }

// ValidKey reports whether key is 1 to keyspec.MaxLen bytes long.
func ValidKey(key []byte) error {
	if len(key) == 0 {
		return fmt.Errorf("%w: empty key", ErrInvalidKey)
	}
	if len(key) > keyspec.MaxLen {
		return fmt.Errorf("%w: key of %d bytes exceeds %d", ErrInvalidKey, len(key), keyspec.MaxLen)
	}
	return nil
}

// Object is one key and value to encode.
type Object struct {
	Key   []byte
	Value []byte
	// CRC, when CRCKnown, is the CRC32C of Value as the caller computed it
	// (while copying the value, or when it was put): Encode records it
	// without reading Value again. Encode does not check it; a CRC that is
	// not Value's makes every read of the object fail with ErrChecksum.
	CRC      uint32
	CRCKnown bool
}

// Entry locates one object inside a bucket file.
type Entry struct {
	Key       []byte
	Offset    int64  // file offset of the stored bytes; a multiple of Align
	ValueLen  uint32 // length of the original value
	StoredLen uint32 // length of the stored bytes (after compression)
	Codec     Codec
	CRC       uint32 // CRC32C of the original value
}

// EncodeOptions parameterise Encode.
type EncodeOptions struct {
	ID      uint64 // bucket id, recorded in header and footer
	Created int64  // creation time, unix nanoseconds
	// Compression is tried per object; lz4 is kept only when it saves at
	// least 10% of the value.
	Compression Codec
}

// Encoded is a bucket ready to write: Data concatenated is the file.
type Encoded struct {
	Data    [][]byte
	Size    int64
	Entries []Entry
	// Pieces[i] is the index in Data of Entries[i]'s stored bytes (the
	// value itself when stored uncompressed), -1 for an empty value.
	Pieces []int
	// Footer is the file's footer: where its trailer is and the trailer's
	// CRC32C, which the index records so that recovery checks a bucket
	// with one read.
	Footer Footer
}

// Size is the file size of a bucket holding objects whose keys sum to keyBytes
// and whose stored data, each rounded up to Align, sums to alignedData.
func Size(n int, keyBytes, alignedData int64) int64 {
	return AlignUp(HeaderSize + alignedData + int64(n)*EntryFixedSize + keyBytes + FooterSize)
}

// Encode lays out objs as one bucket file. Values are referenced, not copied
// (an lz4-compressed value is the only new buffer).
func Encode(objs []Object, opt EncodeOptions) (*Encoded, error) {
	if opt.Compression != CodecNone && opt.Compression != CodecLZ4 {
		return nil, fmt.Errorf("%w: %d", ErrUnknownCodec, opt.Compression)
	}
	if len(objs) > math.MaxUint32 {
		return nil, fmt.Errorf("%w: %d objects in one bucket", ErrTooLarge, len(objs))
	}
	enc := &Encoded{
		Data:    make([][]byte, 0, 2*len(objs)+2),
		Entries: make([]Entry, 0, len(objs)),
		Pieces:  make([]int, 0, len(objs)),
	}
	header := make([]byte, HeaderSize)
	enc.Data = append(enc.Data, header)
	off := int64(HeaderSize)
	trailerLen := 0
	for i, o := range objs {
		if err := ValidKey(o.Key); err != nil {
			return nil, fmt.Errorf("object %d: %w", i, err)
		}
		if int64(len(o.Value)) > MaxValueLen {
			return nil, fmt.Errorf("%w: object %d has %d bytes", ErrTooLarge, i, len(o.Value))
		}
		stored, codec := o.Value, CodecNone
		if opt.Compression == CodecLZ4 && len(o.Value) > 0 {
			if c, ok := compressLZ4(o.Value); ok {
				stored, codec = c, CodecLZ4
			}
		}
		crc := o.CRC
		if !o.CRCKnown {
			crc = crc32c.Checksum(o.Value)
		}
		e := Entry{
			Key: o.Key, Offset: off, ValueLen: uint32(len(o.Value)),
			StoredLen: uint32(len(stored)), Codec: codec, CRC: crc,
		}
		// Small objects are packed into the current block when they fit
		// in what is left of it; every other object starts a block.
		if start := placeAt(off, int64(len(stored))); start > off {
			enc.Data = append(enc.Data, zeros[:start-off])
			off = start
		}
		e.Offset = off
		enc.Entries = append(enc.Entries, e)
		piece := -1
		if len(stored) > 0 {
			piece = len(enc.Data)
			enc.Data = append(enc.Data, stored)
		}
		enc.Pieces = append(enc.Pieces, piece)
		off += int64(len(stored))
		if int64(len(stored)) >= PackBelow {
			padded := AlignUp(off)
			enc.Data = append(enc.Data, zeros[:padded-off])
			off = padded
		}
		trailerLen += EntryFixedSize + len(o.Key)
	}
	trailerOff := AlignUp(off)
	if pad := trailerOff - off; pad > 0 {
		enc.Data = append(enc.Data, zeros[:pad])
	}
	size := AlignUp(trailerOff + int64(trailerLen) + FooterSize)
	tail := make([]byte, size-trailerOff)
	p := 0
	for _, e := range enc.Entries {
		p += putEntry(tail[p:], e)
	}
	trailerCRC := crc32c.Checksum(tail[:trailerLen])
	putHeader(header, uint32(len(objs)), opt.ID, opt.Created)
	enc.Footer = Footer{
		Version: Version, Count: uint32(len(objs)), ID: opt.ID, TrailerOff: trailerOff,
		TrailerLen: int64(trailerLen), TrailerCRC: trailerCRC,
	}
	putFooter(tail[len(tail)-FooterSize:], enc.Footer)
	enc.Data = append(enc.Data, tail)
	enc.Size = size
	return enc, nil
}

// placeAt returns where an object of n stored bytes starts when the data so
// far ends at off: off itself for a small object that fits in the rest of
// off's block (or an empty one), else the next block boundary.
func placeAt(off, n int64) int64 {
	if n < PackBelow && (off%Align == 0 || off%Align+n <= Align) {
		return off
	}
	return AlignUp(off)
}

func compressLZ4(v []byte) ([]byte, bool) {
	dst := make([]byte, lz4.CompressBlockBound(len(v)))
	n, err := lz4.CompressBlock(v, dst, nil)
	if err != nil || n == 0 || int64(n)*10 > int64(len(v))*9 {
		return nil, false
	}
	return dst[:n], true
}

func putEntry(b []byte, e Entry) int {
	le := binary.LittleEndian
	le.PutUint64(b[0:], uint64(e.Offset))
	le.PutUint32(b[8:], e.ValueLen)
	le.PutUint32(b[12:], e.StoredLen)
	le.PutUint32(b[16:], e.CRC)
	b[20] = byte(e.Codec)
	b[21] = 0
	le.PutUint16(b[22:], uint16(len(e.Key)))
	copy(b[EntryFixedSize:], e.Key)
	return EntryFixedSize + len(e.Key)
}

// Header is the decoded header block.
type Header struct {
	Count   uint32
	ID      uint64
	Created int64
}

func putHeader(b []byte, count uint32, id uint64, created int64) {
	le := binary.LittleEndian
	copy(b[0:8], headerMagic[:])
	le.PutUint16(b[8:], Version)
	le.PutUint16(b[10:], 0)
	le.PutUint32(b[12:], count)
	le.PutUint64(b[16:], id)
	le.PutUint64(b[24:], uint64(created))
	le.PutUint32(b[headerFieldsLen:], crc32c.Checksum(b[:headerFieldsLen]))
}

// DecodeHeader validates and decodes the first bytes of a bucket file (at
// least headerFieldsLen+4 of them).
func DecodeHeader(b []byte) (Header, error) {
	le := binary.LittleEndian
	if len(b) < headerFieldsLen+4 {
		return Header{}, corrupt(0, "header of %d bytes", len(b))
	}
	if !bytes.Equal(b[0:8], headerMagic[:]) {
		return Header{}, corrupt(0, "header magic %q", b[0:8])
	}
	if got, want := le.Uint32(b[headerFieldsLen:]), crc32c.Checksum(b[:headerFieldsLen]); got != want {
		return Header{}, corrupt(0, "header checksum %08x, want %08x", got, want)
	}
	if v := le.Uint16(b[8:]); v != Version {
		return Header{}, corrupt(8, "header version %d, this build reads version %d", v, Version)
	}
	return Header{Count: le.Uint32(b[12:]), ID: le.Uint64(b[16:]), Created: int64(le.Uint64(b[24:]))}, nil
}

// Footer is the decoded footer: where the trailer is and its checksum.
type Footer struct {
	Version    uint16 // of the file: Version
	Count      uint32
	ID         uint64
	TrailerOff int64
	TrailerLen int64
	TrailerCRC uint32
}

func putFooter(b []byte, f Footer) {
	le := binary.LittleEndian
	copy(b[0:8], footerMagic[:])
	le.PutUint16(b[8:], f.Version)
	le.PutUint16(b[10:], 0)
	le.PutUint32(b[12:], f.Count)
	le.PutUint64(b[16:], f.ID)
	le.PutUint64(b[24:], uint64(f.TrailerOff))
	le.PutUint64(b[32:], uint64(f.TrailerLen))
	le.PutUint32(b[40:], f.TrailerCRC)
	le.PutUint32(b[footerCRCOff:], crc32c.Checksum(b[:footerCRCOff]))
}

// DecodeFooter validates the last FooterSize bytes b of a bucket file of
// fileSize bytes.
func DecodeFooter(b []byte, fileSize int64) (Footer, error) {
	le := binary.LittleEndian
	foff := fileSize - FooterSize
	if len(b) != FooterSize {
		return Footer{}, corrupt(foff, "footer of %d bytes, want %d", len(b), FooterSize)
	}
	if fileSize < HeaderSize+Align || fileSize%Align != 0 {
		return Footer{}, corrupt(-1, "file size %d is not a valid bucket size", fileSize)
	}
	if !bytes.Equal(b[0:8], footerMagic[:]) {
		return Footer{}, corrupt(foff, "footer magic %q", b[0:8])
	}
	if got, want := le.Uint32(b[footerCRCOff:]), crc32c.Checksum(b[:footerCRCOff]); got != want {
		return Footer{}, corrupt(foff, "footer checksum %08x, want %08x", got, want)
	}
	v := le.Uint16(b[8:])
	if v != Version {
		return Footer{}, corrupt(foff+8, "footer version %d, this build reads version %d", v, Version)
	}
	f := Footer{
		Version: v, Count: le.Uint32(b[12:]), ID: le.Uint64(b[16:]),
		TrailerOff: int64(le.Uint64(b[24:])), TrailerLen: int64(le.Uint64(b[32:])),
		TrailerCRC: le.Uint32(b[40:]),
	}
	if f.TrailerOff < HeaderSize || f.TrailerOff%Align != 0 || f.TrailerLen < 0 ||
		f.TrailerOff > fileSize || f.TrailerLen > fileSize ||
		AlignUp(f.TrailerOff+f.TrailerLen+FooterSize) != fileSize {
		return Footer{}, corrupt(foff, "trailer at %d+%d does not fit a file of %d bytes", f.TrailerOff, f.TrailerLen, fileSize)
	}
	if int64(f.Count)*EntryFixedSize > f.TrailerLen {
		return Footer{}, corrupt(foff, "%d entries cannot fit a trailer of %d bytes", f.Count, f.TrailerLen)
	}
	return f, nil
}

// DecodeTrailer validates and decodes the trailer b located by f. Every
// entry's offset and lengths are checked against the data region.
func DecodeTrailer(b []byte, f Footer) ([]Entry, error) {
	le := binary.LittleEndian
	if int64(len(b)) != f.TrailerLen {
		return nil, corrupt(f.TrailerOff, "trailer of %d bytes, footer says %d", len(b), f.TrailerLen)
	}
	if got := crc32c.Checksum(b); got != f.TrailerCRC {
		return nil, corrupt(f.TrailerOff, "trailer checksum %08x, want %08x", got, f.TrailerCRC)
	}
	// f.Count comes from the file: an entry takes at least
	// EntryFixedSize+1 trailer bytes, so more cannot be there.
	entries := make([]Entry, 0, min(int64(f.Count), int64(len(b))/(EntryFixedSize+1)))
	p := 0
	minOff := int64(HeaderSize)
	for i := uint32(0); i < f.Count; i++ {
		at := f.TrailerOff + int64(p)
		if len(b)-p < EntryFixedSize {
			return nil, corrupt(at, "entry %d truncated", i)
		}
		e := Entry{
			Offset: int64(le.Uint64(b[p:])), ValueLen: le.Uint32(b[p+8:]),
			StoredLen: le.Uint32(b[p+12:]), CRC: le.Uint32(b[p+16:]), Codec: Codec(b[p+20]),
		}
		klen := int(le.Uint16(b[p+22:]))
		p += EntryFixedSize
		if klen == 0 || klen > keyspec.MaxLen || len(b)-p < klen {
			return nil, corrupt(at, "entry %d key length %d", i, klen)
		}
		e.Key = bytes.Clone(b[p : p+klen])
		p += klen
		switch e.Codec {
		case CodecNone:
			if e.StoredLen != e.ValueLen {
				return nil, corrupt(at, "entry %d stored %d bytes of a %d-byte uncompressed value", i, e.StoredLen, e.ValueLen)
			}
		case CodecLZ4:
			if e.StoredLen == 0 || e.StoredLen > e.ValueLen || uint64(e.ValueLen) > maxLZ4Ratio*uint64(e.StoredLen) {
				return nil, corrupt(at, "entry %d stored %d lz4 bytes of a %d-byte value", i, e.StoredLen, e.ValueLen)
			}
		default:
			return nil, corrupt(at, "entry %d codec %d", i, e.Codec)
		}
		if e.Offset < minOff || e.Offset > f.TrailerOff || int64(e.StoredLen) > f.TrailerOff-e.Offset {
			return nil, corrupt(at, "entry %d data at %d+%d outside [%d,%d)", i, e.Offset, e.StoredLen, minOff, f.TrailerOff)
		}
		if placed := placeAt(e.Offset, int64(e.StoredLen)) == e.Offset; e.Offset%Align != 0 && !placed {
			return nil, corrupt(at, "entry %d data at %d+%d: not on a block boundary, and not a small object inside one", i, e.Offset, e.StoredLen)
		}
		minOff = e.Offset + int64(e.StoredLen)
		if int64(e.StoredLen) >= PackBelow {
			minOff = AlignUp(minOff)
		}
		entries = append(entries, e)
	}
	if p != len(b) {
		return nil, corrupt(f.TrailerOff+int64(p), "%d unexpected trailer bytes", len(b)-p)
	}
	return entries, nil
}

// DecodeValue checks stored, the StoredLen bytes at e.Offset, against e and
// returns the original value. It returns a *CorruptionError wrapping
// ErrChecksum when the bytes do not decompress or fail the CRC32C. For
// CodecNone the returned slice is stored itself.
func DecodeValue(e Entry, stored []byte) ([]byte, error) {
	return DecodeValueInto(e, stored, nil)
}

// DecodeValueInto is DecodeValue decompressing into dst (at least ValueLen
// bytes; the value is dst[:ValueLen]) instead of new memory when dst is not
// nil. For CodecNone the returned slice is stored itself, whatever dst.
func DecodeValueInto(e Entry, stored, dst []byte) ([]byte, error) {
	if len(stored) != int(e.StoredLen) {
		return nil, &CorruptionError{What: fmt.Sprintf("object %q: %d stored bytes, want %d", e.Key, len(stored), e.StoredLen), Off: e.Offset, Err: ErrChecksum}
	}
	v := stored
	if e.Codec == CodecLZ4 {
		if uint64(e.ValueLen) > maxLZ4Ratio*uint64(len(stored)) {
			return nil, &CorruptionError{What: fmt.Sprintf("object %q: %d lz4 bytes cannot decode to %d bytes", e.Key, len(stored), e.ValueLen), Off: e.Offset, Err: ErrChecksum}
		}
		if len(dst) >= int(e.ValueLen) {
			v = dst[:e.ValueLen]
		} else {
			v = make([]byte, e.ValueLen)
		}
		n, err := lz4.UncompressBlock(stored, v)
		if err != nil || n != int(e.ValueLen) {
			return nil, &CorruptionError{What: fmt.Sprintf("object %q: lz4 data does not decode to %d bytes", e.Key, e.ValueLen), Off: e.Offset, Err: ErrChecksum}
		}
	} else if e.Codec != CodecNone {
		return nil, &CorruptionError{What: fmt.Sprintf("object %q: codec %d", e.Key, e.Codec), Off: e.Offset, Err: ErrCorrupt}
	} else if e.ValueLen != e.StoredLen {
		// Uncompressed bytes are the value: any other length is not the
		// object the entry describes, whatever their CRC32C.
		return nil, &CorruptionError{What: fmt.Sprintf("object %q: %d uncompressed bytes for a %d-byte value", e.Key, e.StoredLen, e.ValueLen), Off: e.Offset, Err: ErrChecksum}
	}
	if got := crc32c.Checksum(v); got != e.CRC {
		return nil, &CorruptionError{What: fmt.Sprintf("object %q: crc32c %08x, want %08x", e.Key, got, e.CRC), Off: e.Offset, Err: ErrChecksum}
	}
	return v, nil
}

// File is a fully decoded bucket file.
type File struct {
	Header  Header
	Footer  Footer
	Entries []Entry
}

// Decode validates a whole bucket file held in memory: header, footer,
// trailer, and (when verifyValues) every object's checksum.
func Decode(file []byte, verifyValues bool) (*File, error) {
	size := int64(len(file))
	if size < HeaderSize+Align || size%Align != 0 {
		return nil, corrupt(-1, "file size %d is not a valid bucket size", size)
	}
	h, err := DecodeHeader(file[:HeaderSize])
	if err != nil {
		return nil, err
	}
	f, err := DecodeFooter(file[size-FooterSize:], size)
	if err != nil {
		return nil, err
	}
	if h.ID != f.ID || h.Count != f.Count {
		return nil, corrupt(0, "header (id %d, %d objects) disagrees with footer (id %d, %d objects)", h.ID, h.Count, f.ID, f.Count)
	}
	entries, err := DecodeTrailer(file[f.TrailerOff:f.TrailerOff+f.TrailerLen], f)
	if err != nil {
		return nil, err
	}
	if verifyValues {
		for _, e := range entries {
			if _, err := DecodeValue(e, file[e.Offset:e.Offset+int64(e.StoredLen)]); err != nil {
				return nil, err
			}
		}
	}
	return &File{Header: h, Footer: f, Entries: entries}, nil
}
