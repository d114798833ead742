package crc32c

import (
	"hash/crc32"
	"math/rand"
	"testing"
)

// The folded CRC32C equals the standard library's for every length from
// 256 bytes (the fold's least) up, at every alignment, from any register:
// Update and Checksum as the rest of the tree calls them, and updateFold
// itself below foldMin.
func TestFoldMatchesStandardLibrary(t *testing.T) {
	if !hasFold {
		t.Skip("no AVX-512 VPCLMULQDQ here: Update is the standard library's")
	}
	rng := rand.New(rand.NewSource(1))
	buf := make([]byte, 70000)
	rng.Read(buf)
	check := func(off, n int, crc uint32) {
		t.Helper()
		b := buf[off : off+n]
		want := crc32.Update(crc, Table, b)
		if got := updateFold(crc, b); got != want {
			t.Fatalf("updateFold(%08x, %d bytes at %d) = %08x, want %08x", crc, n, off, got, want)
		}
		if got := Update(crc, b); got != want {
			t.Fatalf("Update(%08x, %d bytes at %d) = %08x, want %08x", crc, n, off, got, want)
		}
	}
	for n := 256; n <= 2100; n++ {
		check(n%64, n, rng.Uint32())
	}
	for range 2000 {
		n := 256 + rng.Intn(len(buf)-256-64)
		check(rng.Intn(64), n, rng.Uint32())
	}
	check(0, len(buf), 0)
	if got, want := Checksum(buf), crc32.Checksum(buf, Table); got != want {
		t.Fatalf("Checksum = %08x, want %08x", got, want)
	}
}

// FuzzFold: any bytes and register, the folded CRC32C is the standard one.
func FuzzFold(f *testing.F) {
	if !hasFold {
		f.Skip("no AVX-512 VPCLMULQDQ here")
	}
	f.Add(uint32(0), make([]byte, 300))
	f.Add(uint32(0xdeadbeef), make([]byte, 5000))
	f.Fuzz(func(t *testing.T, crc uint32, b []byte) {
		if len(b) < 256 {
			b = append(b, make([]byte, 256-len(b))...)
		}
		if got, want := updateFold(crc, b), crc32.Update(crc, Table, b); got != want {
			t.Fatalf("%d bytes: %08x, want %08x", len(b), got, want)
		}
	})
}

func BenchmarkUpdate(b *testing.B) {
	buf := make([]byte, 2<<20)
	for _, n := range []int{4 << 10, 128 << 10, 2 << 20} {
		b.Run(sizeName(n)+"/folded", func(b *testing.B) {
			if !hasFold {
				b.Skip("no AVX-512 VPCLMULQDQ")
			}
			b.SetBytes(int64(n))
			for b.Loop() {
				updateFold(0, buf[:n])
			}
		})
		b.Run(sizeName(n)+"/stdlib", func(b *testing.B) {
			b.SetBytes(int64(n))
			for b.Loop() {
				crc32.Update(0, Table, buf[:n])
			}
		})
	}
}

func sizeName(n int) string {
	switch {
	case n >= 1<<20:
		return itoa(n>>20) + "MiB"
	default:
		return itoa(n>>10) + "KiB"
	}
}

func itoa(n int) string {
	if n < 10 {
		return string(rune('0' + n))
	}
	return itoa(n/10) + string(rune('0'+n%10))
}

// Update allocates nothing, folded or not (a stack buffer handed to the
// standard library's indirect call would escape: one allocation per call).
func TestUpdateAllocatesNothing(t *testing.T) {
	buf := make([]byte, 128<<10)
	for _, n := range []int{100, 4 << 10, 128 << 10} {
		if a := testing.AllocsPerRun(20, func() { Update(1, buf[:n]) }); a != 0 {
			t.Errorf("Update of %d bytes: %.1f allocations", n, a)
		}
	}
}
