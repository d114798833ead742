package wire

import (
	"io"

	"golang.org/x/sys/unix"
)

// readvFD is one non-blocking readv(2) of fd into iov: errAgain when no
// bytes are ready, io.ErrUnexpectedEOF when the peer closed.
func readvFD(fd uintptr, iov [][]byte) (int, error) {
	for {
		m, err := unix.Readv(int(fd), iov)
		switch {
		case err == unix.EINTR:
			continue
		case err == unix.EAGAIN:
			return 0, errAgain
		case err != nil:
			return 0, err
		case m <= 0:
			return 0, io.ErrUnexpectedEOF
		}
		return m, nil
	}
}
