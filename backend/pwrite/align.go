package pwrite

import (
	"sync"
	"unsafe"

	"github.com/tierstore/tierstore/backend"
)

// chunkSize is the size of the aligned staging buffers used with O_DIRECT: a
// WriteBucket copies its iovecs into chunkSize buffers and writes each with
// one pwrite; a Read of a small unaligned range goes through one.
const chunkSize = 1 << 20

// alignedAlloc returns an n-byte slice whose first byte is aligned to
// backend.Alignment (an over-allocated slice cut at an aligned address; the
// garbage collector keeps the whole array alive while the slice is).
func alignedAlloc(n int) []byte {
	raw := make([]byte, n+backend.Alignment)
	skip := 0
	if r := int(uintptr(unsafe.Pointer(&raw[0])) & (backend.Alignment - 1)); r != 0 {
		skip = backend.Alignment - r
	}
	return raw[skip : skip+n : skip+n]
}

// chunkPool holds *[]byte of chunkSize aligned bytes.
var chunkPool = sync.Pool{New: func() any {
	b := alignedAlloc(chunkSize)
	return &b
}}

func getChunk() *[]byte  { return chunkPool.Get().(*[]byte) }
func putChunk(b *[]byte) { chunkPool.Put(b) }
