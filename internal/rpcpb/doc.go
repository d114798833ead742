// Package rpcpb holds tierstore's protobuf messages and gRPC service code,
// generated from the .proto files in this directory:
//
//   - master.proto: service tierstore.rpc.Master, spoken by store nodes and
//     clients to the master (package master implements the server and the
//     client side, Server and Remote);
//   - node.proto: service tierstore.node.v1.NodePeer, a store node's
//     counters (NodeStats; package node). Values travel on the data plane
//     (internal/wire), not here.
//
// Nothing here is hand-written apart from this file and gen*.go; tierstore
// code uses these types only at the wire boundary and converts to its own
// types at once.
//
// # Regenerating
//
// The generated code is committed, so a build needs no protoc. After editing
// a .proto file run, in this directory,
//
//	go generate .
//
// which runs, for each file (see gen.go and gen_node.go):
//
//	protoc --proto_path=. --go_out=. --go_opt=paths=source_relative \
//	    --go-grpc_out=. --go-grpc_opt=paths=source_relative master.proto
//	protoc --proto_path=. --go_out=. --go_opt=paths=source_relative \
//	    --go-grpc_out=. --go-grpc_opt=paths=source_relative node.proto
//
// with protoc (3.21 or newer), protoc-gen-go v1.36.12 (the version of
// google.golang.org/protobuf in go.mod) and protoc-gen-go-grpc v1.6.x on
// PATH or in ~/go/bin. Commit the .proto and the regenerated files together.
//
// # Wire compatibility
//
// Masters and nodes of different builds talk to each other during a rolling
// upgrade, so every change must keep the wire format readable both ways:
//
//   - never renumber a field, change its type or reuse a removed field's
//     number (mark it `reserved`); never rename or renumber a service method;
//   - add new fields with new numbers; an old peer ignores them, so a new
//     field must have a meaning when it is absent (zero value = old
//     behaviour);
//   - a method's response type may be replaced only by a message whose
//     existing field numbers and types are the old ones (example:
//     EvictMemoryResponse keeps CountResponse's field 1 `count`);
//   - enum values are only appended; 0 is always UNSPECIFIED;
//   - errors travel as a gRPC status carrying an errdetails.ErrorInfo (domain
//     "tierstore", metadata "code" = the Mooncake code number, see
//     internal/codes); per-key results of batch calls carry `code` (0 = OK)
//     and `message`. A code a peer does not know decodes as INTERNAL_ERROR
//     with the number kept in the message, so new codes are safe to add.
//   - a new method answers codes.Unimplemented from an old server; callers
//     of a new method must treat that as "not supported" rather than fail
//     hard.
package rpcpb
