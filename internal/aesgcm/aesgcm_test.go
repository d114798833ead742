package aesgcm

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"unsafe"
)

// stdGCM is crypto/cipher's GCM for key, the reference.
func stdGCM(t testing.TB, key []byte) cipher.AEAD {
	b, err := aes.NewCipher(key)
	if err != nil {
		t.Fatal(err)
	}
	g, err := cipher.NewGCM(b)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// fast is New's AEAD for key; the test is skipped where the CPU has no
// fast path.
func fast(t testing.TB, key []byte) cipher.AEAD {
	if !hasVAES {
		t.Skip("no VAES and VPCLMULQDQ with AVX-512 on this CPU")
	}
	g, err := New(key)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := g.(*gcm); !ok {
		t.Fatalf("New returned %T, not the fast path", g)
	}
	return g
}

func randBytes(r *rand.Rand, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// check seals plain with both AEADs (fresh and in place, at an odd offset
// in a buffer), wants the same bytes, opens them, and wants a flipped bit
// in the ciphertext, the tag or the additional data rejected.
func check(t *testing.T, r *rand.Rand, ours, std cipher.AEAD, plain, aad []byte) {
	t.Helper()
	nonce := randBytes(r, NonceSize)
	want := std.Seal(nil, nonce, plain, aad)
	got := ours.Seal(nil, nonce, plain, aad)
	if !bytes.Equal(got, want) {
		t.Fatalf("len %d aad %d: Seal differs from crypto/cipher's", len(plain), len(aad))
	}
	// Unaligned, with a prefix in dst, and in place.
	off := 1 + r.IntN(63)
	buf := make([]byte, off+len(plain)+TagSize+64)
	copy(buf[off:], plain)
	sealed := ours.Seal(buf[off:off], nonce, buf[off:off+len(plain)], aad)
	if &sealed[0] != &buf[off] || !bytes.Equal(sealed, want) {
		t.Fatalf("len %d aad %d: Seal in place differs", len(plain), len(aad))
	}
	pre := []byte("prefix")
	app := ours.Seal(append([]byte(nil), pre...), nonce, plain, aad)
	if !bytes.Equal(app[:len(pre)], pre) || !bytes.Equal(app[len(pre):], want) {
		t.Fatalf("len %d aad %d: Seal appending differs", len(plain), len(aad))
	}
	opened, err := ours.Open(nil, nonce, want, aad)
	if err != nil || !bytes.Equal(opened, plain) {
		t.Fatalf("len %d aad %d: Open: %v", len(plain), len(aad), err)
	}
	opened, err = ours.Open(sealed[:0], nonce, sealed, aad) // in place
	if err != nil || !bytes.Equal(opened, plain) {
		t.Fatalf("len %d aad %d: Open in place: %v", len(plain), len(aad), err)
	}
	// Tampering: a bit of the ciphertext or tag, then of the additional data.
	bad := append([]byte(nil), want...)
	bit := r.IntN(len(bad) * 8)
	bad[bit/8] ^= 1 << (bit % 8)
	dst := make([]byte, 0, len(plain))
	if out, err := ours.Open(dst, nonce, bad, aad); !errors.Is(err, ErrOpen) || out != nil {
		t.Fatalf("len %d aad %d: Open of a flipped bit %d: %v", len(plain), len(aad), bit, err)
	}
	if n := len(plain); n > 0 && !bytes.Equal(dst[:n], make([]byte, n)) {
		t.Fatalf("len %d: a failed Open left plaintext in dst", n)
	}
	tag := append([]byte(nil), want...)
	tag[len(tag)-1-r.IntN(TagSize)] ^= 0x80
	if _, err := ours.Open(nil, nonce, tag, aad); !errors.Is(err, ErrOpen) {
		t.Fatalf("len %d aad %d: Open of a flipped tag bit: %v", len(plain), len(aad), err)
	}
	if len(aad) > 0 {
		a := append([]byte(nil), aad...)
		bit := r.IntN(len(a) * 8)
		a[bit/8] ^= 1 << (bit % 8)
		if _, err := ours.Open(nil, nonce, want, a); !errors.Is(err, ErrOpen) {
			t.Fatalf("len %d aad %d: Open with a flipped bit of the additional data: %v", len(plain), len(aad), err)
		}
	}
}

// keySizes are the key lengths of the fast path: AES-128 and AES-256.
var keySizes = []int{16, 32}

// Every plaintext length 0..1200, with additional data of every length
// 0..70 in turn, random keys and nonces, both key sizes.
func TestMatchesStandardLibrary(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, size := range keySizes {
		var ours, std cipher.AEAD
		for n := 0; n <= 1200; n++ {
			if n%100 == 0 {
				key := randBytes(r, size)
				ours, std = fast(t, key), stdGCM(t, key)
			}
			check(t, r, ours, std, randBytes(r, n), randBytes(r, n%71))
		}
	}
}

// Every additional-data length 0..70 with short and long plaintexts.
func TestAdditionalData(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for _, size := range keySizes {
		key := randBytes(r, size)
		ours, std := fast(t, key), stdGCM(t, key)
		for a := 0; a <= 70; a++ {
			for _, n := range []int{0, 1, 16, 63, 64, 255, 256, 257, 1000} {
				check(t, r, ours, std, randBytes(r, n), randBytes(r, a))
			}
		}
	}
}

// Large plaintexts: a record (64 KiB) and its neighbours, 16 and 48 KiB
// and neighbours, 1 MiB; AAD of the record layer's 4 bytes.
func TestLarge(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	sizes := []int{16<<10 - 1, 16 << 10, 16<<10 + 1, 48<<10 + 5, 1 << 20, 1<<20 + 15}
	for d := -17; d <= 17; d++ {
		sizes = append(sizes, 64<<10+d)
	}
	for _, size := range keySizes {
		key := randBytes(r, size)
		ours, std := fast(t, key), stdGCM(t, key)
		for _, n := range sizes {
			check(t, r, ours, std, randBytes(r, n), randBytes(r, 4))
		}
	}
}

// The counter's low 32 bits wrap modulo 2^32 within a message (a nonce
// whose counter starts near 2^32 cannot occur with 12-byte nonces, but
// ctrXOR must agree with the definition anywhere).
func TestCounterWrap(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	for _, size := range keySizes {
		counterWrap(t, r, randBytes(r, size))
	}
}

func counterWrap(t *testing.T, r *rand.Rand, key []byte) {
	g := fast(t, key).(*gcm)
	b, _ := aes.NewCipher(key)
	ctr := [16]byte{15: 0xfd, 14: 0xff, 13: 0xff, 12: 0xff}
	copy(ctr[:12], randBytes(r, 12))
	src := randBytes(r, 300)
	got := make([]byte, len(src))
	ctrXOR(&g.k, &ctr, &got[0], &src[0], len(src))
	want := make([]byte, len(src))
	// crypto/cipher's CTR increments all 128 bits; GCM only the low 32.
	c := ctr
	for i := 0; i < len(src); i += 16 {
		var ks [16]byte
		b.Encrypt(ks[:], c[:])
		for j := i; j < min(i+16, len(src)); j++ {
			want[j] = src[j] ^ ks[j-i]
		}
		for k := 15; k >= 12; k-- {
			c[k]++
			if c[k] != 0 {
				break
			}
		}
	}
	if !bytes.Equal(got, want) {
		t.Fatal("ctrXOR across the 32-bit counter's wrap differs")
	}
}

// The key schedule against FIPS-197 appendices A.1 and A.3 (the last
// round key, in its slot), and the computed S-box at a few known points.
func TestKeySchedule(t *testing.T) {
	for in, out := range map[byte]byte{0x00: 0x63, 0x01: 0x7c, 0x53: 0xed, 0xff: 0x16, 0x9a: 0xb8} {
		if got := sbox(in); got != out {
			t.Errorf("sbox(%#x) = %#x, want %#x", in, got, out)
		}
	}
	for _, v := range []struct {
		key, last string
		rounds    int
	}{
		{"2b7e151628aed2a6abf7158809cf4f3c", "d014f9a8c9ee2589e13f0cc8b6630ca6", 10},
		{"603deb1015ca71be2b73aef0857d77811f352c073b6108d72d9810a30914dff4", "fe4890d1e6188d0b046df344706c631e", 14},
	} {
		fips, _ := hex.DecodeString(v.key)
		last, _ := hex.DecodeString(v.last)
		var k key
		expandKey(fips, &k)
		if k.rounds != v.rounds {
			t.Fatalf("%d-byte key: %d rounds", len(fips), k.rounds)
		}
		for lane := range 4 {
			if got := k.rk[640+16*lane : 656+16*lane]; !bytes.Equal(got, last) {
				t.Fatalf("%d-byte key: the last round key, lane %d: %x", len(fips), lane, got)
			}
		}
	}
}

// The offsets the assembly reads (gcm_amd64.s: EXTRA, HTAB, ROUNDS).
func TestKeyLayout(t *testing.T) {
	var k key
	if o := unsafe.Offsetof(k.htab); o != 960 {
		t.Errorf("htab at %d, the assembly reads 960", o)
	}
	if o := unsafe.Offsetof(k.rounds); o != 1280 {
		t.Errorf("rounds at %d, the assembly reads 1280", o)
	}
}

// The fallback: forced, and for keys the fast path does not take.
func TestFallback(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 10))
	forceGeneric = true
	g, err := New(randBytes(r, 16))
	forced := Fast()
	forceGeneric = false
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := g.(*gcm); ok || forced || Fast() != hasVAES {
		t.Fatal("forceGeneric: New returned the fast path")
	}
	for _, n := range []int{16, 24, 32} {
		key := randBytes(r, n)
		forceGeneric = true
		g, err := New(key)
		forceGeneric = false
		if err != nil {
			t.Fatal(err)
		}
		std := stdGCM(t, key)
		nonce, plain, aad := randBytes(r, 12), randBytes(r, 1000), randBytes(r, 13)
		if !bytes.Equal(g.Seal(nil, nonce, plain, aad), std.Seal(nil, nonce, plain, aad)) {
			t.Fatalf("fallback, key of %d bytes: differs", n)
		}
	}
	if g, err := New(make([]byte, 24)); err != nil {
		t.Fatal(err)
	} else if _, ok := g.(*gcm); ok {
		t.Fatal("New took the fast path for AES-192")
	}
	if _, err := New(make([]byte, 17)); err == nil {
		t.Fatal("New accepted a 17-byte key")
	}
}

// Seal and Open into buffers with room allocate nothing.
func TestNoAllocs(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 12))
	g := fast(t, randBytes(r, 16))
	nonce, plain, aad := randBytes(r, 12), randBytes(r, 64<<10+7), randBytes(r, 4)
	buf := make([]byte, 0, len(plain)+TagSize)
	out := make([]byte, 0, len(plain))
	var sealed []byte
	if a := testing.AllocsPerRun(20, func() { sealed = g.Seal(buf[:0], nonce, plain, aad) }); a != 0 {
		t.Errorf("Seal: %v allocations", a)
	}
	if a := testing.AllocsPerRun(20, func() {
		if _, err := g.Open(out[:0], nonce, sealed, aad); err != nil {
			panic(err)
		}
	}); a != 0 {
		t.Errorf("Open: %v allocations", a)
	}
}

// One AEAD sealing and opening from several goroutines at once (run with
// -race): New's writes are the only ones.
func TestConcurrent(t *testing.T) {
	key := make([]byte, 16)
	ours, std := fast(t, key), stdGCM(t, key)
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(w), 13))
			for range 50 {
				nonce, plain, aad := randBytes(r, 12), randBytes(r, r.IntN(5000)), randBytes(r, 4)
				sealed := ours.Seal(nil, nonce, plain, aad)
				if !bytes.Equal(sealed, std.Seal(nil, nonce, plain, aad)) {
					t.Error("concurrent Seal differs")
					return
				}
				if got, err := ours.Open(nil, nonce, sealed, aad); err != nil || !bytes.Equal(got, plain) {
					t.Errorf("concurrent Open: %v", err)
					return
				}
			}
		})
	}
	wg.Wait()
}

// Buffers that overlap other than in place panic, as crypto/cipher's do.
func TestOverlapPanics(t *testing.T) {
	g := fast(t, make([]byte, 16))
	buf := make([]byte, 200)
	defer func() {
		if recover() == nil {
			t.Fatal("Seal into a shifted overlap did not panic")
		}
	}()
	g.Seal(buf[1:1], make([]byte, 12), buf[:100], nil)
}

func FuzzMatchesStandardLibrary(f *testing.F) {
	f.Add(make([]byte, 16), make([]byte, 12), []byte("plain"), []byte("aad"))
	f.Add(make([]byte, 16), make([]byte, 12), make([]byte, 1000), make([]byte, 70))
	f.Add(make([]byte, 32), make([]byte, 12), make([]byte, 300), make([]byte, 4))
	f.Fuzz(func(t *testing.T, k, n, plain, aad []byte) {
		// Every input counts: the key (AES-256 when k is longer than 16
		// bytes) and the nonce are the first bytes of k and n,
		// zero-padded.
		key, nonce := make([]byte, 16), make([]byte, NonceSize)
		if len(k) > 16 {
			key = make([]byte, 32)
		}
		copy(key, k)
		copy(nonce, n)
		ours, std := fast(t, key), stdGCM(t, key)
		want := std.Seal(nil, nonce, plain, aad)
		if got := ours.Seal(nil, nonce, plain, aad); !bytes.Equal(got, want) {
			t.Fatalf("Seal differs: %x, want %x", got, want)
		}
		got, err := ours.Open(nil, nonce, want, aad)
		if err != nil || !bytes.Equal(got, plain) {
			t.Fatalf("Open: %v", err)
		}
		if len(want) > 0 {
			want[0] ^= 1
			if _, err := ours.Open(nil, nonce, want, aad); err == nil {
				t.Fatal("Open accepted a flipped bit")
			}
		}
	})
}

func benchAEAD(b *testing.B, g cipher.AEAD, n int, open bool) {
	plain := make([]byte, n)
	nonce, aad := make([]byte, 12), make([]byte, 4)
	buf := make([]byte, 0, n+TagSize)
	sealed := g.Seal(nil, nonce, plain, aad)
	b.SetBytes(int64(n))
	for b.Loop() {
		if open {
			if _, err := g.Open(plain[:0], nonce, sealed, aad); err != nil {
				b.Fatal(err)
			}
		} else {
			g.Seal(buf[:0], nonce, plain, aad)
		}
	}
}

// Seal and Open of 64 B, 1 KiB, a record (64 KiB) and 1 MiB, this
// package's beside crypto/cipher's, in the same run; and of a record
// with AES-256.
func BenchmarkAEAD(b *testing.B) {
	key := make([]byte, 16)
	for _, n := range []int{64, 1 << 10, 64 << 10, 1 << 20} {
		for _, op := range []string{"Seal", "Open"} {
			b.Run(fmt.Sprintf("%s/%dB/std", op, n), func(b *testing.B) {
				benchAEAD(b, stdGCM(b, key), n, op == "Open")
			})
			b.Run(fmt.Sprintf("%s/%dB/vaes", op, n), func(b *testing.B) {
				benchAEAD(b, fast(b, key), n, op == "Open")
			})
		}
	}
	key256 := make([]byte, 32)
	for _, op := range []string{"Seal", "Open"} {
		b.Run(fmt.Sprintf("%s/65536B/std256", op), func(b *testing.B) {
			benchAEAD(b, stdGCM(b, key256), 64<<10, op == "Open")
		})
		b.Run(fmt.Sprintf("%s/65536B/vaes256", op), func(b *testing.B) {
			benchAEAD(b, fast(b, key256), 64<<10, op == "Open")
		})
	}
}
