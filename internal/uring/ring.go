package uring

import (
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Limits of the kernel (IORING_MAX_ENTRIES, IORING_MAX_CQ_ENTRIES).
const (
	MaxEntries   = 32768
	MaxCQEntries = 2 * MaxEntries
)

// Config sizes a ring.
type Config struct {
	// Entries is the submission queue size; the kernel rounds it up to a
	// power of two. 1 ..= MaxEntries.
	Entries uint32
	// CQEntries is the completion queue size; 0 takes the kernel default
	// (twice the SQ size). When set it must be >= Entries and
	// <= MaxCQEntries.
	CQEntries uint32
}

// Op describes one operation to submit. Exactly the fields its Opcode uses
// are read; the others must be zero.
type Op struct {
	Opcode Opcode
	// Fd is the file descriptor (all opcodes but NOP).
	Fd int
	// Off is the file offset (READ*, WRITE*).
	Off int64
	// Buf is the memory of READ, WRITE, READ_FIXED and WRITE_FIXED. For the
	// fixed opcodes it must lie inside registered buffer BufIndex. For
	// O_DIRECT it must be aligned: use a Buffer.
	Buf []byte
	// Bufs are the iovecs of READV and WRITEV.
	Bufs [][]byte
	// BufIndex names the registered buffer of READ_FIXED and WRITE_FIXED.
	BufIndex int
	// Datasync makes FSYNC an fdatasync.
	Datasync bool
	// Tag is returned untouched in the Completion; the ring keeps it
	// reachable until then.
	Tag any
}

// Completion is one reaped completion queue entry.
type Completion struct {
	UserData uint64
	Opcode   Opcode
	// Res is the result: bytes transferred, 0, or -errno.
	Res   int32
	Flags uint32
	Tag   any
}

// Err is nil for a successful completion and the errno otherwise.
func (c Completion) Err() error {
	if c.Res < 0 {
		return syscall.Errno(-c.Res)
	}
	return nil
}

// Stats counts ring events since New.
type Stats struct {
	Submitted       uint64 // SQEs consumed by the kernel
	Completed       uint64 // CQEs reaped
	Enters          uint64 // io_uring_enter calls that returned
	EINTR           uint64 // io_uring_enter calls retried after EINTR
	Busy            uint64 // EBUSY/EAGAIN answers (CQ backlog, no memory)
	OverflowFlushes uint64 // times the CQ overflow flag made us flush
	// ByOpcode counts reaped completions per opcode (opcodes < 64).
	ByOpcode [64]uint64
}

// inflight keeps everything the kernel may touch for one request reachable
// until its completion is reaped.
type inflight struct {
	op   Opcode
	buf  []byte
	bufs [][]byte
	iov  []unix.Iovec
	tag  any
}

// Ring is one io_uring instance: its submission and completion rings mapped
// into this process, and the table of requests in flight.
//
// A Ring is owned by one goroutine at a time and is not safe for concurrent
// use (there is no lock in it at all). The owner should hold
// runtime.LockOSThread while requests are in flight, so that submission and
// completion reaping (and the kernel task work that posts completions) happen
// on one thread; ownership may pass to another goroutine through a channel
// only when nothing is in flight.
type Ring struct {
	fd       int
	features uint32
	sqMem    []byte // SQ ring mapping (also the CQ ring with FeatSingleMmap)
	cqMem    []byte // CQ ring mapping when separate, else nil
	sqeMem   []byte // SQE array mapping

	// Shared with the kernel; only touched with sync/atomic.
	sqHead, sqTail, sqFlags *uint32
	cqHead, cqTail, cqOver  *uint32
	sqMask, cqMask          uint32
	sqEntries, cqEntries    uint32
	sqArray                 []uint32
	sqes                    []sqe
	cqes                    []cqe

	tail     uint32 // our SQ tail: SQEs prepared so far
	nextID   uint64
	inflight map[uint64]inflight // prepared or submitted, not yet reaped
	done     []Completion        // reaped, not yet handed to the owner
	fixed    [][]byte            // registered buffers, by index
	overSeen uint32              // last value of the CQ overflow counter
	err      error               // sticky failure (ErrCQOverflow)
	closed   bool
	// abandonedAtClose: Close left requests in flight (see Abandoned).
	abandonedAtClose bool
	stats            Stats
}

// abandoned holds the in-flight tables of rings closed with requests whose
// completion never arrived (see Close); it only grows.
var abandoned struct {
	mu     sync.Mutex // protects tables
	tables []map[uint64]inflight
}

func abandon(t map[uint64]inflight) {
	abandoned.mu.Lock()
	abandoned.tables = append(abandoned.tables, t)
	abandoned.mu.Unlock()
}

// Abandoned reports whether Close had to give up on requests still in
// flight. Their buffers are then leaked on purpose: callers must not unmap
// or reuse memory of a ring whose Close returned with Abandoned() true.
func (r *Ring) Abandoned() bool { return r.closed && r.abandonedAtClose }

// New creates a ring. When io_uring cannot be used in this process the error
// is a *SetupError matching ErrUnavailable.
func New(cfg Config) (*Ring, error) {
	if cfg.Entries == 0 || cfg.Entries > MaxEntries {
		return nil, fmt.Errorf("%w: Entries %d not in 1..%d", ErrBadEntries, cfg.Entries, MaxEntries)
	}
	var p params
	if cfg.CQEntries != 0 {
		if cfg.CQEntries < cfg.Entries || cfg.CQEntries > MaxCQEntries {
			return nil, fmt.Errorf("%w: CQEntries %d not in Entries(%d)..%d", ErrBadEntries, cfg.CQEntries, cfg.Entries, MaxCQEntries)
		}
		p.Flags |= setupCQSize
		p.CQEntries = cfg.CQEntries
	}
	fd, _, errno := unix.Syscall6(unix.SYS_IO_URING_SETUP, uintptr(cfg.Entries), uintptr(unsafe.Pointer(&p)), 0, 0, 0, 0)
	if errno != 0 {
		return nil, newSetupError("io_uring_setup", errno)
	}
	r := &Ring{fd: int(fd), features: p.Features, inflight: make(map[uint64]inflight)}
	if err := r.mapRings(&p); err != nil {
		r.unmap()
		unix.Close(r.fd)
		return nil, err
	}
	return r, nil
}

func (r *Ring) mapRings(p *params) error {
	sqSize := int(p.SQOff.Array) + int(p.SQEntries)*4
	cqSize := int(p.CQOff.CQEs) + int(p.CQEntries)*int(unsafe.Sizeof(cqe{}))
	prot := unix.PROT_READ | unix.PROT_WRITE
	flags := unix.MAP_SHARED | unix.MAP_POPULATE
	mapErr := func(what string, err error) error {
		if errno, ok := err.(syscall.Errno); ok && (errno == unix.ENOMEM || errno == unix.EPERM) {
			return newSetupError("mmap "+what, errno)
		}
		return fmt.Errorf("uring: mmap %s: %w", what, err)
	}
	var err error
	if p.Features&FeatSingleMmap != 0 {
		r.sqMem, err = unix.Mmap(r.fd, offSQRing, max(sqSize, cqSize), prot, flags)
		if err != nil {
			return mapErr("rings", err)
		}
	} else {
		if r.sqMem, err = unix.Mmap(r.fd, offSQRing, sqSize, prot, flags); err != nil {
			return mapErr("sq ring", err)
		}
		if r.cqMem, err = unix.Mmap(r.fd, offCQRing, cqSize, prot, flags); err != nil {
			return mapErr("cq ring", err)
		}
	}
	nSQE := int(p.SQEntries)
	if r.sqeMem, err = unix.Mmap(r.fd, offSQEs, nSQE*int(unsafe.Sizeof(sqe{})), prot, flags); err != nil {
		return mapErr("sqes", err)
	}
	cqMem := r.sqMem
	if r.cqMem != nil {
		cqMem = r.cqMem
	}
	u32 := func(mem []byte, off uint32) *uint32 { return (*uint32)(unsafe.Pointer(&mem[off])) }
	r.sqHead = u32(r.sqMem, p.SQOff.Head)
	r.sqTail = u32(r.sqMem, p.SQOff.Tail)
	r.sqFlags = u32(r.sqMem, p.SQOff.Flags)
	r.sqMask = *u32(r.sqMem, p.SQOff.RingMask)
	r.sqEntries = *u32(r.sqMem, p.SQOff.RingEntries)
	r.sqArray = unsafe.Slice(u32(r.sqMem, p.SQOff.Array), p.SQEntries)
	r.sqes = unsafe.Slice((*sqe)(unsafe.Pointer(&r.sqeMem[0])), nSQE)
	r.cqHead = u32(cqMem, p.CQOff.Head)
	r.cqTail = u32(cqMem, p.CQOff.Tail)
	r.cqOver = u32(cqMem, p.CQOff.Overflow)
	r.cqMask = *u32(cqMem, p.CQOff.RingMask)
	r.cqEntries = *u32(cqMem, p.CQOff.RingEntries)
	r.cqes = unsafe.Slice((*cqe)(unsafe.Pointer(&cqMem[p.CQOff.CQEs])), p.CQEntries)
	r.tail = atomic.LoadUint32(r.sqTail)
	r.overSeen = atomic.LoadUint32(r.cqOver)
	return nil
}

func (r *Ring) unmap() {
	for _, m := range []*[]byte{&r.sqeMem, &r.cqMem, &r.sqMem} {
		if *m != nil {
			unix.Munmap(*m)
			*m = nil
		}
	}
	r.sqes, r.cqes, r.sqArray = nil, nil, nil
}

// Features returns the IORING_FEAT_* bits the kernel reported.
func (r *Ring) Features() uint32 { return r.features }

// SQEntries and CQEntries are the queue sizes the kernel chose.
func (r *Ring) SQEntries() int { return int(r.sqEntries) }

// CQEntries is the completion queue size.
func (r *Ring) CQEntries() int { return int(r.cqEntries) }

// InFlight is the number of requests prepared or submitted whose completion
// has not been reaped yet.
func (r *Ring) InFlight() int { return len(r.inflight) }

// Stats returns the ring's counters.
func (r *Ring) Stats() Stats { return r.stats }

// SQSpace is the number of SQEs that can be prepared before ErrQueueFull.
func (r *Ring) SQSpace() int {
	if r.closed {
		return 0
	}
	return int(r.sqEntries - (r.tail - atomic.LoadUint32(r.sqHead)))
}

// Prepare validates op and queues it in the submission ring without
// entering the kernel. It returns the op's user_data. The buffers of op stay
// referenced by the ring until its completion is reaped.
func (r *Ring) Prepare(op Op) (uint64, error) {
	if r.closed {
		return 0, ErrClosed
	}
	if r.err != nil {
		return 0, r.err
	}
	if r.tail-atomic.LoadUint32(r.sqHead) >= r.sqEntries {
		return 0, ErrQueueFull
	}
	e := sqe{Opcode: uint8(op.Opcode), Fd: int32(op.Fd)}
	fl := inflight{op: op.Opcode, tag: op.Tag}
	if op.Opcode != OpNop && (op.Fd < 0 || op.Fd > math.MaxInt32) {
		return 0, fmt.Errorf("%w: %v: Fd %d", ErrBadOp, op.Opcode, op.Fd)
	}
	if op.Off < 0 {
		return 0, fmt.Errorf("%w: %v: negative Off %d", ErrBadOp, op.Opcode, op.Off)
	}
	switch op.Opcode {
	case OpNop:
		e.Fd = -1
	case OpRead, OpWrite, OpReadFixed, OpWriteFixed:
		if len(op.Buf) == 0 || len(op.Buf) > math.MaxInt32 {
			return 0, fmt.Errorf("%w: %v: Buf length %d not in 1..2^31-1", ErrBadOp, op.Opcode, len(op.Buf))
		}
		e.Off = uint64(op.Off)
		e.Addr = uint64(uintptr(unsafe.Pointer(&op.Buf[0])))
		e.Len = uint32(len(op.Buf))
		fl.buf = op.Buf
		if op.Opcode == OpReadFixed || op.Opcode == OpWriteFixed {
			if op.BufIndex < 0 || op.BufIndex >= len(r.fixed) {
				return 0, fmt.Errorf("%w: %v: BufIndex %d, %d registered", ErrNoFixedBuffers, op.Opcode, op.BufIndex, len(r.fixed))
			}
			reg := r.fixed[op.BufIndex]
			lo := uintptr(unsafe.Pointer(&reg[0]))
			p := uintptr(e.Addr)
			if p < lo || p+uintptr(len(op.Buf)) > lo+uintptr(len(reg)) {
				return 0, fmt.Errorf("%w: %v: Buf outside registered buffer %d", ErrBadOp, op.Opcode, op.BufIndex)
			}
			e.BufIndex = uint16(op.BufIndex)
		}
	case OpReadv, OpWritev:
		if len(op.Bufs) == 0 || len(op.Bufs) > 1024 { // UIO_MAXIOV
			return 0, fmt.Errorf("%w: %v: %d iovecs not in 1..1024", ErrBadOp, op.Opcode, len(op.Bufs))
		}
		iov := make([]unix.Iovec, len(op.Bufs))
		for i, b := range op.Bufs {
			if len(b) == 0 {
				return 0, fmt.Errorf("%w: %v: Bufs[%d] empty", ErrBadOp, op.Opcode, i)
			}
			iov[i].Base = &b[0]
			iov[i].SetLen(len(b))
		}
		e.Off = uint64(op.Off)
		e.Addr = uint64(uintptr(unsafe.Pointer(&iov[0])))
		e.Len = uint32(len(iov))
		fl.bufs, fl.iov = op.Bufs, iov
	case OpFsync:
		if op.Datasync {
			e.OpFlags = FsyncDatasync
		}
	default:
		return 0, fmt.Errorf("%w: unsupported opcode %v", ErrBadOp, op.Opcode)
	}
	r.nextID++
	id := r.nextID
	e.UserData = id
	idx := r.tail & r.sqMask
	r.sqes[idx] = e
	r.sqArray[idx] = idx
	r.inflight[id] = fl
	r.tail++
	return id, nil
}

// unsubmitted is the number of prepared SQEs the kernel has not consumed.
func (r *Ring) unsubmitted() uint32 { return r.tail - atomic.LoadUint32(r.sqHead) }

// enter calls io_uring_enter, publishing our SQ tail first and retrying on
// EINTR (with the number of SQEs still unconsumed).
func (r *Ring) enter(minComplete, flags uint32) (int, error) {
	for {
		atomic.StoreUint32(r.sqTail, r.tail)
		toSubmit := r.unsubmitted()
		n, _, errno := unix.Syscall6(unix.SYS_IO_URING_ENTER, uintptr(r.fd), uintptr(toSubmit), uintptr(minComplete), uintptr(flags), 0, 0)
		if errno == unix.EINTR {
			r.stats.EINTR++
			continue
		}
		r.stats.Enters++
		if errno != 0 {
			return 0, errno
		}
		r.stats.Submitted += uint64(n)
		return int(n), nil
	}
}

// Submit hands every prepared SQE to the kernel and returns how many it
// consumed. It does not wait for completions.
func (r *Ring) Submit() (int, error) {
	if r.closed {
		return 0, ErrClosed
	}
	if r.err != nil {
		return 0, r.err
	}
	submitted := 0
	for r.unsubmitted() > 0 {
		n, err := r.enter(0, 0)
		if err != nil {
			if err == unix.EBUSY || err == unix.EAGAIN {
				// Completion backlog or no request memory: reap and
				// let a later Wait make progress.
				r.stats.Busy++
				if herr := r.harvest(); herr != nil {
					return submitted, herr
				}
				return submitted, nil
			}
			if err == unix.EBADR {
				r.err = ErrCQOverflow
				return submitted, r.err
			}
			return submitted, fmt.Errorf("uring: io_uring_enter submit: %w", err)
		}
		if n == 0 {
			break
		}
		submitted += n
	}
	return submitted, nil
}

// Wait submits every prepared SQE and blocks until at least want completions
// are reaped and not yet returned by Reap. want is capped at what can still
// arrive (reaped plus in flight), so Wait never blocks forever.
func (r *Ring) Wait(want int) error {
	if r.closed {
		return ErrClosed
	}
	want = max(0, min(want, len(r.done)+len(r.inflight)))
	for {
		if err := r.harvest(); err != nil {
			return err
		}
		if len(r.done) >= want && r.unsubmitted() == 0 {
			return nil
		}
		need := 0
		if len(r.done) < want {
			need = want - len(r.done)
		}
		before := r.unsubmitted()
		_, err := r.enter(uint32(need), enterGetEvents)
		if err != nil {
			switch err {
			case unix.EBUSY, unix.EAGAIN:
				r.stats.Busy++
				continue // harvest at the top makes room
			case unix.EBADR:
				r.err = ErrCQOverflow
				return r.err
			}
			return fmt.Errorf("uring: io_uring_enter wait: %w", err)
		}
		if need == 0 && before > 0 && r.unsubmitted() == before {
			// The kernel consumed no SQE and we wait for nothing:
			// avoid spinning.
			return fmt.Errorf("uring: io_uring_enter consumed none of %d SQEs", before)
		}
	}
}

// Reap appends the reaped completions to dst and forgets them.
func (r *Ring) Reap(dst []Completion) []Completion {
	dst = append(dst, r.done...)
	clear(r.done)
	r.done = r.done[:0]
	return dst
}

// harvest moves every CQE from the completion ring into r.done, releasing
// the in-flight entries, and flushes the kernel's overflow backlog when the
// CQ overflowed.
func (r *Ring) harvest() error {
	for round := 0; ; round++ {
		head := atomic.LoadUint32(r.cqHead)
		tail := atomic.LoadUint32(r.cqTail)
		for ; head != tail; head++ {
			c := r.cqes[head&r.cqMask]
			fl, ok := r.inflight[c.UserData]
			if ok {
				delete(r.inflight, c.UserData)
			}
			r.done = append(r.done, Completion{UserData: c.UserData, Opcode: fl.op, Res: c.Res, Flags: c.Flags, Tag: fl.tag})
			r.stats.Completed++
			if int(fl.op) < len(r.stats.ByOpcode) {
				r.stats.ByOpcode[fl.op]++
			}
		}
		atomic.StoreUint32(r.cqHead, head)
		if ov := atomic.LoadUint32(r.cqOver); ov != r.overSeen {
			r.overSeen = ov
			if r.features&FeatNoDrop == 0 {
				r.err = ErrCQOverflow
				return r.err
			}
		}
		if atomic.LoadUint32(r.sqFlags)&sqCQOverflow == 0 || round > 1<<16 {
			return nil
		}
		// Completions wait in the kernel's overflow list: an enter with
		// GETEVENTS copies them into the (now empty) CQ.
		r.stats.OverflowFlushes++
		if _, err := r.enter(0, enterGetEvents); err != nil {
			if err == unix.EBADR {
				r.err = ErrCQOverflow
				return r.err
			}
			if err != unix.EBUSY && err != unix.EAGAIN && err != unix.EINTR {
				return fmt.Errorf("uring: io_uring_enter flush overflow: %w", err)
			}
		}
	}
}

// RegisterBuffers registers bufs as the ring's fixed buffers (index i is
// bufs[i]), for READ_FIXED and WRITE_FIXED. The kernel pins their pages,
// which counts against RLIMIT_MEMLOCK unless the process has CAP_IPC_LOCK.
func (r *Ring) RegisterBuffers(bufs []*Buffer) error {
	if r.closed {
		return ErrClosed
	}
	if len(bufs) == 0 {
		return fmt.Errorf("%w: no buffers to register", ErrBadBuffer)
	}
	if r.fixed != nil {
		return fmt.Errorf("%w: buffers already registered", ErrBadBuffer)
	}
	iov := make([]unix.Iovec, len(bufs))
	fixed := make([][]byte, len(bufs))
	for i, b := range bufs {
		if b == nil || b.mem == nil {
			return fmt.Errorf("%w: buffer %d is nil or freed", ErrBadBuffer, i)
		}
		iov[i].Base = &b.mem[0]
		iov[i].SetLen(len(b.mem))
		fixed[i] = b.mem
	}
	_, _, errno := unix.Syscall6(unix.SYS_IO_URING_REGISTER, uintptr(r.fd), registerBuffers, uintptr(unsafe.Pointer(&iov[0])), uintptr(len(iov)), 0, 0)
	if errno != 0 {
		if errno == unix.ENOMEM {
			var rl unix.Rlimit
			_ = unix.Getrlimit(unix.RLIMIT_MEMLOCK, &rl)
			return fmt.Errorf("uring: register %d buffers (RLIMIT_MEMLOCK %d bytes): %w", len(bufs), rl.Cur, errno)
		}
		return fmt.Errorf("uring: register buffers: %w", errno)
	}
	r.fixed = fixed
	return nil
}

// UnregisterBuffers drops the fixed buffers. Nothing may be in flight.
func (r *Ring) UnregisterBuffers() error {
	if r.closed {
		return ErrClosed
	}
	if r.fixed == nil {
		return ErrNoFixedBuffers
	}
	if len(r.inflight) > 0 {
		return fmt.Errorf("%w: %d requests in flight", ErrBadBuffer, len(r.inflight))
	}
	_, _, errno := unix.Syscall6(unix.SYS_IO_URING_REGISTER, uintptr(r.fd), unregisterBuffers, 0, 0, 0, 0)
	if errno != 0 {
		return fmt.Errorf("uring: unregister buffers: %w", errno)
	}
	r.fixed = nil
	return nil
}

// Close waits for every request in flight (their memory must stay valid
// until the kernel is done with it), then unmaps the rings and closes the
// ring fd. Prepared but unsubmitted SQEs are submitted and waited for too.
// If that wait fails (completions lost to ErrCQOverflow), the buffers of the
// requests left in flight are kept reachable forever and Abandoned reports
// true: a Buffer they point into must then never be freed.
func (r *Ring) Close() error {
	if r.closed {
		return ErrClosed
	}
	var err error
	if len(r.inflight) > 0 && r.err == nil {
		err = r.Wait(len(r.done) + len(r.inflight))
	}
	if len(r.inflight) > 0 {
		// Completions were lost (or waiting failed): the kernel may
		// still read or write these buffers, even after the ring fd is
		// closed, until it has torn the requests down. Keep them
		// reachable for the life of the process rather than let the
		// collector reuse them.
		abandon(r.inflight)
		r.abandonedAtClose = true
		if err == nil {
			err = r.err
		}
	}
	r.closed = true
	r.unmap()
	if cerr := unix.Close(r.fd); cerr != nil && err == nil {
		err = fmt.Errorf("uring: close ring fd: %w", cerr)
	}
	r.inflight, r.done, r.fixed = nil, nil, nil
	return err
}
