// Package keyspec is the one home of what every side knows about an object
// key: it is 1 to MaxLen opaque bytes, and messages and logs show it with
// Show, never as raw bytes.
//
// Invariant: Show's result is printable ASCII whatever the key holds (it is
// a Go-quoted string), and bounded whatever the key's length (48 bytes of
// the key, escaped, and the length).
//
// Concurrency: constants and pure functions only.
package keyspec
