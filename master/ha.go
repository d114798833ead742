package master

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

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
// ReRegisterSSDObjects), and is discarded when the leadership ends.

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
	// RebuildWindow: for this long after New, and while a segment waits
	// for its node's DRAM re-registration, the gRPC answers that a missing
	// object would give (lookup misses, OBJECT_NOT_FOUND, a put token the
	// master does not know, no room) are answered ErrNotLeader instead
	// ("rebuilding"), so callers retry rather than conclude that an
	// object a node has not re-registered yet does not exist. Objects the
	// master knows are served at once.
	RebuildWindow time.Duration
}

// haState is the Service's high-availability state.
type haState struct {
	// rebuildUntil is the end of the rebuild window (unix ns).
	rebuildUntil int64
	// readmitted: the offload admission of rebuilt DRAM objects ran
	// (once, when the rebuild ended).
	readmitted atomic.Bool
}

// on reports whether the Service is an elected leader.
func (c HAConfig) on() bool { return c.Fence != nil || c.Term != 0 }

func (c HAConfig) validate() error {
	if c.RebuildWindow < 0 {
		return fmt.Errorf("%w: ha_rebuild_window must be >= 0, got %v", ErrBadConfig, c.RebuildWindow)
	}
	return nil
}

// startHA opens the rebuild window. Called by New.
func (s *Service) startHA() {
	if s.cfg.HA.on() {
		s.ha.rebuildUntil = s.now() + s.cfg.HA.RebuildWindow.Nanoseconds()
		s.log.Info("leading", "term", s.cfg.HA.Term, "rebuild_window", s.cfg.HA.RebuildWindow)
	} else {
		s.ha.readmitted.Store(true)
	}
}

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

// Rebuilding reports whether the rebuild window is open: the window has not
// passed, or a live segment still waits for its node's DRAM
// re-registration.
func (s *Service) Rebuilding() bool {
	if !s.cfg.HA.on() {
		return false
	}
	return s.now() < s.ha.rebuildUntil || s.anyHeld()
}

// anyHeld reports whether a live node's segment waits for its DRAM
// re-registration (HoldAllocation).
func (s *Service) anyHeld() bool {
	s.nodesMu.RLock()
	defer s.nodesMu.RUnlock()
	for _, n := range s.nodes {
		for _, g := range n.segments {
			if g.held.Load() && g.live() {
				return true
			}
		}
	}
	return false
}

// haTick runs once the rebuild is over: the offload admission of the
// rebuilt DRAM objects, so tasks the previous leader had issued (and lost
// with its metadata) are issued again. Called by Tick.
func (s *Service) haTick() {
	if s.ha.readmitted.Load() || s.Rebuilding() {
		return
	}
	if s.ha.readmitted.Swap(true) {
		return
	}
	n := 0
	s.eachDRAM(func(_ *shard, k string, o *object) { // SSD-only objects need nothing
		s.scanVisits.Add(1)
		if o.offload == nil && o.readableDRAM() && !o.readableSSD() {
			if _, queued := s.admitToSSD(k, o, s.policy.AtPutEnd, true); queued {
				n++
			}
		}
	})
	s.log.Info("rebuild over", "term", s.cfg.HA.Term, "offloads_queued_again", n)
}

// rebuiltLease gives an object re-registered while the rebuild window is
// open a read lease of default_kv_lease_ttl: the previous leader's leases
// on it (at most that long) are honoured. Caller holds the shard lock.
func (s *Service) rebuiltLease(o *object, now int64) {
	if s.cfg.HA.on() && now < s.ha.rebuildUntil {
		o.leaseUntil = max(o.leaseUntil, now+s.cfg.DefaultKVLeaseTTL.Nanoseconds())
		o.dramLeaseUntil = max(o.dramLeaseUntil, o.leaseUntil)
	}
}

// Interceptor is the gRPC interceptor of an elected leader's server
// (NewServer(svc, grpc.UnaryInterceptor(svc.Interceptor()))): it stamps
// every answer with the term (mastergrpc.TermTrailer) and, while the rebuild
// window is open, answers ErrNotLeader ("rebuilding") instead of a miss on
// the calls of clients (rebuildMiss).
func (s *Service) Interceptor() grpc.UnaryServerInterceptor {
	term := mastergrpc.TermMD(s.cfg.HA.Term) // once: SetTrailer copies it into each call's trailer
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		_ = grpc.SetTrailer(ctx, term)
		resp, err := handler(ctx, req)
		if s.cfg.HA.on() && rebuildMiss(info.FullMethod, resp, err) && s.Rebuilding() {
			return nil, errcode.ToStatus(fmt.Errorf("master: term %d is rebuilding its metadata from the nodes, ask again: %w", s.cfg.HA.Term, ErrNotLeader))
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
