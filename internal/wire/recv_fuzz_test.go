package wire

import (
	"bytes"
	"errors"
	"io"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	grpccodes "google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tierstore/tierstore/internal/codes"
	"github.com/tierstore/tierstore/internal/rpcpb"
)

// fuzzLimitMax bounds the limits the fuzzer tries. The limit is the
// caller's (the object's size from the master): RecvValue trusts it, so a
// fuzzed limit of terabytes would only test the machine.
const fuzzLimitMax = 64 << 20

// FuzzRecvValue plays a peer's reply as an arbitrary chunk sequence: the
// first chunk's announced length, CRC and flag, chunk sizes cut from the
// data, header fields repeated (and lying) on later chunks, and an end that
// is io.EOF, a transport error or a gRPC status carrying any tierstore code.
// RecvValue must never panic, never allocate more than the limit (plus
// slack), accept only exactly the announced bytes within the limit, and
// refuse everything else with codes.ErrTransferFail, or return the
// transport's error mapped by codes.FromStatus. See docs/fuzzing.md.
func FuzzRecvValue(f *testing.F) {
	f.Add(uint64(5), uint32(7), true, int64(5), []byte("hello"), []byte{2, 3}, uint64(0), uint8(0), int32(0), "")
	f.Add(uint64(5), uint32(0), false, int64(4), []byte("hello"), []byte{5}, uint64(0), uint8(0), int32(0), "")
	f.Add(uint64(3), uint32(0), false, int64(10), []byte("hello"), []byte{1, 1, 1, 1, 1}, uint64(9), uint8(0), int32(0), "")
	f.Add(uint64(10), uint32(0), false, int64(10), []byte("hello"), []byte{5}, uint64(0), uint8(0), int32(0), "")
	f.Add(uint64(0), uint32(0), false, int64(0), []byte{}, []byte{}, uint64(0), uint8(1), int32(0), "")
	f.Add(uint64(4), uint32(1), true, int64(8), []byte("abcd"), []byte{0, 0, 0, 4}, uint64(0), uint8(2), int32(-704), "object not found")
	f.Add(uint64(4), uint32(1), true, int64(-1), []byte("abcd"), []byte{4}, uint64(0), uint8(2), int32(0), "")
	f.Add(uint64(1<<62), uint32(1), true, int64(fuzzLimitMax), []byte("abcd"), []byte{4}, uint64(0), uint8(3), int32(99999), "x")
	f.Fuzz(func(t *testing.T, total uint64, crc uint32, hasCRC bool, limit int64, data, cuts []byte,
		laterTotal uint64, end uint8, code int32, msg string) {
		if limit > fuzzLimitMax {
			limit %= fuzzLimitMax
		}
		chunks := cutChunks(data, cuts, total, crc, hasCRC, laterTotal)
		endErr := endError(end, code, msg)
		i := 0
		recv := func() (*rpcpb.PeerDataChunk, error) {
			if i < len(chunks) {
				i++
				return chunks[i-1], nil
			}
			i++
			return nil, endErr
		}
		var val []byte
		var gotCRC uint32
		var gotHas bool
		var err error
		n := allocatedBytes(func() { val, gotCRC, gotHas, err = RecvValue(recv, limit) })
		if bound := uint64(max(limit, 0)) + 64<<10; n > bound {
			t.Fatalf("RecvValue with limit %d (announced %d) allocated %d bytes", limit, total, n)
		}
		if i > len(chunks)+1 {
			t.Fatalf("RecvValue called recv %d times after the end of the stream", i-len(chunks)-1)
		}
		sent := concatData(chunks)
		clean := endErr == io.EOF && len(chunks) > 0
		wantOK := clean && limit >= 0 && total <= uint64(limit) && uint64(len(sent)) == total
		switch {
		case err == nil && !wantOK:
			t.Fatalf("accepted %d bytes announced as %d with limit %d (clean end %v)", len(val), total, limit, clean)
		case err == nil:
			if !bytes.Equal(val, sent) || cap(val) > int(limit) || gotCRC != crc || gotHas != hasCRC {
				t.Fatalf("accepted value differs: %d bytes cap %d crc %08x/%v", len(val), cap(val), gotCRC, gotHas)
			}
		case wantOK:
			t.Fatalf("refused a well-formed reply: %v", err)
		case val != nil:
			t.Fatalf("error %v with a value of %d bytes", err, len(val))
		case !errors.Is(err, codes.ErrTransferFail) && !(endErr != io.EOF && sameFailure(err, endErr)):
			t.Fatalf("refusal %v is neither a transfer failure nor the transport's error %v", err, endErr)
		}
	})
}

// cutChunks splits data into chunks whose sizes come from cuts (the rest
// goes in a last chunk). The first chunk carries the header; later chunks
// carry laterTotal as a lying total_len when it is not zero.
func cutChunks(data, cuts []byte, total uint64, crc uint32, hasCRC bool, laterTotal uint64) []*rpcpb.PeerDataChunk {
	var chunks []*rpcpb.PeerDataChunk
	for _, c := range cuts {
		n := min(int(c), len(data))
		chunks = append(chunks, &rpcpb.PeerDataChunk{Data: data[:n]})
		data = data[n:]
	}
	if len(data) > 0 || len(chunks) == 0 {
		chunks = append(chunks, &rpcpb.PeerDataChunk{Data: data})
	}
	chunks[0].TotalLen, chunks[0].Crc32C, chunks[0].HasCrc = total, crc, hasCRC
	for _, c := range chunks[1:] {
		c.TotalLen = laterTotal
	}
	return chunks
}

// endError is how the stream ends: io.EOF, a plain transport error, a gRPC
// status, or a gRPC status carrying a tierstore code (any number).
func endError(end uint8, code int32, msg string) error {
	switch end % 4 {
	case 1:
		return errors.New("wire test: connection reset")
	case 2:
		return status.Error(grpccodes.Unavailable, msg)
	case 3:
		st, err := status.New(grpccodes.Internal, msg).WithDetails(&errdetails.ErrorInfo{
			Domain: codes.Domain, Metadata: map[string]string{"code": strconv.Itoa(int(code))},
		})
		if err != nil {
			return status.Error(grpccodes.Internal, msg)
		}
		return st.Err()
	}
	return io.EOF
}

// sameFailure reports whether err is the transport error end as
// codes.FromStatus maps it: a non-nil error with its message.
func sameFailure(err, end error) bool {
	mapped := codes.FromStatus(end)
	return mapped != nil && codes.Of(err) == codes.Of(mapped) && strings.Contains(err.Error(), mapped.Error())
}

func concatData(chunks []*rpcpb.PeerDataChunk) []byte {
	var b []byte
	for _, c := range chunks {
		b = append(b, c.GetData()...)
	}
	return b
}

// allocatedBytes returns the heap bytes fn allocated (process-wide).
func allocatedBytes(fn func()) uint64 {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	fn()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// A peer that announces more than the limit is refused before anything of
// that size is allocated, and one that announces the limit and sends
// nothing costs at most the limit.
func TestRecvValueAllocatesAtMostTheLimit(t *testing.T) {
	huge := func() (*rpcpb.PeerDataChunk, error) { return &rpcpb.PeerDataChunk{TotalLen: 1 << 40}, nil }
	var err error
	if n := allocatedBytes(func() { _, _, _, err = RecvValue(huge, 1<<20) }); n > 64<<10 {
		t.Errorf("a 1 TiB announcement with a 1 MiB limit allocated %d bytes", n)
	}
	if !errors.Is(err, codes.ErrTransferFail) {
		t.Errorf("announcement over the limit: %v", err)
	}
	first := true
	silent := func() (*rpcpb.PeerDataChunk, error) {
		if first {
			first = false
			return &rpcpb.PeerDataChunk{TotalLen: 1 << 20}, nil
		}
		return nil, io.EOF
	}
	if n := allocatedBytes(func() { _, _, _, err = RecvValue(silent, 1<<20) }); n > 1<<20+64<<10 {
		t.Errorf("an empty reply announcing the limit allocated %d bytes", n)
	}
	if !errors.Is(err, codes.ErrTransferFail) {
		t.Errorf("announced 1 MiB, sent nothing: %v", err)
	}
}
