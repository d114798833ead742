package uring

import "strconv"

// Kernel ABI of io_uring (include/uapi/linux/io_uring.h), amd64 and arm64
// alike (all fields are naturally aligned, no padding differences). The
// layout test checks every size and offset against the values of the C
// header.

// Opcode is an io_uring operation (IORING_OP_*).
type Opcode uint8

// Opcodes used by tierstore. The numbers are the kernel's.
const (
	OpNop        Opcode = 0
	OpReadv      Opcode = 1
	OpWritev     Opcode = 2
	OpFsync      Opcode = 3
	OpReadFixed  Opcode = 4
	OpWriteFixed Opcode = 5
	OpRead       Opcode = 22
	OpWrite      Opcode = 23
)

func (o Opcode) String() string {
	switch o {
	case OpNop:
		return "NOP"
	case OpReadv:
		return "READV"
	case OpWritev:
		return "WRITEV"
	case OpFsync:
		return "FSYNC"
	case OpReadFixed:
		return "READ_FIXED"
	case OpWriteFixed:
		return "WRITE_FIXED"
	case OpRead:
		return "READ"
	case OpWrite:
		return "WRITE"
	}
	return "OP(" + strconv.Itoa(int(o)) + ")"
}

// FsyncDatasync is IORING_FSYNC_DATASYNC: FSYNC behaves as fdatasync(2).
const FsyncDatasync uint32 = 1

// io_uring_setup flags (IORING_SETUP_*).
const setupCQSize uint32 = 1 << 3

// Feature bits reported by io_uring_setup (IORING_FEAT_*).
const (
	FeatSingleMmap    uint32 = 1 << 0
	FeatNoDrop        uint32 = 1 << 1
	FeatSubmitStable  uint32 = 1 << 2
	FeatNativeWorkers uint32 = 1 << 9
)

// io_uring_enter flags.
const enterGetEvents uint32 = 1 << 0

// sq ring flags.
const sqCQOverflow uint32 = 1 << 1

// io_uring_register opcodes.
const (
	registerBuffers   uintptr = 0
	unregisterBuffers uintptr = 1
	registerProbe     uintptr = 8
)

// mmap offsets of the ring fd.
const (
	offSQRing int64 = 0
	offCQRing int64 = 0x8000000
	offSQEs   int64 = 0x10000000
)

// opSupported is IO_URING_OP_SUPPORTED in io_uring_probe_op.flags.
const opSupported uint16 = 1

// sqringOffsets is struct io_sqring_offsets (40 bytes).
type sqringOffsets struct {
	Head        uint32
	Tail        uint32
	RingMask    uint32
	RingEntries uint32
	Flags       uint32
	Dropped     uint32
	Array       uint32
	Resv1       uint32
	UserAddr    uint64
}

// cqringOffsets is struct io_cqring_offsets (40 bytes).
type cqringOffsets struct {
	Head        uint32
	Tail        uint32
	RingMask    uint32
	RingEntries uint32
	Overflow    uint32
	CQEs        uint32
	Flags       uint32
	Resv1       uint32
	UserAddr    uint64
}

// params is struct io_uring_params (120 bytes).
type params struct {
	SQEntries    uint32
	CQEntries    uint32
	Flags        uint32
	SQThreadCPU  uint32
	SQThreadIdle uint32
	Features     uint32
	WQFd         uint32
	Resv         [3]uint32
	SQOff        sqringOffsets
	CQOff        cqringOffsets
}

// sqe is struct io_uring_sqe (64 bytes, without SQE128).
type sqe struct {
	Opcode      uint8
	Flags       uint8
	Ioprio      uint16
	Fd          int32
	Off         uint64 // also addr2
	Addr        uint64 // buffer or iovec array
	Len         uint32 // bytes, or number of iovecs
	OpFlags     uint32 // rw_flags, fsync_flags, ...
	UserData    uint64
	BufIndex    uint16 // registered buffer index (READ_FIXED, WRITE_FIXED)
	Personality uint16
	SpliceFdIn  int32 // also file_index
	Addr3       uint64
	Pad2        uint64
}

// cqe is struct io_uring_cqe (16 bytes, without CQE32).
type cqe struct {
	UserData uint64
	Res      int32
	Flags    uint32
}

// probeHeader is struct io_uring_probe without its flexible ops array
// (16 bytes).
type probeHeader struct {
	LastOp uint8
	OpsLen uint8
	Resv   uint16
	Resv2  [3]uint32
}

// probeOp is struct io_uring_probe_op (8 bytes).
type probeOp struct {
	Op    uint8
	Resv  uint8
	Flags uint16
	Resv2 uint32
}
