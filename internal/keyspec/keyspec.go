package keyspec

import (
	"strconv"
)

// MaxLen is the longest key in bytes, on every side: client, master, node,
// the SSD tier, its index and its bucket files.
const MaxLen = 4096

// showLen is how many bytes of a key Show keeps.
const showLen = 48

// Show renders key for a message or a log: Go-quoted (a key is opaque
// bytes: anything not printable is escaped), and a key longer than 48 bytes
// is cut to its first 48 bytes followed by its length, so a 4 KiB key does
// not fill an operator's screen: "abc"...(4096 bytes).
func Show[K ~string | ~[]byte](key K) string {
	if len(key) <= showLen {
		return strconv.QuoteToASCII(string(key))
	}
	return strconv.QuoteToASCII(string(key[:showLen])) + "...(" + strconv.Itoa(len(key)) + " bytes)"
}
