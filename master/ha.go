package master

import (
	"context"
	"fmt"
	"strings"

	"google.golang.org/grpc"

	"github.com/tierstore/tierstore/internal/errcode"
	pb "github.com/tierstore/tierstore/internal/rpcpb"
	"github.com/tierstore/tierstore/mastergrpc"
)

// High availability (docs/ha.md). Several masters campaign in etcd
// (package ha); the leader runs a Service for its term, the others answer
// UNAVAILABLE_IN_CURRENT_STATUS. A Service serves one term only: it starts
// with empty metadata, rebuilt from the nodes' re-registration (their DRAM
// objects: ReRegisterDRAMObjects, dramreg.go; their SSD objects:
// ReRegisterSSDObjects) inside its rebuild window (rebuild.go), and is
// discarded when the leadership ends.

// HAConfig makes a Service one elected leader. The zero value: no high
// availability (a single master).
type HAConfig struct {
	// Fence is consulted at the top of every API call, before anything
	// changes (ha.Leadership.Fence): once it fails the call is answered
	// ErrNotLeader and nothing changes.
	Fence func() error
	// Term is the leadership term (ha.Leadership.Term), stamped on Ping
	// and Heartbeat answers and, through Interceptor, in the
	// mastergrpc.TermTrailer of every gRPC answer.
	Term uint64
}

// on reports whether the Service is an elected leader.
func (c HAConfig) on() bool { return c.Fence != nil || c.Term != 0 }

// Term is the leadership term this Service serves (0 without HA).
func (s *Service) Term() uint64 { return s.cfg.HA.Term }

// fence is the HA part of check: ErrNotLeader once the leadership is not
// valid any more.
func (s *Service) fence() error {
	if s.cfg.HA.Fence == nil {
		return nil
	}
	if err := s.cfg.HA.Fence(); err != nil {
		return s.observe(fmt.Errorf("%w (term %d): %w", ErrNotLeader, s.cfg.HA.Term, err))
	}
	return nil
}

// Interceptor is the gRPC interceptor of a Service's server (NewServer
// installs it): an
// elected leader's stamps every answer with the term
// (mastergrpc.TermTrailer); while the rebuild window is open (rebuild.go)
// it answers ErrRebuilding ("ask again", marked for host:port clients by
// mastergrpc.AskAgainStatus) instead of a miss on
// the calls of clients (rebuildMiss).
func (s *Service) Interceptor() grpc.UnaryServerInterceptor {
	term := mastergrpc.TermMD(s.cfg.HA.Term) // once: SetTrailer copies it into each call's trailer
	stamp := s.cfg.HA.on()
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if stamp {
			_ = grpc.SetTrailer(ctx, term)
		}
		resp, err := handler(ctx, req)
		if s.rebuild.open && rebuildMiss(info.FullMethod, resp, err) && s.Rebuilding() {
			return nil, mastergrpc.AskAgainStatus(fmt.Errorf("%s: %w", s.rebuildWho(), ErrRebuilding))
		}
		return resp, err
	}
}

// rebuildMiss reports whether an answer may only mean that the node holding
// the object has not re-registered yet: a lookup miss, an unknown key or
// put token, no room (segments held for re-registration). BatchPutStart is
// never turned into a retry (its successful items hold ranges).
func rebuildMiss(method string, resp any, err error) bool {
	switch method[strings.LastIndexByte(method, '/')+1:] {
	case "ExistKey":
		r, ok := resp.(*pb.ExistKeyResponse)
		return err == nil && ok && !r.GetExists()
	case "BatchExistKey":
		if r, ok := resp.(*pb.BatchExistKeyResponse); ok && err == nil {
			for _, x := range r.GetResults() {
				if !x.GetExists() && x.GetCode() == 0 {
					return true
				}
			}
		}
		return false
	case "GetReplicaList", "Remove", "PutEnd", "PutRevoke", "PutStart":
		return missCode(errcode.Of(errcode.FromStatus(err)))
	case "BatchGetReplicaList":
		if r, ok := resp.(*pb.BatchGetReplicaListResponse); ok && err == nil {
			for _, x := range r.GetResults() {
				if missCode(errcode.Code(x.GetCode())) {
					return true
				}
			}
		}
		return false
	case "BatchPutEnd", "BatchPutRevoke":
		if r, ok := resp.(*pb.KeyResults); ok && err == nil {
			for _, x := range r.GetResults() {
				if missCode(errcode.Code(x.GetCode())) {
					return true
				}
			}
		}
		return false
	}
	return false
}

func missCode(c errcode.Code) bool {
	switch c {
	case errcode.ObjectNotFound, errcode.ReplicaIsGone, errcode.ReplicaNotFound, errcode.NoAvailableHandle:
		return true
	}
	return false
}
