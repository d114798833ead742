package wire

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/tierstore/tierstore/internal/errcode"
	"github.com/tierstore/tierstore/internal/keyspec"
)

func encodeFrame(h Header, meta, payload []byte) []byte {
	h.MetaLen, h.PayloadLen = uint32(len(meta)), uint64(len(payload))
	b := make([]byte, HeaderLen, HeaderLen+len(meta)+len(payload))
	h.Encode(b)
	return append(append(b, meta...), payload...)
}

func TestFrameRoundTrip(t *testing.T) {
	for _, r := range []Request{
		{Op: OpWrite, Segment: "seg-1", Offset: 1 << 40, Token: 77},
		{Op: OpWrite, Segment: "seg-1", Offset: 8, Token: 78, Key: []byte("layer0/blk42"), Pins: PinSoft | PinHard},
		{Op: OpReadRange, Segment: "seg-2", Offset: 4096, Length: 1 << 20, Token: 7},
		{Op: OpReadSSD, Key: []byte("layer0/blk42"), Length: 256 << 10},
	} {
		meta := r.AppendMeta(nil)
		h := Header{Op: r.Op, ID: 9, CRC: 0xdeadbeef, Flags: FlagCRC}
		frame := encodeFrame(h, meta, []byte("payload"))
		got, m, err := ReadFrameHead(bytes.NewReader(frame), make([]byte, HeaderLen), nil)
		if err != nil {
			t.Fatalf("%v: %v", r.Op, err)
		}
		if got.Op != r.Op || got.ID != 9 || got.CRC != 0xdeadbeef || got.PayloadLen != 7 || !bytes.Equal(m, meta) {
			t.Fatalf("%v: header %+v meta %q", r.Op, got, m)
		}
		back, err := ParseRequest(got.Op, m)
		if err != nil {
			t.Fatal(err)
		}
		if back.Segment != r.Segment || back.Offset != r.Offset || back.Length != r.Length || back.Token != r.Token || back.Pins != r.Pins || !bytes.Equal(back.Key, r.Key) {
			t.Fatalf("%v: request %+v, want %+v", r.Op, back, r)
		}
	}
	// A reply carries a status; a request may not.
	h := Header{Op: OpReadSSD | ReplyBit, Status: errcode.ObjectNotFound}
	got, _, err := ReadFrameHead(bytes.NewReader(encodeFrame(h, []byte("gone"), nil)), make([]byte, HeaderLen), nil)
	if err != nil || got.Status != errcode.ObjectNotFound {
		t.Fatalf("error reply: %+v %v", got, err)
	}
}

// Every malformed header is refused with ErrFrame (and TransferFail), a
// stream that ends inside a frame with ErrShortFrame, and a stream that
// ends between frames with io.EOF.
func TestFrameRefusesMalformed(t *testing.T) {
	good := encodeFrame(Header{Op: OpReadRange, ID: 1}, (&Request{Op: OpReadRange, Segment: "s", Length: 1}).AppendMeta(nil), nil)
	mut := func(f func(b []byte)) []byte {
		b := bytes.Clone(good)
		f(b)
		return b
	}
	cases := map[string]struct {
		in   []byte
		want error
	}{
		"bad magic":       {mut(func(b []byte) { b[0] = 'X' }), ErrFrame},
		"unknown op":      {mut(func(b []byte) { b[2] = 9 }), ErrFrame},
		"unknown flags":   {mut(func(b []byte) { b[3] = 0x40 }), ErrFrame},
		"verify, not ssd": {mut(func(b []byte) { b[3] = FlagVerify }), ErrFrame},
		"verify on ssd":   {mut(func(b []byte) { b[2], b[3] = byte(OpReadSSD), FlagVerify }), nil},
		"verify+crc ssd":  {mut(func(b []byte) { b[2], b[3] = byte(OpReadSSD), FlagVerify|FlagCRC }), nil},
		"more, ssd":       {mut(func(b []byte) { b[2], b[3] = byte(OpReadSSD), FlagVerify|0x04 }), ErrFrame},
		"reserved":        {mut(func(b []byte) { b[21] = 1 }), ErrFrame},
		"huge meta":       {mut(func(b []byte) { b[18] = 1 }), ErrFrame},
		"huge payload":    {mut(func(b []byte) { b[31] = 1 }), ErrFrame},
		"status in req":   {mut(func(b []byte) { b[8] = 1 }), ErrFrame},
		"short header":    {good[:HeaderLen-1], ErrShortFrame},
		"short meta":      {good[:len(good)-1], ErrShortFrame},
		"empty stream":    {nil, io.EOF},
		"one header byte": {good[:1], ErrShortFrame},
		"header, no meta": {good[:HeaderLen], ErrShortFrame},
		"zero header":     {make([]byte, HeaderLen), ErrFrame},
		"another op":      {mut(func(b []byte) { b[2] = byte(OpWrite) }), nil},
	}
	for name, c := range cases {
		_, _, err := ReadFrameHead(bytes.NewReader(c.in), make([]byte, HeaderLen), nil)
		if c.want == nil {
			if err != nil {
				t.Errorf("%s: %v", name, err)
			}
			continue
		}
		if !errors.Is(err, c.want) {
			t.Errorf("%s: got %v, want %v", name, err, c.want)
		}
		if c.want != io.EOF && !errors.Is(err, errcode.ErrTransferFail) {
			t.Errorf("%s: %v does not wrap TRANSFER_FAIL", name, err)
		}
	}
}

func TestParseRequestRefusesMalformed(t *testing.T) {
	long := make([]byte, 25+maxName+1)
	grant := make([]byte, 9)
	grant[8] = MaxGrant + 1
	for name, c := range map[string]struct {
		op   Op
		meta []byte
	}{
		"short write":   {OpWrite, make([]byte, 19)},
		"write grant":   {OpWrite, append(make([]byte, 19), MaxGrant+1)},
		"cut wgrant":    {OpWrite, append(make([]byte, 19), 24, 1, 2)},
		"short range":   {OpReadRange, make([]byte, 24)},
		"long segment":  {OpReadRange, long},
		"empty key":     {OpReadSSD, make([]byte, 9)},
		"long key":      {OpReadSSD, make([]byte, 9+keyspec.MaxLen+1)},
		"long grant":    {OpReadSSD, append(grant, make([]byte, MaxGrant+2)...)},
		"cut grant":     {OpReadSSD, []byte{0, 0, 0, 0, 0, 0, 0, 0, 24, 1, 2}},
		"reply as req":  {OpReadSSD | ReplyBit, make([]byte, 9)},
		"short ssd req": {OpReadSSD, make([]byte, 7)},
	} {
		if _, err := ParseRequest(c.op, c.meta); !errors.Is(err, ErrFrame) {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// A request's grant travels in its metadata (reads since data plane
// version 2, writes since 3) and comes back as sent; none stays none.
func TestRequestGrantRoundTrip(t *testing.T) {
	g := bytes.Repeat([]byte{7}, 24)
	for _, r := range []Request{
		{Op: OpReadRange, Segment: "seg", Offset: 4096, Length: 10, Grant: g},
		{Op: OpReadRange, Segment: "seg", Offset: 4096, Length: 10},
		{Op: OpReadSSD, Key: []byte("k"), Length: 10, Grant: g},
		{Op: OpReadSSD, Key: []byte("k"), Length: 10},
		{Op: OpWrite, Segment: "seg", Offset: 4096, Token: 99, Pins: PinSoft, Key: []byte("k"), Grant: g},
		{Op: OpWrite, Segment: "seg", Offset: 4096, Token: 99, Key: []byte("k")},
		{Op: OpWrite, Segment: "seg", Offset: 4096, Token: 99, Grant: g},
	} {
		got, err := ParseRequest(r.Op, r.AppendMeta(nil))
		if err != nil || !bytes.Equal(got.Grant, r.Grant) || got.Segment != r.Segment || !bytes.Equal(got.Key, r.Key) || got.Offset != r.Offset || got.Length != r.Length ||
			got.Token != r.Token || got.Pins != r.Pins {
			t.Errorf("%v with grant %x: parsed %+v, %v", r.Op, r.Grant, got, err)
		}
	}
}

func TestHello(t *testing.T) {
	h := hello()
	if err := checkHello(h[:]); err != nil {
		t.Fatal(err)
	}
	for _, bad := range [][]byte{[]byte("PRI * HT"), {'T', 'S', 'D', 'P', 1, 0, 0, 0}, {'T', 'S', 'D', 'P', 2, 0, 0, 1}, []byte("TSDP")} {
		if err := checkHello(bad); !errors.Is(err, ErrFrame) {
			t.Errorf("hello %q: %v", bad, err)
		}
	}
	other := []byte{'T', 'S', 'D', 'P', DataVersion + 1, 0, 0, 0}
	if err := checkHello(other); !errors.Is(err, errcode.ErrVersionMismatch) || !strings.Contains(err.Error(), fmt.Sprintf("version %d, this build version %d", DataVersion+1, DataVersion)) {
		t.Errorf("hello of another version: %v", err)
	}
	// The HTTP/2 preface must never look like a data connection.
	if string("PRI * HTTP/2.0"[:len(DataMagic)]) == DataMagic {
		t.Fatal("DataMagic collides with the HTTP/2 preface")
	}
}

func TestBufPool(t *testing.T) {
	for _, n := range []int{0, 1, 64 << 10, 64<<10 + 1, 1 << 20, 3<<20 + 5, 64 << 20, 64<<20 + 1} {
		p := getBuf(n)
		if len(*p) != n {
			t.Fatalf("getBuf(%d): len %d", n, len(*p))
		}
		if c := classOf(n); c >= 0 && cap(*p) != 1<<(c+minClassShift) {
			t.Fatalf("getBuf(%d): cap %d not its class", n, cap(*p))
		}
		putBuf(p)
		q := getBuf(n)
		if len(*q) != n {
			t.Fatalf("reused getBuf(%d): len %d", n, len(*q))
		}
		putBuf(q)
	}
	if classOf(64<<20+1) != -1 || classOf(1) != 0 || classOf(64<<10+1) != 1 {
		t.Fatal("size classes")
	}
}
