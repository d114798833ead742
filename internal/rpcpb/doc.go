// Package rpcpb holds tierstore's protobuf messages and gRPC service code,
// generated from the .proto files in this directory:
//
//   - master.proto: service tierstore.master.v1.Master, spoken by store nodes and
//     clients to the master (package master implements the server,
//     master.Server; package mastergrpc the client, mastergrpc.Client);
//   - node.proto: service tierstore.node.v1.NodePeer, a store node's
//     counters (NodeStats; package node implements both sides: its server
//     and node.PeerStats). Values travel on the data plane
//     (internal/wire), not here.
//
// Nothing here is hand-written apart from this file, gen.go, protogen.sh
// and version.go; tierstore code uses these types only at the wire boundary
// and converts to its own types at once.
//
// # Regenerating
//
// The generated code is committed, so a build needs no protoc. After editing
// a .proto file run, at the repository's root,
//
//	make proto        (or go generate ./internal/rpcpb)
//
// which runs protogen.sh: protoc (Debian's protobuf-compiler, 3.21.12) with
// protoc-gen-go and protoc-gen-go-grpc, both pinned as tool lines in go.mod
// (go tool -n finds them), on master.proto and node.proto. Commit the .proto
// and the regenerated files together: `make protocheck`, part of make test,
// regenerates into a temporary directory and fails on any difference.
//
// # Versions
//
// Each service has a protocol version (version.go: MasterProtocol,
// NodeProtocol). Callers name theirs in the request metadata (WithVersion)
// and servers refuse another one with VERSION_MISMATCH, naming both
// (VersionCheck); docs/design.md, "Format and protocol versions", lists the
// versions and the compatibility window (before the first release: the
// same version only). A change that a peer of the current version could
// misread (a field renumbered, retyped or given a new meaning, a method
// removed or renamed, a message replaced) bumps the version and gets a row
// there. Within a version the usual protobuf rules hold: never reuse a
// removed field's number (mark it reserved); enum values are only appended,
// 0 is always UNSPECIFIED.
//
// Errors travel as a gRPC status carrying an errdetails.ErrorInfo (domain
// "tierstore", metadata "code" = the Mooncake code number, see
// internal/errcode); per-key results of batch calls carry `code` (0 = OK)
// and `message`. A code a peer does not know decodes as INTERNAL_ERROR with
// the number kept in the message.
package rpcpb
