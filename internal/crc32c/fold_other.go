//go:build !amd64

package crc32c

import "hash/crc32"

// hasFold: folding with carry-less multiplies is written for amd64 only.
const hasFold = false

func update(crc uint32, b []byte) uint32 { return crc32.Update(crc, Table, b) }

func updateFold(crc uint32, b []byte) uint32 { return crc32.Update(crc, Table, b) }
