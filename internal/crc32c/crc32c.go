package crc32c

import "hash/crc32"

// Table is the Castagnoli table; most code wants Checksum or Update.
var Table = crc32.MakeTable(crc32.Castagnoli)

// Checksum is the CRC32C of b.
func Checksum(b []byte) uint32 { return update(0, b) }

// Update returns crc updated with b (crc being the CRC32C of the bytes
// before b).
func Update(crc uint32, b []byte) uint32 { return update(crc, b) }
