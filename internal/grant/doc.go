// Package grant makes and checks read grants: a master's signed permission
// for one read of one replica, bound to the node, the object's key and its
// range (or SSD key), until an expiry. The master and the nodes share a
// secret; a grant is the expiry and an HMAC-SHA256 (truncated to 128 bits)
// over a domain string and those fields, each length-prefixed so that no
// two scopes encode alike.
//
// It is the building block of docs/security.md's "reads bound to callers"
// (not wired yet: no master hands grants out and no node asks for them).
// The intended wiring: the master signs a grant per replica when it
// answers a lookup (GetReplicaList and its batch; the next master protocol version, a
// field of Replica), a node learns the secret at mount over mutual TLS (or
// from a file every HA master shares), and the data plane (version 2,
// a field of the read requests' metadata) and the node's gRPC reads check
// the grant on every read when TLS roles are on, refusing with ErrMissing,
// ErrForged or ErrExpired (a named status). A Verifier holds the current
// and the previous secret, so that a rotation fails no read in flight.
//
// Cost: one Verify is about a microsecond (BenchmarkVerify), against
// hundreds of microseconds for the smallest remote get.
//
// Concurrency: a Signer and a Verifier are safe for concurrent use.
package grant
