package aesgcm

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/subtle"
	"encoding/binary"
	"errors"
	"unsafe"
)

const (
	// NonceSize and TagSize are GCM's standard sizes, the only ones served.
	NonceSize = 12
	TagSize   = 16
	// maxPlain is GCM's bound on a plaintext under one nonce (2^32 - 2
	// blocks), as crypto/cipher enforces it.
	maxPlain = (1<<32 - 2) * 16
)

// ErrOpen: the ciphertext, its tag or the additional data do not
// authenticate under the key and nonce (what crypto/cipher's GCM reports
// as "cipher: message authentication failed").
var ErrOpen = errors.New("aesgcm: message authentication failed")

// forceGeneric makes New return crypto/cipher's GCM even on a CPU with the
// fast path (tests of the fallback).
var forceGeneric = false

// New returns an AES-GCM AEAD for key with a 12-byte nonce and a 16-byte
// tag. With a 16- or 32-byte key (AES-128, AES-256) on a CPU with VAES,
// VPCLMULQDQ and AVX-512 F, BW and VL, it is this package's; otherwise it
// is crypto/cipher's GCM over crypto/aes (24-byte keys included).
func New(key []byte) (cipher.AEAD, error) {
	if !hasVAES || forceGeneric || len(key) != 16 && len(key) != 32 {
		b, err := aes.NewCipher(key)
		if err != nil {
			return nil, err
		}
		return cipher.NewGCM(b)
	}
	g := new(gcm)
	expandKey(key, &g.k)
	var zero, h [16]byte
	ctrXOR(&g.k, &zero, &h[0], &zero[0], 16) // H = AES_K(0^128)
	g.k.powers(h)
	clear(h[:])
	return g, nil
}

// Fast reports whether New's AES-128 and AES-256 AEADs are this
// package's, with VAES on AVX-512, rather than crypto/cipher's (reports
// say which cipher ran).
func Fast() bool { return hasVAES && !forceGeneric }

// gcm is the fast path's AEAD: its key is only read after New, so an
// AEAD is safe for concurrent use.
type gcm struct {
	k key
}

// key is what the assembly reads: the round keys, each repeated in the
// four 128-bit lanes of a ZMM register (slots: see expandKey), the GHASH
// key's powers, and the number of rounds. Offsets are fixed in
// gcm_amd64.s (EXTRA, HTAB, ROUNDS; TestKeyLayout).
type key struct {
	rk [15 * 64]byte
	// htab holds H^16, H^15, ..., H^1 (16 bytes each, in the assembly's
	// representation: see ghashRep), then four zero entries, so that the
	// 64 bytes from entry 16-b are the powers of a last chunk of b blocks.
	htab [20 * 16]byte
	// rounds is 10 (AES-128) or 14 (AES-256).
	rounds int
}

func (*gcm) NonceSize() int { return NonceSize }
func (*gcm) Overhead() int  { return TagSize }

// Seal is crypto/cipher's AEAD Seal: it appends the ciphertext and the tag
// of plaintext and additional data to dst.
func (g *gcm) Seal(dst, nonce, plaintext, additionalData []byte) []byte {
	if len(nonce) != NonceSize {
		panic("aesgcm: incorrect nonce length given to GCM")
	}
	if uint64(len(plaintext)) > maxPlain {
		panic("aesgcm: message too large for GCM")
	}
	ret, out := sliceForAppend(dst, len(plaintext)+TagSize)
	if inexactOverlap(out, plaintext) {
		panic("aesgcm: invalid buffer overlap")
	}
	var tag [16]byte
	g.crypt(&tag, out[:len(plaintext)], plaintext, nonce, additionalData, true)
	copy(out[len(plaintext):], tag[:])
	return ret
}

// Open is crypto/cipher's AEAD Open: it authenticates ciphertext (the
// sealed bytes and the tag) and additional data and appends the
// plaintext to dst. On failure it returns ErrOpen, and the bytes it wrote
// past dst's length are zeroed.
func (g *gcm) Open(dst, nonce, ciphertext, additionalData []byte) ([]byte, error) {
	if len(nonce) != NonceSize {
		panic("aesgcm: incorrect nonce length given to GCM")
	}
	if len(ciphertext) < TagSize || uint64(len(ciphertext)) > maxPlain+TagSize {
		return nil, ErrOpen
	}
	var want, got [16]byte
	n := len(ciphertext) - TagSize
	copy(want[:], ciphertext[n:])
	ciphertext = ciphertext[:n]
	ret, out := sliceForAppend(dst, n)
	if inexactOverlap(out, ciphertext) {
		panic("aesgcm: invalid buffer overlap")
	}
	g.crypt(&got, out, ciphertext, nonce, additionalData, false)
	if subtle.ConstantTimeCompare(got[:], want[:]) != 1 {
		clear(out)
		return nil, ErrOpen
	}
	return ret, nil
}

// crypt runs the counter mode from src to dst (as long) and GHASH over the
// additional data and the ciphertext (dst when sealing, src when
// opening), and leaves the tag in tag.
func (g *gcm) crypt(tag *[16]byte, dst, src, nonce, aad []byte, seal bool) {
	var ctr, acc, blk [16]byte
	copy(ctr[:], nonce)
	ctr[15] = 1
	ctrXOR(&g.k, &ctr, &tag[0], &blk[0], 16) // E_K(J0), the tag's mask
	if len(aad) > 0 {
		ghashUpdate(&g.k, &acc, &aad[0], len(aad))
	}
	bulk := len(src) &^ 255
	binary.BigEndian.PutUint32(ctr[12:], 2)
	if bulk > 0 {
		if seal {
			sealBulk(&g.k, &acc, &ctr, &dst[0], &src[0], bulk)
		} else {
			openBulk(&g.k, &acc, &ctr, &dst[0], &src[0], bulk)
		}
	}
	if rest := len(src) - bulk; rest > 0 {
		binary.BigEndian.PutUint32(ctr[12:], 2+uint32(bulk/16))
		if seal {
			ctrXOR(&g.k, &ctr, &dst[bulk], &src[bulk], rest)
			ghashUpdate(&g.k, &acc, &dst[bulk], rest)
		} else {
			ghashUpdate(&g.k, &acc, &src[bulk], rest)
			ctrXOR(&g.k, &ctr, &dst[bulk], &src[bulk], rest)
		}
	}
	binary.BigEndian.PutUint64(blk[:8], uint64(len(aad))*8)
	binary.BigEndian.PutUint64(blk[8:], uint64(len(src))*8)
	ghashUpdate(&g.k, &acc, &blk[0], 16)
	// acc is GHASH in the assembly's order (the block's bytes reversed).
	for i := range 16 {
		tag[i] ^= acc[15-i]
	}
}

// sliceForAppend extends in by n bytes: head is the whole, tail the n
// bytes added (crypto/cipher's rule: in's spare capacity if it suffices).
func sliceForAppend(in []byte, n int) (head, tail []byte) {
	if total := len(in) + n; cap(in) >= total {
		head = in[:total]
	} else {
		head = make([]byte, total)
		copy(head, in)
	}
	tail = head[len(in):]
	return
}

// inexactOverlap reports whether x and y share memory other than at the
// same start (in place is allowed, a shifted overlap is not).
func inexactOverlap(x, y []byte) bool {
	if len(x) == 0 || len(y) == 0 || &x[0] == &y[0] {
		return false
	}
	x0, x1 := uintptr(unsafe.Pointer(&x[0])), uintptr(unsafe.Pointer(&x[len(x)-1]))
	y0, y1 := uintptr(unsafe.Pointer(&y[0])), uintptr(unsafe.Pointer(&y[len(y)-1]))
	return x0 <= y1 && y0 <= x1
}
