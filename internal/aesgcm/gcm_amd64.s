#include "textflag.h"

// The fast path (gcm_amd64.go): AES-128 or AES-256 in counter mode with VAES on ZMM
// registers (four blocks a register), and GHASH with VPCLMULQDQ on ZMM
// registers over the precomputed powers H^16..H^1 (key.htab).
//
// GHASH's representation: a block is byte-reversed (VPSHUFB with
// bswapMask), which makes it the 128-bit integer whose bit 127 is the
// coefficient of x^0 (GCM's bit order, reflected). The carry-less product
// of two such integers a, b is the reflected product times x; each power
// in htab is stored times x^-1 (ghashRep in key.go), so the product of a
// block and an entry, reduced modulo x^128 + x^7 + x^2 + x + 1, is the
// block times the power. The 256-bit product is kept as three parts, LO
// (a.lo*b.lo), MI (a.lo*b.hi ^ a.hi*b.lo) and HI (a.hi*b.hi), summed over
// every block of an iteration before the one reduction (REDUCE).

// Offsets in key (key.go; TestKeyLayout): the round-key slots (64 bytes
// each: 0..9 the first ten round keys, 10 the last, 11..14 AES-256's
// round keys 10..13), htab, and the number of rounds (10 or 14).
#define EXTRA 704
#define HTAB 960
#define ROUNDS 1280

// bswapMask reverses the bytes of each 128-bit lane.
DATA bswapMask<>+0x00(SB)/8, $0x08090a0b0c0d0e0f
DATA bswapMask<>+0x08(SB)/8, $0x0001020304050607
DATA bswapMask<>+0x10(SB)/8, $0x08090a0b0c0d0e0f
DATA bswapMask<>+0x18(SB)/8, $0x0001020304050607
DATA bswapMask<>+0x20(SB)/8, $0x08090a0b0c0d0e0f
DATA bswapMask<>+0x28(SB)/8, $0x0001020304050607
DATA bswapMask<>+0x30(SB)/8, $0x08090a0b0c0d0e0f
DATA bswapMask<>+0x38(SB)/8, $0x0001020304050607
GLOBL bswapMask<>(SB), RODATA|NOPTR, $64

// ctrLanes: lane i's counter is the first one plus i (the counter is the
// low 32 bits of a byte-reversed counter block).
DATA ctrLanes<>+0x00(SB)/8, $0
DATA ctrLanes<>+0x08(SB)/8, $0
DATA ctrLanes<>+0x10(SB)/8, $1
DATA ctrLanes<>+0x18(SB)/8, $0
DATA ctrLanes<>+0x20(SB)/8, $2
DATA ctrLanes<>+0x28(SB)/8, $0
DATA ctrLanes<>+0x30(SB)/8, $3
DATA ctrLanes<>+0x38(SB)/8, $0
GLOBL ctrLanes<>(SB), RODATA|NOPTR, $64

// ctrFour: four added to each lane's counter.
DATA ctrFour<>+0x00(SB)/8, $4
DATA ctrFour<>+0x08(SB)/8, $0
DATA ctrFour<>+0x10(SB)/8, $4
DATA ctrFour<>+0x18(SB)/8, $0
DATA ctrFour<>+0x20(SB)/8, $4
DATA ctrFour<>+0x28(SB)/8, $0
DATA ctrFour<>+0x30(SB)/8, $4
DATA ctrFour<>+0x38(SB)/8, $0
GLOBL ctrFour<>(SB), RODATA|NOPTR, $64

// gfPoly: the reduction's constant in each lane; its high quadword,
// x^63+x^62+x^57 reflected, folds a quadword of low-order product bits.
DATA gfPoly<>+0x00(SB)/8, $1
DATA gfPoly<>+0x08(SB)/8, $0xc200000000000000
DATA gfPoly<>+0x10(SB)/8, $1
DATA gfPoly<>+0x18(SB)/8, $0xc200000000000000
DATA gfPoly<>+0x20(SB)/8, $1
DATA gfPoly<>+0x28(SB)/8, $0xc200000000000000
DATA gfPoly<>+0x30(SB)/8, $1
DATA gfPoly<>+0x38(SB)/8, $0xc200000000000000
GLOBL gfPoly<>(SB), RODATA|NOPTR, $64

// LOADKEYS: round-key slots 0..10 (each key in four lanes) into Z16..Z26:
// the first ten round keys and the last.
#define LOADKEYS(k) \
	VMOVDQU64 0(k), Z16 \
	VMOVDQU64 64(k), Z17 \
	VMOVDQU64 128(k), Z18 \
	VMOVDQU64 192(k), Z19 \
	VMOVDQU64 256(k), Z20 \
	VMOVDQU64 320(k), Z21 \
	VMOVDQU64 384(k), Z22 \
	VMOVDQU64 448(k), Z23 \
	VMOVDQU64 512(k), Z24 \
	VMOVDQU64 576(k), Z25 \
	VMOVDQU64 640(k), Z26

// AES1(B, L): AES of the four blocks of B, slots 0..10 in Z16..Z26, the
// rounds in R10 (AES-256's four more from memory at BX; L a label of
// its own).
#define AES1(B, L) \
	VPXORQ Z16, B, B \
	VAESENC Z17, B, B \
	VAESENC Z18, B, B \
	VAESENC Z19, B, B \
	VAESENC Z20, B, B \
	VAESENC Z21, B, B \
	VAESENC Z22, B, B \
	VAESENC Z23, B, B \
	VAESENC Z24, B, B \
	VAESENC Z25, B, B \
	CMPQ R10, $10 \
	JEQ L \
	VAESENC EXTRA+0(BX), B, B \
	VAESENC EXTRA+64(BX), B, B \
	VAESENC EXTRA+128(BX), B, B \
	VAESENC EXTRA+192(BX), B, B \
L: \
	VAESENCLAST Z26, B, B

#define ROUND4(K, B0, B1, B2, B3) \
	VAESENC K, B0, B0 \
	VAESENC K, B1, B1 \
	VAESENC K, B2, B2 \
	VAESENC K, B3, B3

// EXTRA4(L): AES-256's rounds 10..13 of Z0..Z3 when R10 says 14 (L a
// label of its own).
#define EXTRA4(L) \
	CMPQ R10, $10 \
	JEQ L \
	ROUND4(EXTRA+0(BX), Z0, Z1, Z2, Z3) \
	ROUND4(EXTRA+64(BX), Z0, Z1, Z2, Z3) \
	ROUND4(EXTRA+128(BX), Z0, Z1, Z2, Z3) \
	ROUND4(EXTRA+192(BX), Z0, Z1, Z2, Z3) \
L:

// NEXTCTR: B is the lanes' counter blocks (Z28 byte-reversed, Z31 the
// mask), and Z28 moves four blocks on (Z29).
#define NEXTCTR(B) \
	VPSHUFB Z31, Z28, B \
	VPADDD Z29, Z28, Z28

// func ctrXOR(k *key, ctr *[16]byte, dst, src *byte, n int)
TEXT ·ctrXOR(SB), NOSPLIT, $0-40
	MOVQ k+0(FP), BX
	MOVQ ctr+8(FP), AX
	MOVQ dst+16(FP), DI
	MOVQ src+24(FP), SI
	MOVQ n+32(FP), CX
	MOVQ ROUNDS(BX), R10

	VMOVDQU64 bswapMask<>(SB), Z31
	VBROADCASTI32X4 (AX), Z28
	VPSHUFB Z31, Z28, Z28
	VPADDD ctrLanes<>(SB), Z28, Z28
	VMOVDQU64 ctrFour<>(SB), Z29
	LOADKEYS(BX)

ctr256:
	CMPQ CX, $256
	JB ctr64
	NEXTCTR(Z0)
	NEXTCTR(Z1)
	NEXTCTR(Z2)
	NEXTCTR(Z3)
	VPXORQ Z16, Z0, Z0
	VPXORQ Z16, Z1, Z1
	VPXORQ Z16, Z2, Z2
	VPXORQ Z16, Z3, Z3
	ROUND4(Z17, Z0, Z1, Z2, Z3)
	ROUND4(Z18, Z0, Z1, Z2, Z3)
	ROUND4(Z19, Z0, Z1, Z2, Z3)
	ROUND4(Z20, Z0, Z1, Z2, Z3)
	ROUND4(Z21, Z0, Z1, Z2, Z3)
	ROUND4(Z22, Z0, Z1, Z2, Z3)
	ROUND4(Z23, Z0, Z1, Z2, Z3)
	ROUND4(Z24, Z0, Z1, Z2, Z3)
	ROUND4(Z25, Z0, Z1, Z2, Z3)
	EXTRA4(ctrExtra)
	VAESENCLAST Z26, Z0, Z0
	VAESENCLAST Z26, Z1, Z1
	VAESENCLAST Z26, Z2, Z2
	VAESENCLAST Z26, Z3, Z3
	VPXORQ 0(SI), Z0, Z0
	VPXORQ 64(SI), Z1, Z1
	VPXORQ 128(SI), Z2, Z2
	VPXORQ 192(SI), Z3, Z3
	VMOVDQU64 Z0, 0(DI)
	VMOVDQU64 Z1, 64(DI)
	VMOVDQU64 Z2, 128(DI)
	VMOVDQU64 Z3, 192(DI)
	ADDQ $256, SI
	ADDQ $256, DI
	SUBQ $256, CX
	JMP ctr256

ctr64:
	CMPQ CX, $64
	JB ctrTail
	NEXTCTR(Z0)
	AES1(Z0, ctr64Extra)
	VPXORQ (SI), Z0, Z0
	VMOVDQU64 Z0, (DI)
	ADDQ $64, SI
	ADDQ $64, DI
	SUBQ $64, CX
	JMP ctr64

ctrTail:
	// The last 1..63 bytes, under a byte mask (masked-off bytes are
	// neither read nor written).
	TESTQ CX, CX
	JZ ctrDone
	MOVQ $1, AX
	SHLQ CX, AX
	DECQ AX
	KMOVQ AX, K1
	NEXTCTR(Z0)
	AES1(Z0, ctrTailExtra)
	VMOVDQU8.Z (SI), K1, Z1
	VPXORQ Z1, Z0, Z0
	VMOVDQU8 Z0, K1, (DI)

ctrDone:
	VZEROUPPER
	RET

// MULSET: LO, MI, HI = the products of the lanes of D and H.
#define MULSET(D, H, LO, MI, HI, T) \
	VPCLMULQDQ $0x00, H, D, LO \
	VPCLMULQDQ $0x11, H, D, HI \
	VPCLMULQDQ $0x01, H, D, MI \
	VPCLMULQDQ $0x10, H, D, T \
	VPXORQ T, MI, MI

// MULACC: LO, MI, HI += the products of the lanes of D and H.
#define MULACC(D, H, LO, MI, HI, T1, T2) \
	VPCLMULQDQ $0x00, H, D, T1 \
	VPCLMULQDQ $0x11, H, D, T2 \
	VPXORQ T1, LO, LO \
	VPXORQ T2, HI, HI \
	VPCLMULQDQ $0x01, H, D, T1 \
	VPCLMULQDQ $0x10, H, D, T2 \
	VPTERNLOGD $0x96, T2, T1, MI

// REDUCE: each lane's 256-bit product (LO, MI, HI) modulo the GHASH
// polynomial, into HI: LO's low quadword is folded into MI (times the
// polynomial's low terms, plus itself 128 bits up), then MI's into HI.
#define REDUCE(LO, MI, HI, T, POLY) \
	VPCLMULQDQ $0x10, POLY, LO, T \
	VPSHUFD $0x4e, LO, LO \
	VPTERNLOGD $0x96, T, LO, MI \
	VPCLMULQDQ $0x10, POLY, MI, T \
	VPSHUFD $0x4e, MI, MI \
	VPTERNLOGD $0x96, T, MI, HI

// HSUM: the xor of the four lanes of Z into its lane 0, the others zeroed.
#define HSUM(Z, Y, X, TY, TX) \
	VEXTRACTI64X4 $1, Z, TY \
	VPXORQ TY, Y, Y \
	VEXTRACTI128 $1, Y, TX \
	VPXORQ TX, X, X

// LOADBLOCKS: D = 64 bytes at m, each block byte-reversed.
#define LOADBLOCKS(m, D) \
	VMOVDQU64 m, D \
	VPSHUFB Z31, D, D

// func ghashUpdate(k *key, acc *[16]byte, p *byte, n int)
TEXT ·ghashUpdate(SB), NOSPLIT, $0-32
	MOVQ k+0(FP), BX
	MOVQ acc+8(FP), DI
	MOVQ p+16(FP), SI
	MOVQ n+24(FP), CX

	VMOVDQU64 bswapMask<>(SB), Z31
	VMOVDQU64 gfPoly<>(SB), Z30
	VMOVDQU (DI), X0 // the upper lanes zeroed
	VMOVDQU64 HTAB+0(BX), Z20   // H^16..H^13
	VMOVDQU64 HTAB+64(BX), Z21  // H^12..H^9
	VMOVDQU64 HTAB+128(BX), Z22 // H^8..H^5
	VMOVDQU64 HTAB+192(BX), Z23 // H^4..H^1

gh256:
	CMPQ CX, $256
	JB gh64
	LOADBLOCKS(0(SI), Z1)
	LOADBLOCKS(64(SI), Z2)
	LOADBLOCKS(128(SI), Z3)
	LOADBLOCKS(192(SI), Z4)
	VPXORQ Z0, Z1, Z1
	MULSET(Z1, Z20, Z5, Z6, Z7, Z8)
	MULACC(Z2, Z21, Z5, Z6, Z7, Z8, Z9)
	MULACC(Z3, Z22, Z5, Z6, Z7, Z8, Z9)
	MULACC(Z4, Z23, Z5, Z6, Z7, Z8, Z9)
	REDUCE(Z5, Z6, Z7, Z8, Z30)
	HSUM(Z7, Y7, X7, Y8, X8)
	VMOVDQA64 Z7, Z0
	ADDQ $256, SI
	SUBQ $256, CX
	JMP gh256

gh64:
	CMPQ CX, $64
	JB ghTail
	LOADBLOCKS((SI), Z1)
	VPXORQ Z0, Z1, Z1
	MULSET(Z1, Z23, Z5, Z6, Z7, Z8)
	REDUCE(Z5, Z6, Z7, Z8, Z30)
	HSUM(Z7, Y7, X7, Y8, X8)
	VMOVDQA64 Z7, Z0
	ADDQ $64, SI
	SUBQ $64, CX
	JMP gh64

ghTail:
	// The last 1..63 bytes, zero-padded to b blocks by a masked load,
	// times H^b..H^1 (the 64 bytes of htab from entry 16-b; the lanes
	// past the last block are zero).
	TESTQ CX, CX
	JZ ghDone
	MOVQ $1, AX
	SHLQ CX, AX
	DECQ AX
	KMOVQ AX, K1
	VMOVDQU8.Z (SI), K1, Z1
	VPSHUFB Z31, Z1, Z1
	VPXORQ Z0, Z1, Z1
	LEAQ 15(CX), AX
	ANDQ $-16, AX
	MOVQ $256, DX
	SUBQ AX, DX
	VMOVDQU64 HTAB(BX)(DX*1), Z9
	MULSET(Z1, Z9, Z5, Z6, Z7, Z8)
	REDUCE(Z5, Z6, Z7, Z8, Z30)
	HSUM(Z7, Y7, X7, Y8, X8)
	VMOVDQA64 Z7, Z0

ghDone:
	VMOVDQU X0, (DI)
	VZEROUPPER
	RET

// The stitched loops of sealBulk and openBulk: 256 bytes an iteration,
// sixteen counter blocks through AES in four registers while GHASH
// takes sixteen ciphertext blocks (the previous iteration's output when
// sealing, this iteration's input when opening) times H^16..H^1 from
// memory, with one reduction. Registers: Z16..Z26 the round keys, Z28
// the counters, Z29 four, Z30 gfPoly, Z31 bswapMask, R10 the rounds,
// X13 the GHASH
// accumulator (its upper lanes zero), BX the key, SI src, DI dst, G the
// GHASH input.

// GHASH16(G): the accumulator Z13 updated by the 256 bytes at G.
#define GHASH16(G) \
	LOADBLOCKS(0(G), Z4) \
	LOADBLOCKS(64(G), Z5) \
	LOADBLOCKS(128(G), Z6) \
	LOADBLOCKS(192(G), Z7) \
	VPXORQ Z13, Z4, Z4 \
	MULSET(Z4, HTAB+0(BX), Z8, Z9, Z10, Z11) \
	MULACC(Z5, HTAB+64(BX), Z8, Z9, Z10, Z11, Z12) \
	MULACC(Z6, HTAB+128(BX), Z8, Z9, Z10, Z11, Z12) \
	MULACC(Z7, HTAB+192(BX), Z8, Z9, Z10, Z11, Z12) \
	REDUCE(Z8, Z9, Z10, Z11, Z30) \
	HSUM(Z10, Y10, X10, Y11, X11) \
	VMOVDQA64 Z10, Z13

// CTR16: sixteen counter blocks into Z0..Z3, AES's first whitening done.
#define CTR16 \
	NEXTCTR(Z0) \
	NEXTCTR(Z1) \
	NEXTCTR(Z2) \
	NEXTCTR(Z3) \
	VPXORQ Z16, Z0, Z0 \
	VPXORQ Z16, Z1, Z1 \
	VPXORQ Z16, Z2, Z2 \
	VPXORQ Z16, Z3, Z3

// XORSTORE16: the last round, then the key stream xored with the 256
// bytes at SI into DI.
#define XORSTORE16 \
	VAESENCLAST Z26, Z0, Z0 \
	VAESENCLAST Z26, Z1, Z1 \
	VAESENCLAST Z26, Z2, Z2 \
	VAESENCLAST Z26, Z3, Z3 \
	VPXORQ 0(SI), Z0, Z0 \
	VPXORQ 64(SI), Z1, Z1 \
	VPXORQ 128(SI), Z2, Z2 \
	VPXORQ 192(SI), Z3, Z3 \
	VMOVDQU64 Z0, 0(DI) \
	VMOVDQU64 Z1, 64(DI) \
	VMOVDQU64 Z2, 128(DI) \
	VMOVDQU64 Z3, 192(DI)

// STITCH(G, L): AES of sixteen counter blocks into DI (xored with SI) and
// GHASH of the 256 bytes at G, interleaved (L a label of its own). G's
// bytes are loaded before DI is written (opening in place: G == SI == DI).
#define STITCH(G, L) \
	CTR16 \
	LOADBLOCKS(0(G), Z4) \
	ROUND4(Z17, Z0, Z1, Z2, Z3) \
	LOADBLOCKS(64(G), Z5) \
	VPXORQ Z13, Z4, Z4 \
	LOADBLOCKS(128(G), Z6) \
	ROUND4(Z18, Z0, Z1, Z2, Z3) \
	LOADBLOCKS(192(G), Z7) \
	MULSET(Z4, HTAB+0(BX), Z8, Z9, Z10, Z11) \
	ROUND4(Z19, Z0, Z1, Z2, Z3) \
	MULACC(Z5, HTAB+64(BX), Z8, Z9, Z10, Z11, Z12) \
	ROUND4(Z20, Z0, Z1, Z2, Z3) \
	MULACC(Z6, HTAB+128(BX), Z8, Z9, Z10, Z11, Z12) \
	ROUND4(Z21, Z0, Z1, Z2, Z3) \
	MULACC(Z7, HTAB+192(BX), Z8, Z9, Z10, Z11, Z12) \
	ROUND4(Z22, Z0, Z1, Z2, Z3) \
	VPCLMULQDQ $0x10, Z30, Z8, Z11 \
	VPSHUFD $0x4e, Z8, Z8 \
	VPTERNLOGD $0x96, Z11, Z8, Z9 \
	ROUND4(Z23, Z0, Z1, Z2, Z3) \
	VPCLMULQDQ $0x10, Z30, Z9, Z11 \
	VPSHUFD $0x4e, Z9, Z9 \
	VPTERNLOGD $0x96, Z11, Z9, Z10 \
	ROUND4(Z24, Z0, Z1, Z2, Z3) \
	HSUM(Z10, Y10, X10, Y11, X11) \
	VMOVDQA64 Z10, Z13 \
	ROUND4(Z25, Z0, Z1, Z2, Z3) \
	EXTRA4(L) \
	XORSTORE16

// BULKSETUP: the constants, counters (from AX), round keys (BX) and
// accumulator (R9).
#define BULKSETUP \
	VMOVDQU64 bswapMask<>(SB), Z31 \
	VMOVDQU64 gfPoly<>(SB), Z30 \
	VBROADCASTI32X4 (AX), Z28 \
	VPSHUFB Z31, Z28, Z28 \
	VPADDD ctrLanes<>(SB), Z28, Z28 \
	VMOVDQU64 ctrFour<>(SB), Z29 \
	LOADKEYS(BX) \
	VMOVDQU (R9), X13

// func sealBulk(k *key, acc *[16]byte, ctr *[16]byte, dst, src *byte, n int)
//
// Seals n bytes (a multiple of 256, at least 256) of src into dst: the
// counter mode from ctr, and GHASH of the ciphertext from acc.
TEXT ·sealBulk(SB), NOSPLIT, $0-48
	MOVQ k+0(FP), BX
	MOVQ acc+8(FP), R9
	MOVQ ctr+16(FP), AX
	MOVQ dst+24(FP), DI
	MOVQ src+32(FP), SI
	MOVQ n+40(FP), CX
	MOVQ ROUNDS(BX), R10
	BULKSETUP
	// The first 256 bytes: AES only; GHASH follows one iteration behind.
	CTR16
	ROUND4(Z17, Z0, Z1, Z2, Z3)
	ROUND4(Z18, Z0, Z1, Z2, Z3)
	ROUND4(Z19, Z0, Z1, Z2, Z3)
	ROUND4(Z20, Z0, Z1, Z2, Z3)
	ROUND4(Z21, Z0, Z1, Z2, Z3)
	ROUND4(Z22, Z0, Z1, Z2, Z3)
	ROUND4(Z23, Z0, Z1, Z2, Z3)
	ROUND4(Z24, Z0, Z1, Z2, Z3)
	ROUND4(Z25, Z0, Z1, Z2, Z3)
	EXTRA4(sealFirstExtra)
	XORSTORE16
	MOVQ DI, R8
	ADDQ $256, SI
	ADDQ $256, DI
	SUBQ $256, CX

sealLoop:
	CMPQ CX, $256
	JB sealLast
	STITCH(R8, sealExtra)
	ADDQ $256, R8
	ADDQ $256, SI
	ADDQ $256, DI
	SUBQ $256, CX
	JMP sealLoop

sealLast:
	GHASH16(R8)
	VMOVDQU X13, (R9)
	VZEROUPPER
	RET

// func openBulk(k *key, acc *[16]byte, ctr *[16]byte, dst, src *byte, n int)
//
// Opens n bytes (a multiple of 256, at least 256) of src into dst: GHASH
// of the ciphertext from acc, and the counter mode from ctr.
TEXT ·openBulk(SB), NOSPLIT, $0-48
	MOVQ k+0(FP), BX
	MOVQ acc+8(FP), R9
	MOVQ ctr+16(FP), AX
	MOVQ dst+24(FP), DI
	MOVQ src+32(FP), SI
	MOVQ n+40(FP), CX
	MOVQ ROUNDS(BX), R10
	BULKSETUP

openLoop:
	CMPQ CX, $256
	JB openDone
	STITCH(SI, openExtra)
	ADDQ $256, SI
	ADDQ $256, DI
	SUBQ $256, CX
	JMP openLoop

openDone:
	VMOVDQU X13, (R9)
	VZEROUPPER
	RET
