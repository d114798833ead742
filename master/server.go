package master

import (
	"context"
	"net"
	"time"
	"unsafe"

	"google.golang.org/grpc"

	"github.com/tierstore/tierstore/internal/errcode"
	pb "github.com/tierstore/tierstore/internal/rpcpb"
	"github.com/tierstore/tierstore/masterapi"
	"github.com/tierstore/tierstore/mastergrpc"
)

// Server exposes an API (normally a *Service) as the gRPC service
// tierstore.master.v1.Master.
type Server struct {
	pb.UnimplementedMasterServer
	api masterapi.API
	gs  *grpc.Server
}

// NewServer returns a gRPC server for api. Extra options are appended to the
// defaults (mastergrpc.ServerOptions: message size limit mastergrpc.MaxMessageSize,
// static flow-control windows; a caller of another protocol
// version than pb.MasterProtocol is refused, pb.VersionCheck, and so is a
// call to the service's name before protocol 5, or of a method renamed
// since by a caller of another version, pb.FormerService). When api is a
// *Service its Interceptor runs innermost: the term trailer of an elected
// leader, and "ask again" for misses inside the rebuild window.
func NewServer(api masterapi.API, opts ...grpc.ServerOption) *Server {
	all := append(append(mastergrpc.ServerOptions(),
		grpc.ChainUnaryInterceptor(pb.VersionCheck("master", pb.MasterProtocol)),
		pb.FormerService("master", pb.MasterProtocol, "tierstore.rpc.Master")), opts...)
	if svc, ok := api.(*Service); ok {
		all = append(all, grpc.ChainUnaryInterceptor(svc.Interceptor()))
	}
	s := &Server{api: api, gs: grpc.NewServer(all...)}
	pb.RegisterMasterServer(s.gs, s)
	return s
}

// Serve accepts connections on lis until Stop or GracefulStop.
func (s *Server) Serve(lis net.Listener) error { return s.gs.Serve(lis) }

// GracefulStop stops accepting connections and waits for pending RPCs.
func (s *Server) GracefulStop() { s.gs.GracefulStop() }

// Stop closes every connection at once.
func (s *Server) Stop() { s.gs.Stop() }

// GRPC returns the underlying grpc.Server (to register more services on the
// same port).
func (s *Server) GRPC() *grpc.Server { return s.gs }

func toStatus(err error) error { return errcode.ToStatus(err) }

func keyResults(errs []error) *pb.KeyResults {
	out := &pb.KeyResults{Results: make([]*pb.KeyResult, len(errs))}
	for i, e := range errs {
		r := &pb.KeyResult{}
		if e != nil {
			r.Code, r.Message = int32(errcode.Of(e)), e.Error()
		}
		out.Results[i] = r
	}
	return out
}

// views returns keys as strings that share the request's bytes, for a call
// that does not retain its keys beyond the call (ReconcileKeys: the
// request outlives the handler's use of them; a reconcile of millions of
// keys then leaves half the garbage for the GC of a large heap).
func views(keys [][]byte) []string {
	out := make([]string, len(keys))
	for i, k := range keys {
		out[i] = unsafe.String(unsafe.SliceData(k), len(k))
	}
	return out
}

func strs(keys [][]byte) []string {
	out := make([]string, len(keys))
	for i, k := range keys {
		out[i] = string(k)
	}
	return out
}

func infoPB(in masterapi.ObjectInfo) *pb.ObjectInfo {
	out := &pb.ObjectInfo{Key: []byte(in.Key), Size: in.Size, Crc: in.CRC, Replicas: make([]*pb.Replica, len(in.Replicas))}
	if !in.LeaseDeadline.IsZero() {
		out.LeaseDeadlineUnixNano = in.LeaseDeadline.UnixNano()
	}
	for i, r := range in.Replicas {
		out.Replicas[i] = mastergrpc.ReplicaPB(r)
	}
	return out
}

func lookupCtx(ctx context.Context, offload bool) context.Context {
	if offload {
		return masterapi.WithOffloadPath(ctx)
	}
	return ctx
}

func (s *Server) MountSegment(ctx context.Context, r *pb.MountSegmentRequest) (*pb.MountSegmentResponse, error) {
	err := s.api.MountSegment(ctx, masterapi.MountRequest{Node: r.GetNode(), Endpoint: r.GetEndpoint(), Segment: r.GetSegment(), Size: r.GetSize(), Incarnation: r.GetIncarnation(), HoldAllocation: r.GetHoldAllocation()})
	return &pb.MountSegmentResponse{}, toStatus(err)
}

func (s *Server) UnmountSegment(ctx context.Context, r *pb.UnmountSegmentRequest) (*pb.UnmountSegmentResponse, error) {
	return &pb.UnmountSegmentResponse{}, toStatus(s.api.UnmountSegment(ctx, r.GetNode(), r.GetSegment()))
}

func (s *Server) LeaveNode(ctx context.Context, r *pb.LeaveNodeRequest) (*pb.Empty, error) {
	return &pb.Empty{}, toStatus(s.api.LeaveNode(ctx, r.GetNode(), r.GetIncarnation()))
}

func (s *Server) Ping(ctx context.Context, r *pb.PingRequest) (*pb.PingResponse, error) {
	p, err := s.api.Ping(ctx, r.GetNode())
	if err != nil {
		return nil, toStatus(err)
	}
	return &pb.PingResponse{Status: pb.NodeStatus(p.Status), ClientTtlMs: p.ClientTTL.Milliseconds(), Term: p.Term}, nil
}

func (s *Server) PutStart(ctx context.Context, r *pb.PutStartRequest) (*pb.PutStartResponse, error) {
	rep, err := s.api.PutStart(ctx, putStartRequestFromPB(r))
	if err != nil {
		return nil, toStatus(err)
	}
	out := &pb.PutStartResponse{}
	out.Replica, out.More = putReplyPB(rep)
	return out, nil
}

func (s *Server) PutEnd(ctx context.Context, r *pb.KeyRequest) (*pb.Empty, error) {
	return &pb.Empty{}, toStatus(s.api.PutEnd(ctx, string(r.GetKey()), r.GetPutToken()))
}

func (s *Server) PutRevoke(ctx context.Context, r *pb.KeyRequest) (*pb.Empty, error) {
	return &pb.Empty{}, toStatus(s.api.PutRevoke(ctx, string(r.GetKey()), r.GetPutToken()))
}

// puts reads the keys and put tokens of a batch put call: one token per key.
func puts(r *pb.KeysRequest) ([]masterapi.PutRef, error) {
	if len(r.GetPutTokens()) != len(r.GetKeys()) {
		return nil, errcode.Errorf(errcode.InvalidParams, "master: %d put tokens for %d keys; send one per key", len(r.GetPutTokens()), len(r.GetKeys()))
	}
	out := make([]masterapi.PutRef, len(r.GetKeys()))
	for i, k := range r.GetKeys() {
		out[i] = masterapi.PutRef{Key: string(k), Token: r.GetPutTokens()[i]}
	}
	return out, nil
}

func (s *Server) BatchPutStart(ctx context.Context, r *pb.BatchPutStartRequest) (*pb.BatchPutStartResponse, error) {
	reqs := make([]masterapi.PutStartRequest, len(r.GetItems()))
	for i, it := range r.GetItems() {
		reqs[i] = putStartRequestFromPB(it)
	}
	res, err := s.api.BatchPutStart(ctx, reqs)
	if err != nil {
		return nil, toStatus(err)
	}
	out := &pb.BatchPutStartResponse{Results: make([]*pb.PutStartResult, len(res))}
	for i, x := range res {
		p := &pb.PutStartResult{}
		if x.Err != nil {
			p.Code, p.Message = int32(errcode.Of(x.Err)), x.Err.Error()
		} else {
			p.Replica, p.More = putReplyPB(x.PutStartReply)
		}
		out.Results[i] = p
	}
	return out, nil
}

func (s *Server) BatchPutEnd(ctx context.Context, r *pb.KeysRequest) (*pb.KeyResults, error) {
	ps, err := puts(r)
	if err != nil {
		return nil, toStatus(err)
	}
	errs, err := s.api.BatchPutEnd(ctx, ps)
	if err != nil {
		return nil, toStatus(err)
	}
	return keyResults(errs), nil
}

func (s *Server) BatchPutRevoke(ctx context.Context, r *pb.KeysRequest) (*pb.KeyResults, error) {
	ps, err := puts(r)
	if err != nil {
		return nil, toStatus(err)
	}
	errs, err := s.api.BatchPutRevoke(ctx, ps)
	if err != nil {
		return nil, toStatus(err)
	}
	return keyResults(errs), nil
}

func (s *Server) ExistKey(ctx context.Context, r *pb.LookupRequest) (*pb.ExistKeyResponse, error) {
	ok, err := s.api.ExistKey(lookupCtx(ctx, r.GetOffloadPath()), string(r.GetKey()))
	if err != nil {
		return nil, toStatus(err)
	}
	return &pb.ExistKeyResponse{Exists: ok}, nil
}

func (s *Server) BatchExistKey(ctx context.Context, r *pb.BatchLookupRequest) (*pb.BatchExistKeyResponse, error) {
	res, err := s.api.BatchExistKey(lookupCtx(ctx, r.GetOffloadPath()), strs(r.GetKeys()))
	if err != nil {
		return nil, toStatus(err)
	}
	results := make([]pb.ExistResult, len(res))
	out := &pb.BatchExistKeyResponse{Results: make([]*pb.ExistResult, len(res))}
	for i, x := range res {
		p := &results[i]
		p.Exists = x.Exists
		if x.Err != nil {
			p.Code, p.Message = int32(errcode.Of(x.Err)), x.Err.Error()
		}
		out.Results[i] = p
	}
	return out, nil
}

func (s *Server) GetReplicaList(ctx context.Context, r *pb.LookupRequest) (*pb.GetReplicaListResponse, error) {
	info, err := s.api.GetReplicaList(lookupCtx(ctx, r.GetOffloadPath()), string(r.GetKey()))
	if err != nil {
		return nil, toStatus(err)
	}
	return &pb.GetReplicaListResponse{Info: infoPB(info)}, nil
}

func (s *Server) BatchGetReplicaList(ctx context.Context, r *pb.BatchLookupRequest) (*pb.BatchGetReplicaListResponse, error) {
	res, err := s.api.BatchGetReplicaList(lookupCtx(ctx, r.GetOffloadPath()), strs(r.GetKeys()))
	if err != nil {
		return nil, toStatus(err)
	}
	// One backing array per message type for the whole batch.
	nrep := 0
	for _, x := range res {
		nrep += len(x.Info.Replicas)
	}
	results := make([]pb.ReplicaListResult, len(res))
	infos := make([]pb.ObjectInfo, len(res))
	reps := make([]pb.Replica, nrep)
	repPtrs := make([]*pb.Replica, nrep)
	out := &pb.BatchGetReplicaListResponse{Results: make([]*pb.ReplicaListResult, len(res))}
	for i, x := range res {
		p := &results[i]
		out.Results[i] = p
		if x.Err != nil {
			p.Code, p.Message = int32(errcode.Of(x.Err)), x.Err.Error()
			continue
		}
		in := &infos[i]
		in.Key, in.Size, in.Crc = r.GetKeys()[i], x.Info.Size, x.Info.CRC
		if !x.Info.LeaseDeadline.IsZero() {
			in.LeaseDeadlineUnixNano = x.Info.LeaseDeadline.UnixNano()
		}
		n := len(x.Info.Replicas)
		in.Replicas, repPtrs = repPtrs[:n:n], repPtrs[n:]
		for j, rp := range x.Info.Replicas {
			q := &reps[0]
			reps = reps[1:]
			q.Kind, q.Status, q.Node, q.Endpoint = pb.ReplicaKind(rp.Kind), pb.ReplicaStatus(rp.Status), rp.Node, rp.Endpoint
			q.Segment, q.Offset, q.Length, q.PutToken, q.Grant = rp.Segment, rp.Offset, rp.Length, rp.PutToken, []byte(rp.Grant)
			in.Replicas[j] = q
		}
		p.Info = in
	}
	return out, nil
}

func (s *Server) Remove(ctx context.Context, r *pb.RemoveRequest) (*pb.Empty, error) {
	return &pb.Empty{}, toStatus(s.api.Remove(ctx, string(r.GetKey()), r.GetForce()))
}

func (s *Server) RemoveAll(ctx context.Context, r *pb.RemoveAllRequest) (*pb.CountResponse, error) {
	n, err := s.api.RemoveAll(ctx, r.GetForce())
	return &pb.CountResponse{Count: n}, toStatus(err)
}

func (s *Server) RemoveByRegex(ctx context.Context, r *pb.RemoveByRegexRequest) (*pb.CountResponse, error) {
	n, err := s.api.RemoveByRegex(ctx, r.GetPattern(), r.GetForce())
	return &pb.CountResponse{Count: n}, toStatus(err)
}

func (s *Server) EvictDRAM(ctx context.Context, r *pb.EvictDRAMRequest) (*pb.EvictDRAMResponse, error) {
	res, err := s.api.EvictDRAM(ctx, strs(r.GetKeys()), r.GetAll())
	return evictDRAMPB(res), toStatus(err)
}

func (s *Server) OffloadHeartbeat(ctx context.Context, r *pb.OffloadHeartbeatRequest) (*pb.OffloadHeartbeatResponse, error) {
	rep, err := s.api.Heartbeat(ctx, masterapi.HeartbeatRequest{Node: r.GetNode(), Max: int(r.GetMaxTasks()),
		SSD: ssdReportFromPB(r.GetSsdReport()), WantSketch: r.GetWantSketch(), SketchVersion: r.GetSketchVersion(),
		SketchTransfer: r.GetSketchTransfer(), SketchOffset: r.GetSketchOffset()})
	if err != nil {
		return nil, toStatus(err)
	}
	out := &pb.OffloadHeartbeatResponse{Tasks: make([]*pb.OffloadTask, len(rep.Tasks)), Term: rep.Term,
		SketchChunk: sketchChunkPB(rep.Sketch), SsdReportWanted: rep.WantSSDReport}
	for i, t := range rep.Tasks {
		out.Term = t.Term
		out.Tasks[i] = &pb.OffloadTask{Key: []byte(t.Key), Segment: t.Segment, Offset: t.Offset, Length: t.Length, Size: t.Size, Crc: t.CRC}
	}
	if len(rep.Promotions) > 0 {
		out.Promotions = promoteTasksPB(rep.Promotions)
	}
	return out, nil
}

func (s *Server) PromoteEnd(ctx context.Context, r *pb.PromoteEndRequest) (*pb.KeyResults, error) {
	errs, err := s.api.PromoteEnd(ctx, r.GetNode(), promoteResultsFromPB(r.GetResults()))
	if err != nil {
		return nil, toStatus(err)
	}
	return keyResults(errs), nil
}

func ssdObjs(in []*pb.SSDObject) []masterapi.SSDObject {
	out := make([]masterapi.SSDObject, len(in))
	for i, d := range in {
		out[i] = masterapi.SSDObject{Key: string(d.GetKey()), Size: d.GetSize(), CRC: d.GetCrc()}
	}
	return out
}

func (s *Server) NotifyOffloadSuccess(ctx context.Context, r *pb.NotifyOffloadSuccessRequest) (*pb.KeyResults, error) {
	req := masterapi.NotifyRequest{Node: r.GetNode(), Persisted: ssdObjs(r.GetPersisted()), Failed: make([]masterapi.OffloadFailure, len(r.GetFailed()))}
	for i, f := range r.GetFailed() {
		req.Failed[i] = masterapi.OffloadFailure{Key: string(f.GetKey()), Retryable: f.GetRetryable(), Reason: f.GetReason()}
	}
	errs, err := s.api.NotifyOffloadSuccess(ctx, req)
	if err != nil {
		return nil, toStatus(err)
	}
	return keyResults(errs), nil
}

func (s *Server) ReRegisterSSDObjects(ctx context.Context, r *pb.RegisterSSDObjectsRequest) (*pb.RegisterSSDObjectsResponse, error) {
	c := r.GetObjects()
	cols := masterapi.SSDColumns{Keys: c.GetKeys(), Lens: c.GetKeyLens(), Sizes: c.GetSizes(), CRCs: c.GetCrcs(), Expected: r.GetExpected()}
	var errs []error
	var err error
	if svc, ok := s.api.(*Service); ok {
		// The request was decoded for this call alone (its key bytes are a
		// copy of the wire's, held by nothing else): the master keeps them.
		errs, err = svc.reRegisterColumns(ctx, r.GetNode(), cols, true)
	} else {
		errs, err = s.api.ReRegisterSSDColumns(ctx, r.GetNode(), cols)
	}
	if err != nil {
		return nil, toStatus(err)
	}
	out := &pb.RegisterSSDObjectsResponse{}
	for i, e := range errs {
		if e != nil {
			out.Refused = append(out.Refused, uint32(i))
			out.Results = append(out.Results, &pb.KeyResult{Code: int32(errcode.Of(e)), Message: e.Error()})
		}
	}
	return out, nil
}

func (s *Server) EvictSSDReplica(ctx context.Context, r *pb.EvictSSDReplicaRequest) (*pb.EvictSSDReplicaResponse, error) {
	res, err := s.api.EvictSSDReplica(ctx, r.GetNode(), strs(r.GetKeys()))
	if err != nil {
		return nil, toStatus(err)
	}
	out := &pb.EvictSSDReplicaResponse{Count: res.Dropped, Keep: make([][]byte, len(res.Keep))}
	for i, k := range res.Keep {
		out.Keep[i] = []byte(k)
	}
	return out, nil
}

func (s *Server) ReconcileBegin(ctx context.Context, r *pb.ReconcileBeginRequest) (*pb.ReconcileBeginResponse, error) {
	ses, err := s.api.ReconcileBegin(ctx, r.GetNode(), masterapi.SlotDigest{Counts: r.GetCounts(), Sums: r.GetSums()})
	if err != nil {
		return nil, toStatus(err)
	}
	return &pb.ReconcileBeginResponse{Session: ses.ID, Differ: ses.Differ}, nil
}

func (s *Server) ReconcileKeys(ctx context.Context, r *pb.ReconcileKeysRequest) (*pb.ReconcileKeysResponse, error) {
	res, err := s.api.ReconcileKeys(ctx, r.GetNode(), r.GetSession(), views(r.GetKeys()))
	if err != nil {
		return nil, toStatus(err)
	}
	return &pb.ReconcileKeysResponse{Unwanted: keyBytes(res.Unwanted)}, nil
}

func (s *Server) ReconcileEnd(ctx context.Context, r *pb.ReconcileEndRequest) (*pb.ReconcileEndResponse, error) {
	n, err := s.api.ReconcileEnd(ctx, r.GetNode(), r.GetSession())
	if err != nil {
		return nil, toStatus(err)
	}
	return &pb.ReconcileEndResponse{Count: n}, nil
}

func keyBytes(keys []string) [][]byte {
	out := make([][]byte, len(keys))
	for i, k := range keys {
		out[i] = []byte(k)
	}
	return out
}

func (s *Server) ReportBadReplica(ctx context.Context, r *pb.ReportBadReplicaRequest) (*pb.Empty, error) {
	var rep masterapi.Replica
	if p := r.GetReplica(); p != nil {
		rep = mastergrpc.ReplicaFromPB(p)
	}
	return &pb.Empty{}, toStatus(s.api.ReportBadReplica(ctx, string(r.GetKey()), r.GetCrc(), rep))
}

func (s *Server) Stats(ctx context.Context, _ *pb.StatsRequest) (*pb.StatsResponse, error) {
	x, err := s.api.Stats(ctx)
	if err != nil {
		return nil, toStatus(err)
	}
	rows := make([]*pb.NodeStats, len(x.PerNode))
	for i, n := range x.PerNode {
		rows[i] = &pb.NodeStats{Node: n.Node, Endpoint: n.Endpoint, Incarnation: n.Incarnation, Alive: n.Alive,
			Segments: n.Segments, SegmentSize: n.SegmentSize, SegmentUsed: n.SegmentUsed,
			DramReplicas: n.DRAMReplicas, DramBytes: n.DRAMBytes, SsdReplicas: n.SSDReplicas, SsdBytes: n.SSDBytes,
			OffloadQueued: n.OffloadQueued, OffloadInFlight: n.OffloadInFlight}
	}
	return &pb.StatsResponse{PerNode: rows, Objects: x.Objects, DramReplicas: x.DRAMReplicas, SsdReplicas: x.SSDReplicas,
		DramBytes: x.DRAMBytes, SsdBytes: x.SSDBytes, Segments: x.Segments, SegmentCapacity: x.SegmentCapacity,
		SegmentUsed: x.SegmentUsed, Nodes: x.Nodes, OffloadQueued: x.OffloadQueued, OffloadInFlight: x.OffloadInFlight,
		Evictions: x.Evictions, OffloadQueuedTotal: x.OffloadQueuedTot, OffloadPersistedTotal: x.OffloadPersisted,
		OffloadFailedTotal: x.OffloadFailed, ExpiredNodesTotal: x.ExpiredNodes,
		PromotionsTotal: x.Promotions, PromotionsAbandonedTotal: x.PromotionsAbandoned}, nil
}

func (s *Server) WaitOffload(ctx context.Context, r *pb.WaitOffloadRequest) (*pb.WaitOffloadResponse, error) {
	w, ok := s.api.(masterapi.OffloadWaiter)
	if !ok {
		return nil, toStatus(errcode.Errorf(errcode.UnableOffload, "master: wait_offload: not implemented by %T", s.api))
	}
	pressed, err := w.WaitOffload(ctx, r.GetNode(), time.Duration(r.GetTimeoutMs())*time.Millisecond)
	if err != nil {
		return nil, toStatus(err)
	}
	return &pb.WaitOffloadResponse{Pressed: pressed}, nil
}

func (s *Server) Touch(ctx context.Context, r *pb.KeysRequest) (*pb.Empty, error) {
	t, ok := s.api.(masterapi.Toucher)
	if !ok {
		return nil, toStatus(errcode.Errorf(errcode.InvalidParams, "master: touch: not implemented by %T", s.api))
	}
	return &pb.Empty{}, toStatus(t.Touch(ctx, strs(r.GetKeys())))
}

func (s *Server) Prefetch(ctx context.Context, r *pb.KeysRequest) (*pb.PrefetchResponse, error) {
	p, ok := s.api.(masterapi.Prefetcher)
	if !ok {
		return nil, toStatus(errcode.Errorf(errcode.UnableOffload, "master: prefetch: not implemented by %T", s.api))
	}
	n, err := p.Prefetch(ctx, strs(r.GetKeys()))
	if err != nil {
		return nil, toStatus(err)
	}
	return &pb.PrefetchResponse{Queued: int32(n)}, nil
}

// sketchChunkPB converts a sketch chunk to its wire form (nil: absent).
func sketchChunkPB(c *masterapi.SketchChunk) *pb.SketchChunk {
	if c == nil {
		return nil
	}
	return &pb.SketchChunk{Version: c.Version, Width: c.Width, DoorBits: c.DoorBits, Period: c.Period, Samples: c.Samples,
		Resets: c.Resets, Offset: c.Offset, Total: c.Total, Data: c.Data}
}
