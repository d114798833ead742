package aesgcm

import "encoding/binary"

// The AES-128 and AES-256 key schedule (FIPS-197, 5.2) and GHASH's key
// powers, in Go and constant-time: the S-box is computed (inversion in GF(2^8) by
// exponentiation, then the affine map), not looked up in a table indexed
// by key bytes.

// gmul multiplies in AES's GF(2^8) (x^8 + x^4 + x^3 + x + 1) without
// branches on its operands.
func gmul(a, b byte) byte {
	var p byte
	for range 8 {
		p ^= a & -(b & 1)
		b >>= 1
		a = a<<1 ^ 0x1b&-(a>>7)
	}
	return p
}

// sbox is AES's S-box: the inverse (a^254; 0 for 0), then the affine map.
func sbox(a byte) byte {
	r := a
	for range 6 {
		r = gmul(gmul(r, r), a)
	}
	b := gmul(r, r)
	return b ^ rotl8(b, 1) ^ rotl8(b, 2) ^ rotl8(b, 3) ^ rotl8(b, 4) ^ 0x63
}

func rotl8(b byte, n uint) byte { return b<<n | b>>(8-n) }

// expandKey writes the round keys of key (16 or 32 bytes: AES-128 or
// AES-256) into k.rk, each in all four lanes, in the assembly's slots:
// 0..9 the first ten round keys, 10 the last, 11..14 AES-256's round keys
// 10..13; and the number of rounds into k.rounds.
func expandKey(key []byte, k *key) {
	nk := len(key) / 4
	nr := nk + 6
	var w [60][4]byte
	for i := range nk {
		copy(w[i][:], key[4*i:])
	}
	rc := byte(1)
	for i := nk; i < 4*(nr+1); i++ {
		t := w[i-1]
		switch {
		case i%nk == 0:
			t = [4]byte{sbox(t[1]) ^ rc, sbox(t[2]), sbox(t[3]), sbox(t[0])}
			rc = gmul(rc, 2)
		case nk > 6 && i%nk == 4:
			t = [4]byte{sbox(t[0]), sbox(t[1]), sbox(t[2]), sbox(t[3])}
		}
		for j := range 4 {
			w[i][j] = w[i-nk][j] ^ t[j]
		}
	}
	for r := 0; r <= nr; r++ {
		slot := r
		switch {
		case r == nr:
			slot = 10
		case r >= 10:
			slot = r + 1
		}
		for lane := range 4 {
			for j := range 4 {
				copy(k.rk[slot*64+lane*16+4*j:], w[4*r+j][:])
			}
		}
	}
	k.rounds = nr
	clear(w[:])
}

// A GHASH field element as a 128-bit integer: the block's bytes read
// big-endian, so that bit 127 is the coefficient of x^0 and bit 0 that of
// x^127 (GCM's bit order); hi and lo are its halves.
type elem struct{ hi, lo uint64 }

// gfMul is GCM's multiplication (SP 800-38D, algorithm 1), without
// branches on the operands.
func gfMul(x, y elem) elem {
	var z elem
	v := y
	for i := range 128 {
		var bit uint64
		if i < 64 {
			bit = x.hi >> (63 - i) & 1
		} else {
			bit = x.lo >> (127 - i) & 1
		}
		m := -bit
		z.hi ^= v.hi & m
		z.lo ^= v.lo & m
		carry := -(v.lo & 1) // the coefficient of x^127 leaves: add x^128 = x^7+x^2+x+1
		v.lo = v.lo>>1 | v.hi<<63
		v.hi = v.hi>>1 ^ 0xE100000000000000&carry
	}
	return z
}

// ghashRep is e as the assembly multiplies by it: e times x^-1, which is
// the integer shifted left by one, x^-1 = x^127+x^6+x+1 added when the
// coefficient of x^0 leaves. (The assembly's product of a block and
// ghashRep(e), reduced, is the block times e: its carry-less multiply of
// bit-reflected operands yields the product times x.)
func ghashRep(e elem) elem {
	carry := -(e.hi >> 63)
	return elem{
		hi: e.hi<<1 | e.lo>>63 ^ 0xC200000000000000&carry,
		lo: e.lo<<1 ^ 1&carry,
	}
}

// powers fills k.htab from H (the encryption of the zero block).
func (k *key) powers(hBlock [16]byte) {
	h := elem{binary.BigEndian.Uint64(hBlock[:8]), binary.BigEndian.Uint64(hBlock[8:])}
	p := h
	for i := 15; i >= 0; i-- { // entry 15 is H^1, entry 0 H^16
		r := ghashRep(p)
		binary.LittleEndian.PutUint64(k.htab[16*i:], r.lo)
		binary.LittleEndian.PutUint64(k.htab[16*i+8:], r.hi)
		p = gfMul(p, h)
	}
}
