#include "textflag.h"

// FOLD(k, acc, tmp, src): acc = clmul(acc.lo, k.lo) ^ clmul(acc.hi, k.hi) ^ src,
// in each 128-bit lane: acc moved over the distance k is for, plus src.
#define FOLD(k, acc, tmp, src) \
	VPCLMULQDQ $0x00, k, acc, tmp \
	VPCLMULQDQ $0x11, k, acc, acc \
	VPTERNLOGD $0x96, src, tmp, acc

// func foldAVX512(p *byte, blocks int, r uint32, k *[8]uint64) uint32
//
// Folds blocks (>= 4) 64-byte blocks of p, the raw CRC register r xored
// into the first four bytes, into one 64-byte block with the same CRC32C
// (see fold_amd64.go): four ZMM accumulators folded 256 bytes at a time,
// then into one, then 64 bytes at a time. k holds the fold constants for
// 256, 192, 128 and 64 bytes, two quadwords each (lo, hi). It returns the
// raw register (no inversions) of that block run from zero with the CRC32
// instruction: the register of the blocks run from r.
TEXT ·foldAVX512(SB), NOSPLIT, $64-36
	MOVQ p+0(FP), SI
	MOVQ blocks+8(FP), CX
	MOVL r+16(FP), AX
	MOVQ k+24(FP), BX

	VMOVDQU64 0(SI), Z0
	VMOVDQU64 64(SI), Z1
	VMOVDQU64 128(SI), Z2
	VMOVDQU64 192(SI), Z3
	VMOVD AX, X10
	VPXORQ Z10, Z0, Z0
	ADDQ $256, SI
	SUBQ $4, CX

	VBROADCASTI32X4 0(BX), Z8 // 256 bytes

loop256:
	CMPQ CX, $4
	JLT fold4
	FOLD(Z8, Z0, Z4, 0(SI))
	FOLD(Z8, Z1, Z5, 64(SI))
	FOLD(Z8, Z2, Z6, 128(SI))
	FOLD(Z8, Z3, Z7, 192(SI))
	ADDQ $256, SI
	SUBQ $4, CX
	JMP loop256

fold4:
	// Z3 ^= Z0 folded over 192 bytes, Z1 over 128, Z2 over 64.
	VBROADCASTI32X4 16(BX), Z9
	FOLD(Z9, Z0, Z4, Z3)
	VBROADCASTI32X4 32(BX), Z9
	FOLD(Z9, Z1, Z4, Z0)
	VBROADCASTI32X4 48(BX), Z9
	FOLD(Z9, Z2, Z4, Z1)
	VMOVDQA64 Z2, Z3

loop64:
	CMPQ CX, $1
	JLT done
	FOLD(Z9, Z3, Z4, 0(SI))
	ADDQ $64, SI
	DECQ CX
	JMP loop64

done:
	VMOVDQU64 Z3, block-64(SP)
	VZEROUPPER
	XORQ AX, AX
	CRC32Q block-64(SP), AX
	CRC32Q block-56(SP), AX
	CRC32Q block-48(SP), AX
	CRC32Q block-40(SP), AX
	CRC32Q block-32(SP), AX
	CRC32Q block-24(SP), AX
	CRC32Q block-16(SP), AX
	CRC32Q block-8(SP), AX
	MOVL AX, ret+32(FP)
	RET
