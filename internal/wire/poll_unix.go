//go:build unix

package wire

import (
	"time"

	"golang.org/x/sys/unix"
)

// ownSupported: own connections wait with poll(2).
const ownSupported = true

// pollIn waits up to d for fd to be readable (or hung up: the read that
// follows says how). EINTR is a wake like any other.
func pollIn(fd uintptr, d time.Duration) error {
	ms := int((d + time.Millisecond - 1) / time.Millisecond)
	if ms < 0 {
		ms = 0
	}
	fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	_, err := unix.Poll(fds, ms)
	if err == unix.EINTR {
		err = nil
	}
	return err
}

// pollReady reports whether fd has input, a hang-up or an error pending,
// without waiting.
func pollReady(fd uintptr) bool {
	fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	for {
		n, err := unix.Poll(fds, 0)
		if err == unix.EINTR {
			continue
		}
		return err != nil || n > 0 && fds[0].Revents != 0
	}
}
