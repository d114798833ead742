package bfile

import (
	"unsafe"

	"github.com/tierstore/tierstore/backend"
)

// AlignedAlloc returns n > 0 bytes of Go heap memory starting on a
// backend.Alignment boundary, with capacity n. The kernel may read into it
// directly (O_DIRECT): the collector never moves heap objects, and the slice
// keeps the whole allocation alive.
func AlignedAlloc(n int) []byte {
	// Large allocations start on a runtime page (8 KiB): try the exact
	// size first, over-allocate only when it is not aligned.
	if b := make([]byte, n); uintptr(unsafe.Pointer(&b[0]))&(backend.Alignment-1) == 0 {
		return b[:n:n]
	}
	raw := make([]byte, n+backend.Alignment)
	skip := 0
	if r := int(uintptr(unsafe.Pointer(&raw[0])) & (backend.Alignment - 1)); r != 0 {
		skip = backend.Alignment - r
	}
	return raw[skip : skip+n : skip+n]
}
