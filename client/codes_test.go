package client_test

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"testing"

	"github.com/tierstore/tierstore/client"
	"github.com/tierstore/tierstore/internal/codes"
	"github.com/tierstore/tierstore/master"
)

// The sentinels and the Code type re-exported by package client match
// the errors of a remote master, and cover every code.
func TestCodesReExported(t *testing.T) {
	mc := master.DefaultConfig()
	mc.MonitorInterval = 0
	mc.Logger = slog.New(slog.DiscardHandler)
	m, err := master.New(mc)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := master.NewServer(m)
	go func() { _ = srv.Serve(lis) }()
	defer srv.Stop()
	ctx := context.Background()
	c, err := client.New(ctx, client.Config{MasterAddr: lis.Addr().String()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_, err = c.Get(ctx, "missing")
	if !errors.Is(err, client.ErrObjectNotFound) || errors.Is(err, client.ErrReplicaGone) {
		t.Fatalf("get over gRPC: %v", err)
	}
	if code := client.CodeOf(err); code != codes.ObjectNotFound || code.String() != "OBJECT_NOT_FOUND" || int32(code) != -704 {
		t.Fatalf("CodeOf: %v", code)
	}
	if client.CodeOf(nil) != codes.OK {
		t.Fatal("client.CodeOf(nil)")
	}
	all := map[client.Code]error{
		codes.InternalError: client.ErrInternal, codes.SegmentNotFound: client.ErrSegmentNotFound, codes.SegmentExists: client.ErrSegmentExists,
		codes.ClientNotFound: client.ErrClientNotFound, codes.NoAvailableHandle: client.ErrNoAvailableHandle, codes.InvalidKey: client.ErrInvalidKey,
		codes.InvalidParams: client.ErrInvalidParams, codes.ReplicaNotReady: client.ErrReplicaNotReady, codes.ObjectNotFound: client.ErrObjectNotFound,
		codes.ObjectExists: client.ErrObjectExists, codes.ObjectHasLease: client.ErrObjectHasLease, codes.ReplicaNotFound: client.ErrReplicaNotFound,
		codes.ReplicaIsGone: client.ErrReplicaGone, codes.TransferFail: client.ErrTransferFail, codes.ChecksumMismatch: client.ErrChecksumMismatch,
		codes.ChecksumConflict: client.ErrChecksumConflict, codes.RPCFail: client.ErrRPCFail, codes.ContextCanceled: client.ErrContextCanceled,
		codes.UnavailableStatus: client.ErrUnavailable, codes.ShuttingDown: client.ErrShuttingDown, codes.KeysUltraLimit: client.ErrKeysUltraLimit,
		codes.UnableOffload: client.ErrUnableOffload, codes.TaskNotFound: client.ErrTaskNotFound, codes.NeedRemount: client.ErrNeedRemount,
		codes.VersionMismatch: client.ErrVersionMismatch, codes.PermissionDenied: client.ErrPermissionDenied,
		codes.PeerLimit: client.ErrPeerLimit,
	}
	for _, code := range codes.All() {
		e, ok := all[code]
		if !ok {
			t.Errorf("code %v has no client sentinel", code)
			continue
		}
		if !errors.Is(codes.Errorf(code, "x"), e) || client.CodeOf(e) != code {
			t.Errorf("client sentinel of %v does not match", code)
		}
	}
}
