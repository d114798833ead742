#!/bin/sh
# protogen.sh OUT generates the Go code of master.proto and node.proto into
# directory OUT (absolute, or relative to this directory) with protoc (Debian's protobuf-compiler) and the plugins
# pinned as tool lines in go.mod. `make proto` writes into this directory;
# `make protocheck` writes into a temporary one and diffs.
set -eu
out=$1
here=$(cd "$(dirname "$0")" && pwd)
cd "$here"
gen_go=$(go tool -n protoc-gen-go)
gen_grpc=$(go tool -n protoc-gen-go-grpc)
protoc --proto_path=. \
	--plugin=protoc-gen-go="$gen_go" --plugin=protoc-gen-go-grpc="$gen_grpc" \
	--go_out="$out" --go_opt=paths=source_relative \
	--go-grpc_out="$out" --go-grpc_opt=paths=source_relative \
	master.proto node.proto
