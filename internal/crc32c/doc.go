// Package crc32c is the one home of the checksum every object carries: the
// CRC-32 of the Castagnoli polynomial (CRC32C). Bucket files, the data
// plane, the master's removal file and every test use it.
//
// On amd64 with AVX-512 and VPCLMULQDQ, buffers of foldMin bytes or more
// are folded 256 bytes at a time with carry-less multiplies
// (fold_amd64.s, fold_amd64.go: about twice the standard library's speed
// on a 128 KiB chunk in cache); elsewhere, and for the rest, the standard
// library's hardware-accelerated table computes it. Both give the same
// value for every input (TestFoldMatchesStandardLibrary, FuzzFold): the
// format of what the checksums protect does not depend on the CPU.
//
// Concurrency: the table and the fold constants are built once at start-up
// and only read; the functions are safe for concurrent use.
package crc32c
