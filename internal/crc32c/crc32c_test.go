package crc32c

import (
	"hash/crc32"
	"testing"
)

// The known CRC32C check value of "123456789" (RFC 3720, iSCSI), and Update
// over pieces equals Checksum of the whole.
func TestChecksum(t *testing.T) {
	if got := Checksum([]byte("123456789")); got != 0xE3069283 {
		t.Fatalf("Checksum = %#x, want 0xe3069283", got)
	}
	b := []byte("tierstore keeps a CRC32C per object")
	if got, want := Update(Update(0, b[:7]), b[7:]), Checksum(b); got != want {
		t.Fatalf("Update in pieces %#x, whole %#x", got, want)
	}
	if got := crc32.Checksum(b, Table); got != Checksum(b) {
		t.Fatal("Table is not the Castagnoli table")
	}
}
