//go:build linux && amd64

package aesgcm

import (
	"bytes"
	"math/rand/v2"
	"syscall"
	"testing"
)

// The masked loads and stores of a message's last bytes touch nothing
// past its end: plaintexts, ciphertexts and additional data ending at a
// page followed by an inaccessible one seal and open (a read past the
// end would fault).
func TestGuardPage(t *testing.T) {
	page := syscall.Getpagesize()
	mem, err := syscall.Mmap(-1, 0, 4*page, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
	if err != nil {
		t.Skip(err)
	}
	defer syscall.Munmap(mem)
	// Pages 0 and 2 usable, 1 and 3 guards.
	if err := syscall.Mprotect(mem[page:2*page], syscall.PROT_NONE); err != nil {
		t.Skip(err)
	}
	if err := syscall.Mprotect(mem[3*page:], syscall.PROT_NONE); err != nil {
		t.Skip(err)
	}
	area, aadArea := mem[:page], mem[2*page:3*page]
	r := rand.New(rand.NewPCG(14, 15))
	key := randBytes(r, 16)
	ours, std := fast(t, key), stdGCM(t, key)
	nonce := randBytes(r, NonceSize)
	for n := 0; n <= 600; n++ {
		plain := randBytes(r, n)
		aad := aadArea[page-n%71:]
		copy(aad, randBytes(r, len(aad)))
		want := std.Seal(nil, nonce, plain, aad)
		// Plaintext at the end of the page, sealed into a fresh buffer.
		src := area[page-n:]
		copy(src, plain)
		if got := ours.Seal(nil, nonce, src, aad); !bytes.Equal(got, want) {
			t.Fatalf("len %d: Seal from the page's end differs", n)
		}
		// Sealed in place with the tag at the page's end, then opened in
		// place.
		buf := area[page-n-TagSize:]
		copy(buf, plain)
		if got := ours.Seal(buf[:0], nonce, buf[:n], aad); !bytes.Equal(got, want) {
			t.Fatalf("len %d: Seal into the page's end differs", n)
		}
		if got, err := ours.Open(buf[:0], nonce, buf, aad); err != nil || !bytes.Equal(got, plain) {
			t.Fatalf("len %d: Open at the page's end: %v", n, err)
		}
	}
}
