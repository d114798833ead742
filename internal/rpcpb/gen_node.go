package rpcpb

//go:generate sh -c "PATH=$HOME/go/bin:$PATH protoc --proto_path=. --go_out=. --go_opt=paths=source_relative --go-grpc_out=. --go-grpc_opt=paths=source_relative node.proto"
