package eviction

import (
	"github.com/tierstore/tierstore/bucket"
	"github.com/tierstore/tierstore/masterapi"
)

// Worth weighs a bucket of fileBytes holding keys (value sizes in sizes)
// with freq, an estimate of each key's access frequency: what it still
// holds, in the one shape SSD admission compares a candidate with
// (masterapi.SSDVictim, the SSD report's victims; a worth-ranking eviction
// or reinsertion decision ranks buckets with its Density). Its Span is the
// live bytes plus the dead ones: the file size minus that of a bucket
// holding only the live objects (objects removed, or re-offloaded into
// another bucket).
func Worth(fileBytes int64, keys [][]byte, sizes []int64, freq func(key []byte) uint32) masterapi.SSDVictim {
	v := masterapi.SSDVictim{FileBytes: fileBytes}
	var live, keyBytes, aligned int64
	for i, k := range keys {
		live += sizes[i]
		v.Worth += float64(freq(k)) * float64(sizes[i])
		keyBytes += int64(len(k))
		aligned += bucket.AlignUp(sizes[i])
	}
	if len(keys) == 0 {
		v.Span = fileBytes
		return v
	}
	v.Span = live + max(0, fileBytes-bucket.Size(len(keys), keyBytes, aligned))
	return v
}
