package wire

import (
	"errors"
	"unsafe"

	"golang.org/x/sys/unix"
)

// errNoIovec: a readv with nothing to read into (a caller's bug).
var errNoIovec = errors.New("wire: readv into no bytes")

// readvFD is one non-blocking readv(2) of fd into iov (at most readvMaxIov
// non-empty parts are read; empty parts are skipped): errAgain when no
// bytes are ready, io.ErrUnexpectedEOF when the peer closed. The iovecs
// are built on the stack (unix.Readv allocates them on every call, a
// payload of 2 MiB makes eight calls).
func readvFD(fd uintptr, iov [][]byte) (int, error) {
	var vecs [readvMaxIov]unix.Iovec
	k := 0
	for _, b := range iov {
		if len(b) == 0 {
			continue
		}
		if k == len(vecs) {
			break
		}
		vecs[k].Base = &b[0]
		vecs[k].SetLen(len(b))
		k++
	}
	if k == 0 {
		return 0, errNoIovec
	}
	for {
		m, _, errno := unix.Syscall(unix.SYS_READV, fd, uintptr(unsafe.Pointer(&vecs[0])), uintptr(k))
		var err error
		if errno != 0 {
			err = errno
		}
		if n, again, err := readResult(int(m), err); !again {
			return n, err
		}
	}
}
