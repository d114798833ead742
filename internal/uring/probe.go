package uring

import (
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Probe is the set of opcodes the running kernel supports, as reported by
// IORING_REGISTER_PROBE. Features are probed, never inferred from the kernel
// version.
type Probe struct {
	// LastOp is the highest opcode the kernel knows.
	LastOp    Opcode
	supported [256]bool
}

// Supported reports whether the kernel implements op.
func (p *Probe) Supported(op Opcode) bool { return p.supported[op] }

// Probe asks the kernel which opcodes this ring supports.
func (r *Ring) Probe() (*Probe, error) {
	if r.closed {
		return nil, ErrClosed
	}
	var raw struct {
		hdr probeHeader
		ops [256]probeOp
	}
	_, _, errno := unix.Syscall6(unix.SYS_IO_URING_REGISTER, uintptr(r.fd), registerProbe, uintptr(unsafe.Pointer(&raw)), uintptr(len(raw.ops)), 0, 0)
	if errno != 0 {
		return nil, fmt.Errorf("uring: IORING_REGISTER_PROBE: %w", errno)
	}
	p := &Probe{LastOp: Opcode(raw.hdr.LastOp)}
	for i := 0; i < int(raw.hdr.OpsLen) && i < len(raw.ops); i++ {
		if raw.ops[i].Flags&opSupported != 0 {
			p.supported[raw.ops[i].Op] = true
		}
	}
	return p, nil
}

// ProbeKernel creates a small ring, probes it and closes it. The error is a
// *SetupError (matching ErrUnavailable) when io_uring cannot be used.
func ProbeKernel() (*Probe, uint32, error) {
	r, err := New(Config{Entries: 2})
	if err != nil {
		return nil, 0, err
	}
	defer r.Close()
	p, err := r.Probe()
	if err != nil {
		return nil, 0, err
	}
	return p, r.Features(), nil
}
