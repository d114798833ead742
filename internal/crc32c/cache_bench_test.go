package crc32c

import (
	"sync"
	"testing"
)

// What the CRC32C of a value costs depending on whether its bytes are in
// cache (docs/benchmarks.md, "The put's CRC32C at PutEnd: tried and not
// merged"): a pass over memory not touched lately, a pass over a chunk in
// cache, and the sender's two orders of its CRC and the copy into the
// socket (a copy stands in for the kernel's): the CRC first and the copy
// later (the value's CRC before PutStart, as main does), or the copy first
// and the CRC right after (each chunk's CRC after its writev, as the
// branch of that section did).

var coldOnce sync.Once
var cold []byte // 256 MiB: a pass over it leaves nothing of the next chunk in cache

func coldBytes() []byte {
	coldOnce.Do(func() {
		cold = make([]byte, 256<<20)
		for i := range cold {
			cold[i] = byte(i * 7)
		}
	})
	return cold
}

// benchCache runs f over successive chunk-sized pieces of the cold bytes
// (or the same piece, hot).
func benchCache(b *testing.B, chunk int, hot bool, f func(c, dst []byte)) {
	src, dst := coldBytes(), make([]byte, chunk)
	b.SetBytes(int64(chunk))
	off := 0
	for b.Loop() {
		f(src[off:off+chunk], dst)
		if !hot {
			off = (off + chunk) % len(src)
		}
	}
}

func BenchmarkCRCCold1MiB(b *testing.B) {
	benchCache(b, 1<<20, false, func(c, _ []byte) { Update(0, c) })
}

func BenchmarkCRCHot128KiB(b *testing.B) {
	benchCache(b, 128<<10, true, func(c, _ []byte) { Update(0, c) })
}

func BenchmarkCopyCold128KiB(b *testing.B) {
	benchCache(b, 128<<10, false, func(c, dst []byte) { copy(dst, c) })
}

// CRCThenCopy: the CRC pass brings the chunk into cache, the copy follows
// at once (what a CRC fused before each send would cost).
func BenchmarkCRCThenCopy128KiB(b *testing.B) {
	benchCache(b, 128<<10, false, func(c, dst []byte) { Update(0, c); copy(dst, c) })
}

// CopyThenCRC: the copy reads the chunk cold, the CRC right after reads it
// in cache (protocol 10's order, wire.DataConn.sendValue).
func BenchmarkCopyThenCRC128KiB(b *testing.B) {
	benchCache(b, 128<<10, false, func(c, dst []byte) { copy(dst, c); Update(0, c) })
}

func BenchmarkCopyThenCRC1MiB(b *testing.B) {
	benchCache(b, 1<<20, false, func(c, dst []byte) { copy(dst, c); Update(0, c) })
}

// CRCColdCopyCold: the CRC of one chunk and the copy of another half the
// cold bytes away, both cold (protocol 9: every value's CRC long before
// its send).
func BenchmarkCRCColdCopyCold128KiB(b *testing.B) {
	const chunk = 128 << 10
	src, dst := coldBytes(), make([]byte, chunk)
	b.SetBytes(chunk)
	off := 0
	for b.Loop() {
		Update(0, src[off:off+chunk])
		o := (off + len(src)/2) % len(src)
		copy(dst, src[o:o+chunk])
		off = (off + chunk) % len(src)
	}
}
