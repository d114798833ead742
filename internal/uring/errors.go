package uring

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// Errors of package uring. Check them with errors.Is.
var (
	// ErrUnavailable: io_uring cannot be used in this process (no kernel
	// support, forbidden by the io_uring_disabled sysctl or a seccomp
	// policy, or the memory lock limit is too small). Setup failures of this
	// kind are returned as *SetupError, which matches ErrUnavailable.
	ErrUnavailable = errors.New("uring: io_uring unavailable")
	// ErrClosed: the ring was closed.
	ErrClosed = errors.New("uring: ring closed")
	// ErrQueueFull: the submission queue has no free entry; submit or wait
	// for completions first.
	ErrQueueFull = errors.New("uring: submission queue full")
	// ErrBadOp: an Op is malformed; the message names the field.
	ErrBadOp = errors.New("uring: invalid op")
	// ErrBadEntries: the requested ring size is out of range.
	ErrBadEntries = errors.New("uring: invalid ring size")
	// ErrNoFixedBuffers: a fixed-buffer op names a buffer index that is not
	// registered.
	ErrNoFixedBuffers = errors.New("uring: fixed buffer not registered")
	// ErrCQOverflow: the kernel dropped completions (CQ overflow without
	// IORING_FEAT_NODROP, or the overflow backlog could not be allocated).
	// The ring is unusable afterwards: buffers of lost completions can
	// never be released safely.
	ErrCQOverflow = errors.New("uring: completions lost to CQ overflow")
	// ErrBadBuffer: a buffer size is invalid or the buffer was freed.
	ErrBadBuffer = errors.New("uring: invalid buffer")
)

// SetupError is returned by New when io_uring_setup (or mapping the rings)
// fails in a way that means io_uring cannot be used here. It matches
// ErrUnavailable with errors.Is, and unwraps to the errno.
type SetupError struct {
	Errno  syscall.Errno
	Reason string // human explanation: sysctl value, memlock limit, ...
}

func (e *SetupError) Error() string {
	return fmt.Sprintf("uring: io_uring_setup: %v (%s)", e.Errno, e.Reason)
}

// Is makes a *SetupError match ErrUnavailable.
func (e *SetupError) Is(target error) bool { return target == ErrUnavailable }

// Unwrap returns the errno.
func (e *SetupError) Unwrap() error { return e.Errno }

// newSetupError classifies a setup errno. Only errnos that mean "io_uring is
// not usable here" become *SetupError; EINVAL and friends (bad parameters)
// are plain wrapped errors.
func newSetupError(op string, errno syscall.Errno) error {
	var reason string
	switch errno {
	case syscall.ENOSYS:
		reason = "kernel built without io_uring or syscall filtered"
	case syscall.EPERM, syscall.EACCES:
		reason = "forbidden"
		if b, err := os.ReadFile("/proc/sys/kernel/io_uring_disabled"); err == nil {
			switch strings.TrimSpace(string(b)) {
			case "1":
				reason = "kernel.io_uring_disabled=1 and process not in kernel.io_uring_group"
			case "2":
				reason = "kernel.io_uring_disabled=2"
			default:
				reason = "forbidden (seccomp or LSM policy; kernel.io_uring_disabled=" + strings.TrimSpace(string(b)) + ")"
			}
		}
	case syscall.ENOMEM:
		reason = "out of memory or RLIMIT_MEMLOCK too small for the rings"
		var rl unix.Rlimit
		if unix.Getrlimit(unix.RLIMIT_MEMLOCK, &rl) == nil {
			reason = fmt.Sprintf("out of memory or RLIMIT_MEMLOCK (%d bytes) too small for the rings", rl.Cur)
		}
	default:
		return fmt.Errorf("uring: %s: %w", op, errno)
	}
	return &SetupError{Errno: errno, Reason: op + ": " + reason}
}
