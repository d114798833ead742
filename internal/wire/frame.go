package wire

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"github.com/tierstore/tierstore/internal/errcode"
	"github.com/tierstore/tierstore/internal/keyspec"
)

// The data plane's framing (docs/format/dataplane.md). A data connection
// starts with an 8-byte hello each way ("TSDP", version, three zero bytes);
// then every message is a frame: a 32-byte header, MetaLen bytes of
// metadata, PayloadLen bytes of payload. Integers are little-endian.
const (
	// DataMagic opens a data connection. It cannot begin an HTTP/2
	// connection preface ("PRI * HTTP/2.0"), so one listener serves both.
	DataMagic = "TSDP"
	// DataVersion is the protocol version this build speaks. 2: the read
	// requests carry a read grant (Request.Grant) before their segment
	// name or key, which a node of version 1 would read as part of them.
	// 3: the write request carries a write grant after its pins, before
	// its segment name, which a node of version 2 would read as part of
	// the segment name.
	// 4: the read-range request names the put token of the object it
	// reads (after its length, before its grant); a node refuses the read
	// when the range holds another put's object (a client's cached
	// replica location of an object removed or evicted since: issue 24).
	// 5: over TLS, after the hellos, every frame travels in the data
	// plane's own records on the socket, sealed with keys exported from
	// the TLS session (record.go), not in TLS records; plaintext
	// connections are unchanged from 4 but refused by a node of 4.
	DataVersion = 5
	// HelloLen is the length of the hello each side sends first.
	HelloLen = 8
	// HeaderLen is the length of a frame header.
	HeaderLen = 32
	// MaxMeta bounds a frame's metadata: a key of keyspec.MaxLen
	// bytes or a segment name, two integers, or an error message.
	MaxMeta = 8 << 10
	// MaxPayload bounds any payload a frame may announce (an object
	// larger than this cannot exist); each reader also applies its own,
	// tighter bound (the caller's buffer, the node's segment).
	MaxPayload = 1 << 40
	// maxName bounds a segment name in request metadata.
	maxName = 1024
	// MaxGrant bounds a grant in request metadata (a grant is
	// grant.Size bytes; the node, not the framing, judges its content).
	MaxGrant = 64
)

// frameMagic opens every frame header ("TF"): a stream that lost its
// framing fails at the next header instead of being read as data.
var frameMagic = [2]byte{'T', 'F'}

// Op is a frame's operation. A reply carries its request's Op with
// ReplyBit set.
type Op uint8

// Operations of the data plane.
const (
	// OpWrite: payload = the value, written at Offset of Segment for the
	// put identified by Token; FlagCRC is mandatory. Reply: no payload.
	OpWrite Op = 1
	// OpReadRange: read Length bytes at Offset of Segment, the object of
	// the put Token (0: whatever complete object is there). Reply: payload
	// = exactly those bytes, no CRC (the reader knows the object's).
	OpReadRange Op = 2
	// OpReadSSD: read Key from the node's SSD tier; Length is the size the
	// reader expects. Reply: payload = exactly Length bytes.
	OpReadSSD Op = 3
	// ReplyBit marks a reply.
	ReplyBit Op = 0x80
)

// Frame flags.
const (
	// FlagCRC: Header.CRC holds the payload's CRC32C (in a read-ssd
	// reply: the CRC32C the node's index records for the value, which the
	// node did not check; the client's check of the bytes is the one).
	FlagCRC uint8 = 1
	// FlagVerify, on a read-ssd request only: the client's previous copy
	// of the value failed its CRC32C; the node reads it whole and checks
	// it against its index before sending anything, dropping a corrupt
	// entry (invariant 5).
	FlagVerify uint8 = 2
)

func (o Op) valid() bool {
	switch o &^ ReplyBit {
	case OpWrite, OpReadRange, OpReadSSD:
		return true
	}
	return false
}

func (o Op) String() string {
	name := "op(" + fmt.Sprint(uint8(o&^ReplyBit)) + ")"
	switch o &^ ReplyBit {
	case OpWrite:
		name = "write"
	case OpReadRange:
		name = "read-range"
	case OpReadSSD:
		name = "read-ssd"
	}
	if o&ReplyBit != 0 {
		name += " reply"
	}
	return name
}

// Header is a decoded frame header.
type Header struct {
	Op    Op
	Flags uint8
	// ID is chosen by the requester and echoed by the reply: several
	// requests may be in flight on one connection, replies in any order.
	ID uint32
	// Status is a reply's outcome (errcode.OK, or the error's code with the
	// message as metadata); 0 in requests.
	Status errcode.Code
	// CRC is the payload's CRC32C when Flags has FlagCRC.
	CRC        uint32
	MetaLen    uint32
	PayloadLen uint64
}

// Errors of the data plane's framing. Every one also wraps
// errcode.ErrTransferFail, so a reader falls back to another replica.
var (
	// ErrFrame: a frame or hello is malformed (bad magic, unknown op or
	// flags, oversized metadata or payload, a reply nobody asked for).
	ErrFrame = errors.New("wire: malformed frame")
	// ErrShortFrame: the connection ended inside a frame.
	ErrShortFrame = errors.New("wire: connection ended inside a frame")
	// ErrBadChecksum: bytes received by this side fail the object's
	// CRC32C (also wraps errcode.ErrChecksumMismatch). A node that finds its
	// own SSD copy corrupt answers errcode.ErrChecksumMismatch without it.
	ErrBadChecksum = errors.New("wire: received bytes fail the object's CRC32C")
	// ErrSlowFrame: a request frame did not arrive within its deadline
	// (DataServerOptions.FrameTimeout); the connection ends. It wraps
	// errcode.ErrPeerLimit, not ErrTransferFail.
	ErrSlowFrame = errors.New("wire: a frame did not arrive within its deadline")
)

// BadChecksum returns an error wrapping ErrBadChecksum and
// errcode.ErrChecksumMismatch.
func BadChecksum(format string, args ...any) error {
	return fmt.Errorf("%s: %w: %w", fmt.Sprintf(format, args...), ErrBadChecksum, errcode.ErrChecksumMismatch)
}

// frameErr is an error of the framing wrapping sentinel and
// errcode.ErrTransferFail; when one of args is a record's failure
// (ErrRecordAuth, the cause and not a framing error, its message complete)
// it is that error.
func frameErr(sentinel error, format string, args ...any) error {
	for _, a := range args {
		if e, ok := a.(error); ok && errors.Is(e, ErrRecordAuth) {
			return e
		}
	}
	return fmt.Errorf("%s: %w: %w", fmt.Sprintf(format, args...), sentinel, errcode.ErrTransferFail)
}

// Encode writes h into b[:HeaderLen].
func (h *Header) Encode(b []byte) {
	_ = b[HeaderLen-1]
	b[0], b[1] = frameMagic[0], frameMagic[1]
	b[2] = byte(h.Op)
	b[3] = h.Flags
	binary.LittleEndian.PutUint32(b[4:], h.ID)
	binary.LittleEndian.PutUint32(b[8:], uint32(int32(h.Status)))
	binary.LittleEndian.PutUint32(b[12:], h.CRC)
	binary.LittleEndian.PutUint32(b[16:], h.MetaLen)
	binary.LittleEndian.PutUint32(b[20:], 0)
	binary.LittleEndian.PutUint64(b[24:], h.PayloadLen)
}

// DecodeHeader parses and validates a frame header: magic, a known op,
// known flags, zero reserved bytes, MetaLen <= MaxMeta, PayloadLen <=
// MaxPayload, and no status in a request.
func DecodeHeader(b []byte) (Header, error) {
	if len(b) < HeaderLen {
		return Header{}, frameErr(ErrShortFrame, "wire: frame header of %d bytes, %d needed", len(b), HeaderLen)
	}
	if b[0] != frameMagic[0] || b[1] != frameMagic[1] {
		return Header{}, frameErr(ErrFrame, "wire: frame header starts with %02x%02x, not %q", b[0], b[1], frameMagic[:])
	}
	h := Header{
		Op: Op(b[2]), Flags: b[3],
		ID:         binary.LittleEndian.Uint32(b[4:]),
		Status:     errcode.Code(int32(binary.LittleEndian.Uint32(b[8:]))),
		CRC:        binary.LittleEndian.Uint32(b[12:]),
		MetaLen:    binary.LittleEndian.Uint32(b[16:]),
		PayloadLen: binary.LittleEndian.Uint64(b[24:]),
	}
	switch {
	case !h.Op.valid():
		return Header{}, frameErr(ErrFrame, "wire: unknown frame op %d", b[2])
	case h.Flags&^FlagCRC != 0 && (h.Op != OpReadSSD || h.Flags&^(FlagCRC|FlagVerify) != 0):
		return Header{}, frameErr(ErrFrame, "wire: unknown frame flags %#x for a %v", h.Flags, h.Op)
	case binary.LittleEndian.Uint32(b[20:]) != 0:
		return Header{}, frameErr(ErrFrame, "wire: reserved header bytes are not zero")
	case h.MetaLen > MaxMeta:
		return Header{}, frameErr(ErrFrame, "wire: %v frame announces %d bytes of metadata, at most %d allowed", h.Op, h.MetaLen, MaxMeta)
	case h.PayloadLen > MaxPayload:
		return Header{}, frameErr(ErrFrame, "wire: %v frame announces a payload of %d bytes, at most %d allowed", h.Op, h.PayloadLen, uint64(MaxPayload))
	case h.Op&ReplyBit == 0 && h.Status != errcode.OK:
		return Header{}, frameErr(ErrFrame, "wire: %v request carries status %d", h.Op, h.Status)
	}
	return h, nil
}

// Request is the metadata of a request frame.
type Request struct {
	Op      Op
	Segment string // OpWrite, OpReadRange
	Offset  uint64 // OpWrite, OpReadRange
	Length  uint64 // OpReadRange, OpReadSSD: bytes asked for
	// Token: OpWrite, the put token (masterapi.Replica.PutToken);
	// OpReadRange, the put token of the object read (0: not named).
	Token uint64
	Key   []byte // OpReadSSD; OpWrite: the object's key ("" = not recorded)
	Pins  uint8  // OpWrite: PinSoft | PinHard of the object
	// Grant: OpReadRange and OpReadSSD, the read grant of the replica's
	// lookup; OpWrite, the write grant of the put's range from PutStart
	// (masterapi.Replica.Grant; empty without one), at most MaxGrant
	// bytes.
	Grant []byte
	// Verify, OpReadSSD: sent as the header's FlagVerify (the node checks
	// the value before sending it); not part of the metadata.
	Verify bool
}

// Pins of a written object (Request.Pins), recorded with its key for a
// re-registration at a new master (Object).
const (
	PinSoft uint8 = 1 << 0
	PinHard uint8 = 1 << 1
)

// AppendMeta appends r's metadata encoding to b: OpWrite: offset u64,
// token u64, segment length u16, pins u8, grant length u8, grant, segment,
// key; OpReadRange: offset
// u64, length u64, token u64, grant length u8, grant, segment; OpReadSSD: length u64,
// grant length u8, grant, key. The trailing string runs to MetaLen.
func (r *Request) AppendMeta(b []byte) []byte {
	switch r.Op {
	case OpWrite:
		b = binary.LittleEndian.AppendUint64(b, r.Offset)
		b = binary.LittleEndian.AppendUint64(b, r.Token)
		b = binary.LittleEndian.AppendUint16(b, uint16(len(r.Segment)))
		b = append(b, r.Pins)
		b = append(append(b, uint8(len(r.Grant))), r.Grant...)
		b = append(b, r.Segment...)
		return append(b, r.Key...)
	case OpReadRange:
		b = binary.LittleEndian.AppendUint64(b, r.Offset)
		b = binary.LittleEndian.AppendUint64(b, r.Length)
		b = binary.LittleEndian.AppendUint64(b, r.Token)
		b = append(append(b, uint8(len(r.Grant))), r.Grant...)
		return append(b, r.Segment...)
	case OpReadSSD:
		b = binary.LittleEndian.AppendUint64(b, r.Length)
		b = append(append(b, uint8(len(r.Grant))), r.Grant...)
		return append(b, r.Key...)
	}
	return b
}

// ParseRequest decodes the metadata of a request frame of op. Key and
// Grant alias meta.
func ParseRequest(op Op, meta []byte) (Request, error) {
	r := Request{Op: op}
	need := 25
	switch op {
	case OpReadSSD:
		need = 9
	case OpWrite:
		need = 20
	}
	if len(meta) < need {
		return Request{}, frameErr(ErrFrame, "wire: %v metadata of %d bytes, at least %d needed", op, len(meta), need)
	}
	switch op {
	case OpWrite:
		return parseWrite(meta)
	case OpReadRange:
		r.Offset = binary.LittleEndian.Uint64(meta)
		r.Length = binary.LittleEndian.Uint64(meta[8:])
		r.Token = binary.LittleEndian.Uint64(meta[16:])
		rest, err := parseGrant(&r, meta[24:])
		if err != nil {
			return Request{}, err
		}
		if len(rest) > maxName {
			return Request{}, frameErr(ErrFrame, "wire: segment name of %d bytes, at most %d allowed", len(rest), maxName)
		}
		r.Segment = string(rest)
	case OpReadSSD:
		r.Length = binary.LittleEndian.Uint64(meta)
		rest, err := parseGrant(&r, meta[8:])
		if err != nil {
			return Request{}, err
		}
		if n := len(rest); n == 0 || n > keyspec.MaxLen {
			return Request{}, frameErr(ErrFrame, "wire: key of %d bytes (1..%d allowed)", n, keyspec.MaxLen)
		}
		r.Key = rest
	default:
		return Request{}, frameErr(ErrFrame, "wire: %v is not a request", op)
	}
	return r, nil
}

// parseGrant decodes a request's grant (length u8, bytes) at the
// start of b into r.Grant and returns what follows it.
func parseGrant(r *Request, b []byte) ([]byte, error) {
	n := int(b[0])
	if n > MaxGrant || n > len(b)-1 {
		return nil, frameErr(ErrFrame, "wire: %v grant of %d bytes in %d bytes of metadata (at most %d allowed)", r.Op, n, len(b)-1, MaxGrant)
	}
	if n > 0 {
		r.Grant = b[1 : 1+n]
	}
	return b[1+n:], nil
}

// parseWrite decodes OpWrite metadata (at least 20 bytes). Key and Grant
// alias meta.
func parseWrite(meta []byte) (Request, error) {
	r := Request{Op: OpWrite, Offset: binary.LittleEndian.Uint64(meta), Token: binary.LittleEndian.Uint64(meta[8:])}
	segLen := int(binary.LittleEndian.Uint16(meta[16:]))
	r.Pins = meta[18]
	rest, err := parseGrant(&r, meta[19:])
	if err != nil {
		return Request{}, err
	}
	switch {
	case segLen > maxName || segLen > len(rest):
		return Request{}, frameErr(ErrFrame, "wire: segment name of %d bytes in %d bytes of metadata (at most %d allowed)", segLen, len(rest), maxName)
	case len(rest)-segLen > keyspec.MaxLen:
		return Request{}, frameErr(ErrFrame, "wire: key of %d bytes, at most %d allowed", len(rest)-segLen, keyspec.MaxLen)
	case r.Pins&^(PinSoft|PinHard) != 0:
		return Request{}, frameErr(ErrFrame, "wire: unknown pin bits %#x", r.Pins)
	}
	r.Segment = string(rest[:segLen])
	if len(rest) > segLen {
		r.Key = rest[segLen:]
	}
	return r, nil
}

// ReadFrameHead reads one frame header and its metadata from r into hb
// (HeaderLen bytes) and meta (grown to MetaLen, reused). The payload, if
// any, is left in r for the caller to place. A stream that ends inside the
// header or the metadata is ErrShortFrame; one that ends before the
// header io.EOF.
func ReadFrameHead(r io.Reader, hb []byte, meta []byte) (Header, []byte, error) {
	if n, err := io.ReadFull(r, hb[:HeaderLen]); err != nil {
		if err == io.EOF {
			return Header{}, meta, io.EOF
		}
		return Header{}, meta, frameErr(ErrShortFrame, "wire: %d of %d header bytes, then %v", n, HeaderLen, err)
	}
	h, err := DecodeHeader(hb)
	if err != nil {
		return Header{}, meta, err
	}
	if cap(meta) < int(h.MetaLen) {
		meta = make([]byte, h.MetaLen, MaxMeta)
	}
	meta = meta[:h.MetaLen]
	if n, err := io.ReadFull(r, meta); err != nil {
		return Header{}, meta, frameErr(ErrShortFrame, "wire: %v frame: %d of %d metadata bytes, then %v", h.Op, n, h.MetaLen, err)
	}
	return h, meta, nil
}

// hello is what each side sends first on a data connection.
func hello() [HelloLen]byte {
	return [HelloLen]byte{DataMagic[0], DataMagic[1], DataMagic[2], DataMagic[3], DataVersion}
}

// checkHello validates the peer's hello. A data-plane hello of another
// protocol version is ErrFrame and errcode.ErrVersionMismatch, naming both
// versions (docs/design.md, "Format and protocol versions").
func checkHello(b []byte) error {
	if len(b) < HelloLen || string(b[:4]) != DataMagic || b[5] != 0 || b[6] != 0 || b[7] != 0 {
		return frameErr(ErrFrame, "wire: peer does not speak the data protocol (hello %q)", b)
	}
	if b[4] != DataVersion {
		return fmt.Errorf("wire: peer speaks data protocol version %d, this build version %d: %w: %w", b[4], DataVersion, ErrFrame, errcode.ErrVersionMismatch)
	}
	return nil
}
