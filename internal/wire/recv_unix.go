//go:build unix

package wire

import (
	"io"
	"net"
	"syscall"
)

// rawConnOf returns c's descriptor for reads in place, or nil.
func rawConnOf(c net.Conn) syscall.RawConn {
	if scn, ok := c.(syscall.Conn); ok {
		if rc, err := scn.SyscallConn(); err == nil {
			return rc
		}
	}
	return nil
}

// readFD is one non-blocking read(2) of fd into p: errAgain when no bytes
// are ready, io.ErrUnexpectedEOF when the peer closed.
func readFD(fd uintptr, p []byte) (int, error) {
	for {
		if n, again, err := readResult(syscall.Read(int(fd), p)); !again {
			return n, err
		}
	}
}

// readResult is what a non-blocking read(2) or readv(2) that returned m
// and err means: again (interrupted: call it again), errAgain when no
// bytes are ready, io.ErrUnexpectedEOF when the peer closed, else m bytes
// or err.
func readResult(m int, err error) (n int, again bool, _ error) {
	switch {
	case err == syscall.EINTR:
		return 0, true, nil
	case err == syscall.EAGAIN:
		return 0, false, errAgain
	case err != nil:
		return 0, false, err
	case m <= 0:
		return 0, false, io.ErrUnexpectedEOF
	}
	return m, false, nil
}
