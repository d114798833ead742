package crc32c

import (
	"hash/crc32"
	"math/bits"

	"golang.org/x/sys/cpu"
)

// The fast path on amd64 with AVX-512 and its carry-less multiply
// (VPCLMULQDQ): the standard library's CRC32C runs the CRC32 instruction
// on three streams, about 8 bytes a cycle; folding 256 bytes at a time with
// VPCLMULQDQ is several times that. foldAVX512 reduces the bulk of a buffer
// to one 64-byte block whose CRC register run from zero equals the
// buffer's run from the caller's, runs that block with the CRC32
// instruction, and the standard library finishes the tail. (Nothing of
// the caller's stack goes to the standard library, whose indirect call
// would make it escape: an allocation per call.)
//
// Folding, for the reflected CRC32C: a 16-byte lane X standing d bytes
// (D = 8d bits) before the data it is added to is replaced by
// clmul(X.lo, k_lo) xor clmul(X.hi, k_hi), with k_lo = x^(D+32) mod P and
// k_hi = x^(D-32) mod P, each bit-reflected (32 bits) and shifted left by
// one; foldConsts computes them at start-up.

//go:noescape
func foldAVX512(p *byte, blocks int, r uint32, k *[8]uint64) uint32

// foldMin is the shortest buffer worth folding (the standard library is as
// fast below it).
const foldMin = 1024

var (
	hasFold = cpu.X86.HasAVX512F && cpu.X86.HasAVX512VL && cpu.X86.HasAVX512VPCLMULQDQ && cpu.X86.HasPCLMULQDQ
	// foldK: the constants for folding over 256, 192, 128 and 64 bytes.
	foldK = [8]uint64{
		foldConst(256*8 + 32), foldConst(256*8 - 32),
		foldConst(192*8 + 32), foldConst(192*8 - 32),
		foldConst(128*8 + 32), foldConst(128*8 - 32),
		foldConst(64*8 + 32), foldConst(64*8 - 32),
	}
)

// castagnoli is the polynomial, x^32 included, in normal bit order (bit i
// the coefficient of x^i).
const castagnoli = 0x1EDC6F41 | 1<<32

// foldConst is x^n mod P, bit-reflected and shifted left by one.
func foldConst(n int) uint64 {
	var r uint64 = 1
	for range n {
		r <<= 1
		if r&(1<<32) != 0 {
			r ^= castagnoli
		}
	}
	return uint64(bits.Reverse32(uint32(r))) << 1
}

// update is Update: folded when the CPU can and b is long enough.
func update(crc uint32, b []byte) uint32 {
	if !hasFold || len(b) < foldMin {
		return crc32.Update(crc, Table, b)
	}
	return updateFold(crc, b)
}

// updateFold is update by folding; b is at least 256 bytes.
func updateFold(crc uint32, b []byte) uint32 {
	blocks := len(b) / 64
	// crc32.Update(c, p) is the register ^c run over p, inverted.
	raw := foldAVX512(&b[0], blocks, ^crc, &foldK)
	return crc32.Update(^raw, Table, b[blocks*64:])
}
