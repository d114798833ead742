package wire

import (
	"errors"
	"fmt"
	"io"

	"github.com/tierstore/tierstore/internal/crc32c"
)

// RangeWriter receives one write's payload in place, in the node's memory
// (DataHandler.BeginWrite). The data server calls it from one goroutine.
type RangeWriter interface {
	// Fill calls fill once with the range's bytes from pos (0 <= pos < n)
	// to its end, provided the put still owns them, and returns what fill
	// returns; when the put no longer owns them it returns an error
	// without calling fill. fill stores up to len(dst) bytes at the start
	// of dst and returns how many. fill runs under the node's ownership
	// lock: it must not block (it takes what the socket already holds).
	Fill(pos int64, fill func(dst []byte) (int, error)) (int, error)
	// Commit ends a write whose payload arrived whole and matched the
	// sender's CRC32C, crc.
	Commit(crc uint32)
	// Abort ends a write that failed (short, wrong CRC32C, refused
	// mid-payload): nothing is recorded. The bytes that arrived stay in
	// the put's own range, which no reader is given before the put
	// completes, and a put whose write failed is never completed.
	Abort()
}

// errAgain: the socket holds no bytes yet (fill's answer when a read
// would block; the caller waits for the socket outside the lock).
var errAgain = errors.New("wire: no bytes ready")

// receive reads a write's n-byte payload into w: first what the
// connection's buffer already holds, then straight from the socket into
// w's memory (syscall reads of at most crcChunk bytes, each made only when
// bytes are ready, so that w's lock is never held across a wait). It
// returns the payload bytes consumed from the connection (all stored,
// except a chunk receiveCopy read and w refused), their CRC32C (computed chunk by chunk right
// after each lands, while in cache), err when w refused the rest (the
// remainder is still unread on the connection) and cerr when the
// connection failed.
func (sc *serverConn) receive(w RangeWriter, n int64) (got int64, crc uint32, err, cerr error) {
	for got < n && sc.br.Buffered() > 0 {
		k, ferr := w.Fill(got, func(dst []byte) (int, error) {
			m, _ := sc.br.Read(dst[:min(len(dst), sc.br.Buffered(), crcChunk)]) // from the buffer: never blocks
			crc = crc32c.Update(crc, dst[:m])
			return m, nil
		})
		got += int64(k)
		if ferr != nil {
			return got, crc, ferr, nil
		}
	}
	if rc, ok := sc.c.(*recordConn); ok {
		return receiveRecords(rc, w, n, got, crc)
	}
	if sc.raw == nil {
		return sc.receiveCopy(w, n, got, crc)
	}
	for got < n {
		var k int
		var ferr, ioErr error
		rerr := sc.raw.Read(func(fd uintptr) bool {
			ioErr = nil
			k, ferr = w.Fill(got, func(dst []byte) (int, error) {
				m, err := readFD(fd, dst[:min(len(dst), crcChunk)])
				if err != nil {
					ioErr = err
					return 0, err
				}
				crc = crc32c.Update(crc, dst[:m])
				return m, nil
			})
			return ioErr != errAgain // not ready: wait for the socket, then call again
		})
		got += int64(k)
		switch {
		case rerr != nil:
			return got, crc, nil, rerr
		case ioErr != nil:
			return got, crc, nil, ioErr
		case ferr != nil:
			return got, crc, ferr, nil
		}
	}
	return got, crc, nil, nil
}

// receiveCopy is receive's path for a connection without a descriptor
// (a test's in-memory pipe): each chunk is read into a bounce buffer
// outside w's lock, then copied in.
func (sc *serverConn) receiveCopy(w RangeWriter, n, got int64, crc uint32) (int64, uint32, error, error) {
	bp := getBuf(int(min(n-got, crcChunk)))
	defer putBuf(bp)
	for got < n {
		b := (*bp)[:min(n-got, int64(len(*bp)))]
		if _, err := io.ReadFull(sc.br, b); err != nil {
			return got, crc, nil, fmt.Errorf("%w after %d bytes", err, got)
		}
		k, err := w.Fill(got, func(dst []byte) (int, error) {
			m := copy(dst, b)
			crc = crc32c.Update(crc, dst[:m])
			return m, nil
		})
		if err != nil {
			// b was read off the connection already: count it as consumed.
			return got + int64(len(b)), crc, err, nil
		}
		got += int64(k)
	}
	return got, crc, nil, nil
}

// receiveRecords is receive's path over the record layer (TLS, record.go):
// each record is read off the socket outside w's lock (ready), then opened
// straight into w's memory under it (fill), and checksummed there.
func receiveRecords(rc *recordConn, w RangeWriter, n, got int64, crc uint32) (int64, uint32, error, error) {
	for got < n {
		if err := rc.ready(); err != nil {
			return got, crc, nil, fmt.Errorf("%w after %d bytes", err, got)
		}
		var ioErr error
		k, err := w.Fill(got, func(dst []byte) (int, error) {
			m, err := rc.fill(dst[:min(int64(len(dst)), n-got)])
			if err != nil {
				ioErr = err
				return 0, err
			}
			crc = crc32c.Update(crc, dst[:m])
			return m, nil
		})
		got += int64(k)
		switch {
		case ioErr != nil:
			return got, crc, nil, ioErr
		case err != nil:
			return got, crc, err, nil
		}
	}
	return got, crc, nil, nil
}
