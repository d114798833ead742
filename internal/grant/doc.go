// Package grant makes and checks read grants: a master's signed permission
// for one read of one replica, bound to the node, the object's key and its
// range (or SSD key), until an expiry. The master and the nodes share a
// secret; a grant is the expiry and an HMAC-SHA256 (truncated to 128 bits)
// over a domain string and those fields, each length-prefixed so that no
// two scopes encode alike.
//
// Wiring (docs/security.md, Read grants): with --grant_secret_file
// (Keys: the file's secret, re-read on change, the previous secret kept
// for verification) the master signs a grant per replica when it answers
// a lookup (GetReplicaList and its batch; master protocol 7, field grant
// of Replica), expiring with the lookup's read lease; the client passes it
// in the read request's metadata (data plane version 2); the node checks it
// on every data-plane read (node/grants.go), refusing with ErrMissing,
// ErrForged or ErrExpired wrapped in PERMISSION_DENIED, and the client
// finds the sentinel again in the refusal's text (Restore). A Verifier
// holds the current and the previous secret, so that a rotation fails no
// read in flight.
//
// Cost: one Verify is about a microsecond (BenchmarkVerify), against
// hundreds of microseconds for the smallest remote get.
//
// Concurrency: a Signer and a Verifier are safe for concurrent use.
package grant
