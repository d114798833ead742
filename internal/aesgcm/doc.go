// Package aesgcm is the AES-128-GCM of the data plane's records
// (internal/wire/record.go, docs/format/dataplane.md "Records"): the same
// AEAD as crypto/cipher's GCM with a 12-byte nonce and a 16-byte tag, the
// same bytes for every input, three to four times its speed on a 64 KiB
// record on this project's machine (docs/benchmarks.md, "VAES AES-GCM
// for the data plane's records").
//
// Go 1.26's AES-GCM on amd64 runs AES-NI and PCLMULQDQ on 128-bit
// registers. Here, on a CPU with VAES, VPCLMULQDQ and AVX-512 F, BW and
// VL (and an OS that saves the ZMM state, as golang.org/x/sys/cpu
// reports), gcm_amd64.s runs the counter mode four blocks a ZMM register
// and GHASH with carry-less multiplies by the precomputed powers H^16..H^1,
// 256 bytes an iteration with AES and GHASH interleaved and one reduction
// per iteration; the rest of a message (under 256 bytes) goes 64 bytes
// at a time and then under a byte mask, with the same instructions.
// AES-256 keys take the same path (four more rounds); New returns
// crypto/cipher's GCM over crypto/aes on other CPUs and for AES-192 keys.
//
// Invariants:
//   - Seal and Open give crypto/cipher's results for every key, nonce,
//     plaintext and additional data (TestMatchesStandardLibrary,
//     TestAdditionalData, TestLarge, FuzzMatchesStandardLibrary), and have
//     its semantics: Seal appends to dst; dst may be the plaintext's
//     (ciphertext's) start, not another overlap (a panic); Open returns
//     ErrOpen, and no plaintext, when the tag does not match, compared in
//     constant time, the bytes it wrote zeroed.
//   - Constant time: no branch and no memory index depends on the key or
//     the data. The key schedule and the S-box are computed (key.go), not
//     looked up; GHASH is carry-less multiplies, never a table of H.
//   - Seal and Open into a buffer with room allocate nothing
//     (TestNoAllocs).
//
// Concurrency: an AEAD's key schedule and powers of H are written once by
// New and only read after; like crypto/cipher's, an AEAD is safe for
// concurrent use by several goroutines.
package aesgcm
