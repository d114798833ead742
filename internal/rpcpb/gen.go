// Package rpcpb holds tierstore's protobuf messages and gRPC service code,
// generated from the .proto files in this directory. The generated code is
// committed so that a build needs no protoc. Regenerate with `go generate`
// (protoc, protoc-gen-go v1.36.12 and protoc-gen-go-grpc v1.6.x on PATH or in
// ~/go/bin).
package rpcpb

//go:generate sh -c "PATH=$HOME/go/bin:$PATH protoc --proto_path=. --go_out=. --go_opt=paths=source_relative --go-grpc_out=. --go-grpc_opt=paths=source_relative master.proto"
