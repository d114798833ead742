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
		m, err := syscall.Read(int(fd), p)
		switch {
		case err == syscall.EINTR:
			continue
		case err == syscall.EAGAIN:
			return 0, errAgain
		case err != nil:
			return 0, err
		case m <= 0:
			return 0, io.ErrUnexpectedEOF
		}
		return m, nil
	}
}
