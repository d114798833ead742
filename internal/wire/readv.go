package wire

import (
	"bufio"
	"fmt"
	"io"
	"syscall"

	"github.com/tierstore/tierstore/internal/crc32c"
)

// readvMaxIov and readvMaxBytes bound one readv of a scattered payload:
// at most that many parts and bytes, so that the CRC32C computed over what
// one readv returned reads bytes still in the CPU's cache.
const (
	readvMaxIov   = 64
	readvMaxBytes = crcChunk * 2
)

// readPartsCRC fills parts in order from br and returns the CRC32C of the
// whole. Each part is read straight into (scatter). When raw is the socket
// under br and the payload has several parts, what br has buffered is
// taken first, then the rest comes with readv, up to readvMaxIov parts a
// call, instead of one read per part (a vLLM block is 64 parts of 32 KiB);
// readv is given exactly the payload's remaining bytes, so nothing after it
// leaves the socket. Otherwise the parts are read through br in chunks of
// crcChunk.
func readPartsCRC(br *bufio.Reader, raw syscall.RawConn, parts [][]byte) (uint32, error) {
	if raw == nil || len(parts) < 2 {
		return readPartsBuffered(br, parts)
	}
	s := scatter{parts: parts}
	var crc uint32
	for br.Buffered() > 0 && !s.done() {
		p := s.next(br.Buffered())
		n, _ := br.Read(p) // from the buffer only: it holds len(p) bytes
		crc = crc32c.Update(crc, p[:n])
		s.advance(n)
	}
	// One closure (and its variables) for the payload, not one per readv.
	var iovs [readvMaxIov][]byte
	iov := iovs[:0]
	var n int
	var rerr error
	readv := func(fd uintptr) bool {
		n, rerr = readvFD(fd, iov)
		return rerr != errAgain
	}
	for !s.done() {
		iov = s.iovecs(iov[:0])
		err := raw.Read(readv)
		if err == nil {
			err = rerr
		}
		if err != nil {
			return 0, fmt.Errorf("%d of %d payload bytes, then %w", s.got, partsLen(parts), err)
		}
		for left := n; left > 0; {
			p := s.next(left)
			crc = crc32c.Update(crc, p)
			s.advance(len(p))
			left -= len(p)
		}
	}
	return crc, nil
}

// readPartsBuffered is readPartsCRC through br alone.
func readPartsBuffered(r io.Reader, parts [][]byte) (uint32, error) {
	var crc uint32
	var done int64
	for _, p := range parts {
		for got := 0; got < len(p); {
			end := min(got+crcChunk, len(p))
			n, err := io.ReadFull(r, p[got:end])
			crc = crc32c.Update(crc, p[got:got+n])
			got += n
			if err != nil {
				return 0, fmt.Errorf("%d of %d payload bytes, then %w", done+int64(got), partsLen(parts), err)
			}
		}
		done += int64(len(p))
	}
	return crc, nil
}

// scatter is a position in a list of parts being filled in order.
type scatter struct {
	parts [][]byte
	i     int   // the part being filled
	off   int   // bytes of parts[i] filled
	got   int64 // bytes filled in all
}

// done reports whether every part is full (empty parts count as full).
func (s *scatter) done() bool {
	for s.i < len(s.parts) && s.off == len(s.parts[s.i]) {
		s.i, s.off = s.i+1, 0
	}
	return s.i == len(s.parts)
}

// next is the unfilled rest of the current part, at most max bytes. The
// caller checked done.
func (s *scatter) next(max int) []byte {
	s.done()
	p := s.parts[s.i][s.off:]
	return p[:min(len(p), max)]
}

// advance records n more bytes filled into the current part.
func (s *scatter) advance(n int) {
	s.off += n
	s.got += int64(n)
}

// iovecs appends to iov the unfilled parts from the current one on, at
// most readvMaxIov of them and readvMaxBytes in all.
func (s *scatter) iovecs(iov [][]byte) [][]byte {
	s.done()
	room := readvMaxBytes
	for i, off := s.i, s.off; i < len(s.parts) && len(iov) < readvMaxIov && room > 0; i, off = i+1, 0 {
		p := s.parts[i][off:]
		if len(p) == 0 {
			continue
		}
		p = p[:min(len(p), room)]
		iov = append(iov, p)
		room -= len(p)
	}
	return iov
}
