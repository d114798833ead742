package wire

import (
	"math/bits"
	"sync"
)

// Bounce buffers come from size classes shared by all connections, so that
// the memory held scales with the writes in flight, not with the
// connections open. Only a write on a connection without a descriptor
// (receiveCopy) uses one: the others land in the node's memory directly.
const (
	minClassShift = 16 // 64 KiB
	maxClassShift = 26 // 64 MiB; larger payloads are allocated and dropped
)

var bufClasses [maxClassShift - minClassShift + 1]sync.Pool

// classOf is the index of the smallest class holding n bytes, or -1 when n
// is larger than every class.
func classOf(n int) int {
	shift := minClassShift
	if n > 1<<minClassShift {
		shift = bits.Len(uint(n - 1))
	}
	if shift > maxClassShift {
		return -1
	}
	return shift - minClassShift
}

// getBuf returns a buffer of length n (its contents are garbage).
func getBuf(n int) *[]byte {
	c := classOf(n)
	if c < 0 {
		b := make([]byte, n)
		return &b
	}
	if p, ok := bufClasses[c].Get().(*[]byte); ok {
		*p = (*p)[:n]
		return p
	}
	b := make([]byte, n, 1<<(c+minClassShift))
	return &b
}

// putBuf gives a buffer from getBuf back.
func putBuf(p *[]byte) {
	if c := classOf(cap(*p)); c >= 0 && cap(*p) == 1<<(c+minClassShift) {
		bufClasses[c].Put(p)
	}
}
