package wire

import (
	"bytes"
	"errors"
	"io"
	"testing"
)

// FuzzFrameDecoder feeds arbitrary bytes to the frame decoder, as a node or
// a client reads them off a socket: it must never panic, never hand out
// more metadata than MaxMeta, refuse with a wrapped sentinel, and whatever
// it accepts must encode back to the same bytes. The seed corpus is in
// testdata/fuzz/FuzzFrameDecoder (run by every go test).
func FuzzFrameDecoder(f *testing.F) {
	f.Add(encodeFrame(Header{Op: OpWrite, ID: 1, Flags: FlagCRC, CRC: 7}, (&Request{Op: OpWrite, Segment: "seg", Offset: 8, Token: 3}).AppendMeta(nil), []byte("abc")))
	f.Add(encodeFrame(Header{Op: OpReadSSD, ID: 2}, (&Request{Op: OpReadSSD, Key: []byte("k"), Length: 10}).AppendMeta(nil), nil))
	f.Add(encodeFrame(Header{Op: OpReadRange | ReplyBit, ID: 3, Status: -704}, []byte("not found"), nil))
	f.Add([]byte("TSDP\x01\x00\x00\x00"))
	f.Fuzz(func(t *testing.T, data []byte) {
		hb := make([]byte, HeaderLen)
		h, meta, err := ReadFrameHead(bytes.NewReader(data), hb, nil)
		if err != nil {
			if !errors.Is(err, ErrFrame) && !errors.Is(err, ErrShortFrame) && err != io.EOF {
				t.Fatalf("unexpected error kind: %v", err)
			}
			return
		}
		if len(meta) > MaxMeta || uint32(len(meta)) != h.MetaLen || h.PayloadLen > MaxPayload {
			t.Fatalf("accepted header %+v with %d bytes of metadata", h, len(meta))
		}
		again := make([]byte, HeaderLen)
		h.Encode(again)
		if !bytes.Equal(again, data[:HeaderLen]) {
			t.Fatalf("header %+v re-encodes to %x, read from %x", h, again, data[:HeaderLen])
		}
		if !bytes.Equal(meta, data[HeaderLen:HeaderLen+len(meta)]) {
			t.Fatal("metadata differs from the bytes read")
		}
		if h.Op&ReplyBit != 0 {
			return
		}
		r, err := ParseRequest(h.Op, meta)
		if err != nil {
			if !errors.Is(err, ErrFrame) {
				t.Fatalf("unexpected error kind: %v", err)
			}
			return
		}
		if back := r.AppendMeta(nil); !bytes.Equal(back, meta) {
			t.Fatalf("request %+v re-encodes to %x, read from %x", r, back, meta)
		}
	})
}
