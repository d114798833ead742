package pwrite

import (
	"sync"

	"github.com/tierstore/tierstore/backend/internal/bfile"
)

// chunkSize is the size of the aligned staging buffers used with O_DIRECT: a
// WriteBucket copies its iovecs into chunkSize buffers and writes each with
// one pwrite; a Read of a small unaligned range goes through one.
const chunkSize = 1 << 20

// chunkPool holds *[]byte of chunkSize aligned bytes.
var chunkPool = sync.Pool{New: func() any {
	b := bfile.AlignedAlloc(chunkSize)
	return &b
}}

func getChunk() *[]byte  { return chunkPool.Get().(*[]byte) }
func putChunk(b *[]byte) { chunkPool.Put(b) }
