// Package errcode holds tierstore's error codes: Mooncake's ErrorCode numbers
// (mooncake-store/include/types.h) as a Go type, one sentinel error per code,
// and the conversion of those errors to and from gRPC status so that a remote
// caller can test them with errors.Is exactly like a local caller.
//
// Invariants:
//   - Every Code except OK has exactly one sentinel error; Err(c) returns it
//     and Of(Err(c)) == c.
//   - An error that crossed gRPC (ToStatus on the server, FromStatus on the
//     client) satisfies errors.Is(err, sentinel) for the same sentinel as on
//     the server, and keeps the server's message.
//   - Codes are never renumbered: they travel on the wire.
//
// Concurrency: everything here is immutable after package initialisation and
// safe for concurrent use.
package errcode
