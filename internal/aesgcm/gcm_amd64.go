package aesgcm

import "golang.org/x/sys/cpu"

// hasVAES: the fast path needs VAES and VPCLMULQDQ on ZMM registers and
// AVX-512 F, BW (byte masks, byte shuffles) and VL; x/sys/cpu reports them
// only when the OS saves the ZMM state.
var hasVAES = cpu.X86.HasAVX512F && cpu.X86.HasAVX512BW && cpu.X86.HasAVX512VL &&
	cpu.X86.HasAVX512VAES && cpu.X86.HasAVX512VPCLMULQDQ

// ctrXOR xors n bytes of src with AES's counter-mode key stream into
// dst, the first counter block ctr (its last four bytes a big-endian
// counter, incremented modulo 2^32 per block).
//
//go:noescape
func ctrXOR(k *key, ctr *[16]byte, dst, src *byte, n int)

// ghashUpdate runs GHASH over n bytes of p (the last block zero-padded)
// from acc, which it updates (in the assembly's byte order, reversed).
//
//go:noescape
func ghashUpdate(k *key, acc *[16]byte, p *byte, n int)

// sealBulk seals n bytes (a multiple of 256, at least 256) of src into
// dst: counter mode from ctr, and GHASH of the ciphertext from acc,
// interleaved 256 bytes at a time.
//
//go:noescape
func sealBulk(k *key, acc, ctr *[16]byte, dst, src *byte, n int)

// openBulk opens n bytes (a multiple of 256, at least 256) of src into
// dst (in place allowed): GHASH of the ciphertext from acc, and counter
// mode from ctr, interleaved 256 bytes at a time.
//
//go:noescape
func openBulk(k *key, acc, ctr *[16]byte, dst, src *byte, n int)
