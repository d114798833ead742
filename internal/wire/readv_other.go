//go:build !linux

package wire

// readvFD without readv(2): one read into the first part (readFD).
func readvFD(fd uintptr, iov [][]byte) (int, error) { return readFD(fd, iov[0]) }
