//go:build !unix

package wire

import (
	"errors"
	"net"
	"syscall"
)

// rawConnOf: without unix read(2), every write is received through a
// bounce buffer (receiveCopy).
func rawConnOf(net.Conn) syscall.RawConn { return nil }

// readFD is never called without a raw connection.
func readFD(uintptr, []byte) (int, error) {
	return 0, errors.New("wire: reads in place need a unix system")
}
