package tlsconf

import (
	"crypto/aes"
	"crypto/cipher"
	"testing"
)

// BenchmarkAESGCM is the cost of the cipher TLS 1.3 negotiates here
// (TLS_AES_128_GCM_SHA256) on one full record (16 KiB), sealed and
// opened with the standard library: the floor of what TLS adds to every
// MiB a get or a put moves (docs/benchmarks.md, "Mutual TLS end to end",
// the ceiling on this machine).
func BenchmarkAESGCM(b *testing.B) {
	blk, err := aes.NewCipher(make([]byte, 16))
	if err != nil {
		b.Fatal(err)
	}
	g, err := cipher.NewGCM(blk)
	if err != nil {
		b.Fatal(err)
	}
	nonce := make([]byte, g.NonceSize())
	plain := make([]byte, 16<<10)
	sealed := g.Seal(nil, nonce, plain, nil)
	b.Run("seal16KiB", func(b *testing.B) {
		dst := make([]byte, 0, len(sealed))
		b.SetBytes(int64(len(plain)))
		for b.Loop() {
			dst = g.Seal(dst[:0], nonce, plain, nil)
		}
	})
	b.Run("open16KiB", func(b *testing.B) {
		dst := make([]byte, 0, len(plain))
		b.SetBytes(int64(len(plain)))
		for b.Loop() {
			var err error
			if dst, err = g.Open(dst[:0], nonce, sealed, nil); err != nil {
				b.Fatal(err)
			}
		}
	})
}
