// Package uring is tierstore's own minimal io_uring ring, written directly
// over the io_uring_setup, io_uring_enter and io_uring_register system calls
// (golang.org/x/sys/unix; the go-uring style modules are not used).
//
// It supports the opcodes the backend needs: NOP (tests), READ, WRITE,
// READV, WRITEV, FSYNC (optionally DATASYNC) and READ_FIXED / WRITE_FIXED
// over registered buffers. What the kernel supports is probed at run time
// with IORING_REGISTER_PROBE (Ring.Probe, ProbeKernel), never inferred from
// the kernel version.
//
// # Memory
//
// The SQ ring, CQ ring and SQE array are mapped with the offsets
// io_uring_setup returns (one mapping for both rings when the kernel reports
// IORING_FEAT_SINGLE_MMAP). Head and tail words shared with the kernel are
// only read and written with sync/atomic. I/O data should live in Buffers:
// page-aligned anonymous mappings outside the Go heap, suitable for O_DIRECT.
// Go heap memory works too (the collector never moves heap objects), but it
// is not aligned.
//
// # Invariants
//
//   - Everything the kernel may touch for a request (its buffer, its iovec
//     array, its tag) is referenced from the ring's in-flight table, keyed by
//     user_data, from Prepare until its completion is reaped. No pointer the
//     kernel holds is only a uintptr.
//   - Completions are never lost silently: when the CQ is full the kernel
//     (IORING_FEAT_NODROP) queues them in its overflow list and sets
//     IORING_SQ_CQ_OVERFLOW; the ring drains the CQ and flushes the backlog
//     with io_uring_enter(GETEVENTS). If the kernel reports dropped
//     completions (EBADR, or the overflow counter moving without NODROP) the
//     ring fails with ErrCQOverflow for good.
//   - io_uring_enter is retried on EINTR with the count of SQEs the kernel
//     has not consumed yet; EBUSY/EAGAIN make the ring reap and try again.
//   - Close waits for every request in flight before unmapping.
//
// # Errors
//
// When io_uring_setup fails because io_uring cannot be used here (ENOSYS,
// EPERM/EACCES from the kernel.io_uring_disabled sysctl or a seccomp policy,
// ENOMEM from memory or RLIMIT_MEMLOCK), New returns a *SetupError, which
// matches ErrUnavailable; callers fall back to plain system calls.
//
// # Concurrency
//
// A Ring has no lock. It is owned by one goroutine at a time, which should
// hold runtime.LockOSThread while requests are in flight so that submitting
// and reaping happen on one thread. Ownership may move between goroutines
// through a channel (which orders the memory accesses) only while nothing is
// in flight. Different rings share nothing. Buffers are not safe for
// concurrent use either.
package uring
