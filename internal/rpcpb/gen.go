package rpcpb

//go:generate ./protogen.sh .
