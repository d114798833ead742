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
	"google.golang.org/grpc/backoff"

	"github.com/tierstore/tierstore/internal/errcode"
	pb "github.com/tierstore/tierstore/internal/rpcpb"
	"github.com/tierstore/tierstore/mastergrpc"
)

// rebuildingMaster answers ExistKey "ask again" (UNAVAILABLE_IN_CURRENT_
// STATUS, mastergrpc.AskAgainStatus) for its first `again` calls, then exists;
// Remove answers OBJECT_NOT_FOUND, and Stats -1010 without the trailer (a
// standby's "not the leader"): neither is sent again.
type rebuildingMaster struct {
	pb.UnimplementedMasterServer
	again   int64
	exists  atomic.Int64
	removes atomic.Int64
	stats   atomic.Int64
}

func (m *rebuildingMaster) ExistKey(context.Context, *pb.LookupRequest) (*pb.ExistKeyResponse, error) {
	if n := m.exists.Add(1); n <= m.again {
		return nil, mastergrpc.AskAgainStatus(fmt.Errorf("rebuilding, ask again: %w", errcode.ErrUnavailable))
	}
	return &pb.ExistKeyResponse{Exists: true}, nil
}

func (m *rebuildingMaster) Stats(context.Context, *pb.StatsRequest) (*pb.StatsResponse, error) {
	m.stats.Add(1)
	return nil, errcode.ToStatus(fmt.Errorf("standby: not the leader: %w", errcode.ErrUnavailable))
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
	if _, err := c.Stats(ctx); !errors.Is(err, errcode.ErrUnavailable) || m.stats.Load() != 1 {
		t.Fatalf("stats of a standby: %v after %d calls, want UNAVAILABLE_IN_CURRENT_STATUS after 1", err, m.stats.Load())
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

// A call that finds the connection failed (the master was down at the last
// attempt, and gRPC's backoff would wait long before the next) asks for an
// attempt at once: once the master is back, the next call is served,
// not failed unsent; while it is down, a call fails within about
// ReconnectWait.
func TestReconnectAfterMasterRestart(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	serve := func(lis net.Listener) *grpc.Server {
		srv := grpc.NewServer()
		pb.RegisterMasterServer(srv, &rebuildingMaster{})
		go srv.Serve(lis)
		return srv
	}
	srv := serve(lis)
	c, err := mastergrpc.Dial(context.Background(), addr, grpc.WithConnectParams(grpc.ConnectParams{
		Backoff: backoff.Config{BaseDelay: time.Minute, Multiplier: 1, MaxDelay: time.Minute}, MinConnectTimeout: 5 * time.Second}))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := c.ExistKey(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	srv.Stop() // the master goes down
	for range 3 {
		start := time.Now()
		if _, err := c.ExistKey(ctx, "k"); !errors.Is(err, errcode.ErrRPCFail) {
			t.Fatalf("exists while the master is down: %v, want RPC_FAIL", err)
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Fatalf("a call while the master is down took %v", d)
		}
	}
	lis, err = net.Listen("tcp", addr) // back, on the same address
	if err != nil {
		t.Fatal(err)
	}
	defer serve(lis).Stop()
	if ok, err := c.ExistKey(ctx, "k"); err != nil || !ok {
		t.Fatalf("the first call after the master is back: %v %v (gRPC's backoff is a minute here)", ok, err)
	}
}
