package wire

import "golang.org/x/sys/unix"

// readvFD is one non-blocking readv(2) of fd into iov: errAgain when no
// bytes are ready, io.ErrUnexpectedEOF when the peer closed.
func readvFD(fd uintptr, iov [][]byte) (int, error) {
	for {
		if n, again, err := readResult(unix.Readv(int(fd), iov)); !again {
			return n, err
		}
	}
}
