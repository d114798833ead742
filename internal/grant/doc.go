// Package grant makes and checks grants: a master's signed permission for
// one read of one replica, or for the write of one put's DRAM range. A
// read grant is bound to the node, the object's key and its range (or SSD
// length); a write grant to the node, the key, the range (segment, offset,
// length) and the put token; each until an expiry. The master and the
// nodes share a secret; a grant is the expiry and an HMAC-SHA256
// (truncated to 128 bits) over a domain string of its kind (Scope.Kind:
// Read or Write, so that neither is ever taken for the other) and those
// fields, each length-prefixed so that no two scopes encode alike.
//
// Wiring (docs/security.md, Read grants and Write grants): with
// --grant_secret_file (Keys: the file's secret, re-read on change, the
// previous secret kept for verification) the master signs a read grant per
// replica when it answers a lookup (GetReplicaList and its batch), expiring
// with the lookup's read lease, and a write grant per DRAM range when it
// answers PutStart (and its batch), expiring at the put's discard deadline
// (put_start_discard_timeout after PutStart); both in the field grant of
// Replica (master protocol 8). The client passes them in the requests'
// metadata (data plane version 3); the node checks them on every
// data-plane read and write (node/grants.go), refusing with ErrMissing,
// ErrForged or ErrExpired wrapped in PERMISSION_DENIED, and the client
// finds the sentinel again in the refusal's text (Restore). A Verifier
// holds the current and the previous secret, so that a rotation fails no
// read or write in flight.
//
// Cost: one Verify is about a microsecond (BenchmarkVerify), against
// hundreds of microseconds for the smallest remote get or put.
//
// Concurrency: a Signer and a Verifier are safe for concurrent use.
package grant
