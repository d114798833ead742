package rpcpb_test

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/tierstore/tierstore/internal/errcode"
	"github.com/tierstore/tierstore/internal/rpcpb"
)

type statsServer struct {
	rpcpb.UnimplementedNodePeerServer
}

func (statsServer) NodeStats(context.Context, *rpcpb.PeerStatsRequest) (*rpcpb.PeerStatsReply, error) {
	return &rpcpb.PeerStatsReply{Segment: "seg"}, nil
}

// A caller of another protocol version is refused with VERSION_MISMATCH
// naming both versions, over real gRPC; the same version, and a caller that
// names none, are served.
func TestVersionCheck(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(rpcpb.VersionCheck("node", 3)))
	rpcpb.RegisterNodePeerServer(srv, statsServer{})
	go func() { _ = srv.Serve(lis) }()
	defer srv.Stop()
	call := func(opts ...grpc.DialOption) error {
		cc, err := grpc.NewClient(lis.Addr().String(), append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, opts...)...)
		if err != nil {
			t.Fatal(err)
		}
		defer cc.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		r, err := rpcpb.NewNodePeerClient(cc).NodeStats(ctx, &rpcpb.PeerStatsRequest{})
		if err == nil && r.GetSegment() != "seg" {
			t.Fatalf("served %+v", r)
		}
		return errcode.FromStatus(err)
	}
	if err := call(rpcpb.WithVersion(3)); err != nil {
		t.Fatalf("same version: %v", err)
	}
	if err := call(); err != nil {
		t.Fatalf("no version named: %v", err)
	}
	err = call(rpcpb.WithVersion(2))
	if !errors.Is(err, errcode.ErrVersionMismatch) || !strings.Contains(err.Error(), "node speaks protocol version 3, the caller version 2") {
		t.Fatalf("another version: %v", err)
	}
}

// A caller of a protocol that named the service otherwise (the master's
// tierstore.rpc.Master before protocol 5) is refused with VERSION_MISMATCH
// naming both sides, over real gRPC, not with "unknown service", and so is
// a caller of another version calling a method this version does not have
// (one renamed since, as in master protocol 6); an unknown method or
// service called by a caller of this version or of none stays
// UNIMPLEMENTED; the current name is served.
func TestFormerService(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(rpcpb.VersionCheck("node", 3)), rpcpb.FormerService("node", 3, "tierstore.old.NodePeer"))
	rpcpb.RegisterNodePeerServer(srv, statsServer{})
	go func() { _ = srv.Serve(lis) }()
	defer srv.Stop()
	cc, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()), rpcpb.WithVersion(2))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err = errcode.FromStatus(cc.Invoke(ctx, "/tierstore.old.NodePeer/NodeStats", &rpcpb.PeerStatsRequest{}, &rpcpb.PeerStatsReply{}))
	if !errors.Is(err, errcode.ErrVersionMismatch) || !strings.Contains(err.Error(), "node speaks protocol version 3, the caller version 2 (it called /tierstore.old.NodePeer/NodeStats") {
		t.Fatalf("former service: %v", err)
	}
	err = errcode.FromStatus(cc.Invoke(ctx, "/tierstore.node.v1.NodePeer/OldStats", &rpcpb.PeerStatsRequest{}, &rpcpb.PeerStatsReply{}))
	if !errors.Is(err, errcode.ErrVersionMismatch) || !strings.Contains(err.Error(), "the caller version 2 (it called /tierstore.node.v1.NodePeer/OldStats") {
		t.Fatalf("a method renamed since: %v", err)
	}
	same, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()), rpcpb.WithVersion(3))
	if err != nil {
		t.Fatal(err)
	}
	defer same.Close()
	for _, m := range []string{"/tierstore.other.Svc/NodeStats", "/tierstore.node.v1.NodePeer/OldStats"} {
		if err := same.Invoke(ctx, m, &rpcpb.PeerStatsRequest{}, &rpcpb.PeerStatsReply{}); status.Code(err) != codes.Unimplemented {
			t.Fatalf("unknown method %s, same version: %v", m, err)
		}
	}
	err = errcode.FromStatus(cc.Invoke(ctx, "/tierstore.node.v1.NodePeer/NodeStats", &rpcpb.PeerStatsRequest{}, &rpcpb.PeerStatsReply{}))
	if !errors.Is(err, errcode.ErrVersionMismatch) || strings.Contains(err.Error(), "it called") {
		t.Fatalf("current name, another version: %v (want VersionCheck's refusal)", err)
	}
}

// BenchmarkVersionCheck is the interceptor's cost on a served call whose
// metadata is a master call's (docs/benchmarks.md, "Stop 45: put path
// CPU").
//
//	go test -run '^$' -bench BenchmarkVersionCheck -benchmem ./internal/rpcpb
func BenchmarkVersionCheck(b *testing.B) {
	ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs(":authority", "127.0.0.1:50051",
		"content-type", "application/grpc", "user-agent", "grpc-go/1.85.0", "grpc-accept-encoding", "gzip",
		rpcpb.VersionHeader, "9"))
	check := rpcpb.VersionCheck("master", 9)
	handler := func(context.Context, any) (any, error) { return nil, nil }
	info := &grpc.UnaryServerInfo{FullMethod: "/tierstore.master.v1.Master/PutEnd"}
	for b.Loop() {
		if _, err := check(ctx, nil, info, handler); err != nil {
			b.Fatal(err)
		}
	}
}
