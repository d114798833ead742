package mastergrpc_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/tierstore/tierstore/internal/errcode"
	pb "github.com/tierstore/tierstore/internal/rpcpb"
	"github.com/tierstore/tierstore/mastergrpc"
)

// rebuildingMaster answers ExistKey "ask again" (UNAVAILABLE_IN_CURRENT_
// STATUS) for its first `again` calls, then exists; Remove answers
// OBJECT_NOT_FOUND, which is never sent again.
type rebuildingMaster struct {
	pb.UnimplementedMasterServer
	again   int64
	exists  atomic.Int64
	removes atomic.Int64
}

func (m *rebuildingMaster) ExistKey(context.Context, *pb.LookupRequest) (*pb.ExistKeyResponse, error) {
	if n := m.exists.Add(1); n <= m.again {
		return nil, errcode.ToStatus(fmt.Errorf("rebuilding, ask again: %w", errcode.ErrUnavailable))
	}
	return &pb.ExistKeyResponse{Exists: true}, nil
}

func (m *rebuildingMaster) Remove(context.Context, *pb.RemoveRequest) (*pb.Empty, error) {
	m.removes.Add(1)
	return nil, errcode.ToStatus(fmt.Errorf("remove: %w", errcode.ErrObjectNotFound))
}

func serveRebuilding(t *testing.T, again int64) (*rebuildingMaster, *mastergrpc.Client) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	m := &rebuildingMaster{again: again}
	srv := grpc.NewServer()
	pb.RegisterMasterServer(srv, m)
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
	c, err := mastergrpc.Dial(context.Background(), lis.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return m, c
}

// A host:port connection sends a call answered "ask again" again until the
// master answers (a master rebuilding after a restart: the lookup of an
// object a node has not re-registered yet finds it once it has); other
// errors are answered at once.
func TestAskAgainUntilAnswered(t *testing.T) {
	m, c := serveRebuilding(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ok, err := c.ExistKey(ctx, "k")
	if err != nil || !ok {
		t.Fatalf("exists: %v %v, want true after the rebuild", ok, err)
	}
	if n := m.exists.Load(); n != 4 {
		t.Fatalf("%d calls, want 3 answered 'ask again' and 1 answered", n)
	}
	if err := c.Remove(ctx, "k", false); !errors.Is(err, errcode.ErrObjectNotFound) || m.removes.Load() != 1 {
		t.Fatalf("remove: %v after %d calls, want OBJECT_NOT_FOUND after 1", err, m.removes.Load())
	}
}

// The caller's deadline bounds the asking: "ask again" is returned when it
// ends.
func TestAskAgainWithinDeadline(t *testing.T) {
	m, c := serveRebuilding(t, 1<<40)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	_, err := c.ExistKey(ctx, "k")
	if !errors.Is(err, errcode.ErrUnavailable) && !errors.Is(err, errcode.ErrContextCanceled) && !errors.Is(err, errcode.ErrRPCFail) {
		t.Fatalf("exists past the deadline: %v", err)
	}
	if m.exists.Load() < 2 {
		t.Fatalf("%d calls: not asked again", m.exists.Load())
	}
}
