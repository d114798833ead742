package client_test

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"testing"

	"github.com/tierstore/tierstore/client"
	"github.com/tierstore/tierstore/internal/errcode"
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
	if code := client.CodeOf(err); code != errcode.ObjectNotFound || code.String() != "OBJECT_NOT_FOUND" || int32(code) != -704 {
		t.Fatalf("CodeOf: %v", code)
	}
	if client.CodeOf(nil) != errcode.OK {
		t.Fatal("client.CodeOf(nil)")
	}
	all := map[client.Code]error{
		errcode.InternalError: client.ErrInternal, errcode.SegmentNotFound: client.ErrSegmentNotFound, errcode.SegmentExists: client.ErrSegmentExists,
		errcode.ClientNotFound: client.ErrClientNotFound, errcode.NoAvailableHandle: client.ErrNoAvailableHandle, errcode.InvalidKey: client.ErrInvalidKey,
		errcode.InvalidParams: client.ErrInvalidParams, errcode.ReplicaNotReady: client.ErrReplicaNotReady, errcode.ObjectNotFound: client.ErrObjectNotFound,
		errcode.ObjectExists: client.ErrObjectExists, errcode.ObjectHasLease: client.ErrObjectHasLease, errcode.ReplicaNotFound: client.ErrReplicaNotFound,
		errcode.ReplicaIsGone: client.ErrReplicaGone, errcode.TransferFail: client.ErrTransferFail, errcode.ChecksumMismatch: client.ErrChecksumMismatch,
		errcode.ChecksumConflict: client.ErrChecksumConflict, errcode.RPCFail: client.ErrRPCFail, errcode.ContextCanceled: client.ErrContextCanceled,
		errcode.UnavailableStatus: client.ErrUnavailable, errcode.ShuttingDown: client.ErrShuttingDown, errcode.KeysUltraLimit: client.ErrKeysUltraLimit,
		errcode.UnableOffload: client.ErrUnableOffload, errcode.TaskNotFound: client.ErrTaskNotFound, errcode.NeedRemount: client.ErrNeedRemount,
		errcode.VersionMismatch: client.ErrVersionMismatch, errcode.PermissionDenied: client.ErrPermissionDenied,
		errcode.PeerLimit: client.ErrPeerLimit,
	}
	for _, code := range errcode.All() {
		e, ok := all[code]
		if !ok {
			t.Errorf("code %v has no client sentinel", code)
			continue
		}
		if !errors.Is(errcode.Errorf(code, "x"), e) || client.CodeOf(e) != code {
			t.Errorf("client sentinel of %v does not match", code)
		}
	}
}
