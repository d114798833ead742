// Package crc32c is the one home of the checksum every object carries: the
// CRC-32 of the Castagnoli polynomial (CRC32C), computed with the standard
// library's hardware-accelerated table. Bucket files, the data plane, the
// master's removal file and every test use it.
//
// Concurrency: the table is built once at start-up and only read; the
// functions are safe for concurrent use.
package crc32c
