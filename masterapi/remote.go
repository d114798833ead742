package masterapi

import (
	"context"
	"fmt"
	"math"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/tierstore/tierstore/internal/codes"
	pb "github.com/tierstore/tierstore/internal/rpcpb"
)

// Remote is a client of a master over gRPC. It implements API; errors carry
// the server's codes (errors.Is(err, codes.ErrObjectNotFound) works), and
// transport failures wrap codes.ErrRPCFail. Safe for concurrent use.
type Remote struct {
	cc   *grpc.ClientConn // nil when rc is set
	rc   *resolvingConn   // etcd:// mode (resolving.go); nil for host:port
	c    pb.MasterClient
	addr string
}

var _ API = (*Remote)(nil)

// Dial returns a Remote for the master at addr: "host:port", or
// "etcd://h1:2379,h2:2379[/prefix]" for the elected leader of highly
// available masters (it follows the leader and retries calls across a
// failover within the caller's deadline: resolving.go, docs/ha.md). It does
// not wait for the connection: the first call connects (and fails with
// codes.ErrRPCFail if the master is unreachable). Without options it uses an
// insecure (plaintext) connection; opts are appended to the defaults.
func Dial(ctx context.Context, addr string, opts ...grpc.DialOption) (*Remote, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("masterapi: dial %s: %w", addr, err)
	}
	if isEtcdURL(addr) {
		return dialLeader(addr, opts)
	}
	all := append([]grpc.DialOption{
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(MaxMessageSize), grpc.MaxCallSendMsgSize(MaxMessageSize)),
		pb.WithVersion(pb.MasterProtocol),
	}, opts...)
	cc, err := grpc.NewClient(addr, all...)
	if err != nil {
		return nil, fmt.Errorf("masterapi: dial %s: %w: %w", addr, codes.ErrRPCFail, err)
	}
	return &Remote{cc: cc, c: pb.NewMasterClient(cc), addr: addr}, nil
}

// Close closes the connection (and, in etcd:// mode, the resolver).
func (r *Remote) Close() error {
	if r.rc != nil {
		return r.rc.Close()
	}
	return r.cc.Close()
}

func fromStatus(err error) error { return codes.FromStatus(err) }

func keyBytes(keys []string) [][]byte {
	out := make([][]byte, len(keys))
	for i, k := range keys {
		out[i] = []byte(k)
	}
	return out
}

func itemErr(code int32, msg string) error { return codes.WithMessage(codes.Code(code), msg) }

// ReplicaFromPB converts a wire replica back (for the master's gRPC server).
func ReplicaFromPB(p *pb.Replica) Replica {
	return Replica{Kind: ReplicaKind(p.GetKind()), Status: ReplicaStatus(p.GetStatus()), Node: p.GetNode(),
		Endpoint: p.GetEndpoint(), Segment: p.GetSegment(), Offset: p.GetOffset(), Length: p.GetLength(),
		PutToken: p.GetPutToken()}
}

func infoFromPB(p *pb.ObjectInfo) ObjectInfo {
	in := ObjectInfo{Key: string(p.GetKey()), Size: p.GetSize(), CRC: p.GetCrc(), Replicas: make([]Replica, len(p.GetReplicas()))}
	if n := p.GetLeaseDeadlineUnixNano(); n != 0 {
		in.LeaseDeadline = time.Unix(0, n)
	}
	for i, r := range p.GetReplicas() {
		in.Replicas[i] = ReplicaFromPB(r)
	}
	return in
}

func keyErrs(r *pb.KeyResults, n int) ([]error, error) {
	if len(r.GetResults()) != n {
		return nil, fmt.Errorf("masterapi: %d results for %d items: %w", len(r.GetResults()), n, codes.ErrRPCFail)
	}
	out := make([]error, n)
	for i, x := range r.GetResults() {
		out[i] = itemErr(x.GetCode(), x.GetMessage())
	}
	return out, nil
}

// MountSegment implements API.
func (r *Remote) MountSegment(ctx context.Context, req MountRequest) error {
	_, err := r.c.MountSegment(ctx, &pb.MountSegmentRequest{Node: req.Node, Endpoint: req.Endpoint, Segment: req.Segment, Size: req.Size, Incarnation: req.Incarnation, HoldAllocation: req.HoldAllocation})
	return fromStatus(err)
}

// UnmountSegment implements API.
func (r *Remote) UnmountSegment(ctx context.Context, node, segment string) error {
	_, err := r.c.UnmountSegment(ctx, &pb.UnmountSegmentRequest{Node: node, Segment: segment})
	return fromStatus(err)
}

// Ping implements API.
func (r *Remote) Ping(ctx context.Context, node string) (PingReply, error) {
	p, err := r.c.Ping(ctx, &pb.PingRequest{Node: node})
	if err != nil {
		return PingReply{}, fromStatus(err)
	}
	return PingReply{Status: NodeStatus(p.GetStatus()), ClientTTL: time.Duration(p.GetClientTtlMs()) * time.Millisecond, Term: p.GetTerm()}, nil
}

func putPB(q PutStartRequest) *pb.PutStartRequest {
	return &pb.PutStartRequest{Key: []byte(q.Key), Size: q.Size, Crc: q.CRC, PreferredNode: q.PreferredNode, SoftPin: q.SoftPin, HardPin: q.HardPin,
		Replicas: int32(max(math.MinInt32, min(q.Replicas, math.MaxInt32))), AllowFewerReplicas: q.AllowFewer}
}

// PutStartRequestFromPB is the inverse of the request's wire form.
func PutStartRequestFromPB(r *pb.PutStartRequest) PutStartRequest {
	return PutStartRequest{Key: string(r.GetKey()), Size: r.GetSize(), CRC: r.GetCrc(), PreferredNode: r.GetPreferredNode(),
		SoftPin: r.GetSoftPin(), HardPin: r.GetHardPin(), Replicas: int(r.GetReplicas()), AllowFewer: r.GetAllowFewerReplicas()}
}

// putReplyFromPB reads a put's replicas: the first and the others.
func putReplyFromPB(first *pb.Replica, more []*pb.Replica) PutStartReply {
	out := PutStartReply{Replica: ReplicaFromPB(first)}
	for _, m := range more {
		out.More = append(out.More, ReplicaFromPB(m))
	}
	return out
}

// PutReplyPB is the wire form of a PutStartReply: the first replica and
// the others.
func PutReplyPB(p PutStartReply) (*pb.Replica, []*pb.Replica) {
	var more []*pb.Replica
	for _, m := range p.More {
		more = append(more, ReplicaPB(m))
	}
	return ReplicaPB(p.Replica), more
}

// PutStart implements API.
func (r *Remote) PutStart(ctx context.Context, req PutStartRequest) (PutStartReply, error) {
	p, err := r.c.PutStart(ctx, putPB(req))
	if err != nil {
		return PutStartReply{}, fromStatus(err)
	}
	return putReplyFromPB(p.GetReplica(), p.GetMore()), nil
}

// PutEnd implements API.
func (r *Remote) PutEnd(ctx context.Context, key string, token uint64) error {
	_, err := r.c.PutEnd(ctx, &pb.KeyRequest{Key: []byte(key), PutToken: token})
	return putErr(fromStatus(err))
}

// PutRevoke implements API.
func (r *Remote) PutRevoke(ctx context.Context, key string, token uint64) error {
	_, err := r.c.PutRevoke(ctx, &pb.KeyRequest{Key: []byte(key), PutToken: token})
	return putErr(fromStatus(err))
}

// putsPB is the wire form of a batch of puts: keys and their tokens.
func putsPB(puts []PutRef) *pb.KeysRequest {
	in := &pb.KeysRequest{Keys: make([][]byte, len(puts)), PutTokens: make([]uint64, len(puts))}
	for i, p := range puts {
		in.Keys[i], in.PutTokens[i] = []byte(p.Key), p.Token
	}
	return in
}

// putErrs restores ErrStalePut on the per-item errors of a batch put call.
func putErrs(errs []error, err error) ([]error, error) {
	for i := range errs {
		errs[i] = putErr(errs[i])
	}
	return errs, err
}

// BatchPutStart implements API.
func (r *Remote) BatchPutStart(ctx context.Context, reqs []PutStartRequest) ([]PutStartResult, error) {
	in := &pb.BatchPutStartRequest{Items: make([]*pb.PutStartRequest, len(reqs))}
	for i, q := range reqs {
		in.Items[i] = putPB(q)
	}
	p, err := r.c.BatchPutStart(ctx, in)
	if err != nil {
		return nil, fromStatus(err)
	}
	if len(p.GetResults()) != len(reqs) {
		return nil, fmt.Errorf("masterapi: %d results for %d items: %w", len(p.GetResults()), len(reqs), codes.ErrRPCFail)
	}
	out := make([]PutStartResult, len(reqs))
	for i, x := range p.GetResults() {
		if x.GetCode() != 0 {
			out[i].Err = itemErr(x.GetCode(), x.GetMessage())
		} else {
			out[i].PutStartReply = putReplyFromPB(x.GetReplica(), x.GetMore())
		}
	}
	return out, nil
}

// BatchPutEnd implements API.
func (r *Remote) BatchPutEnd(ctx context.Context, puts []PutRef) ([]error, error) {
	p, err := r.c.BatchPutEnd(ctx, putsPB(puts))
	if err != nil {
		return nil, fromStatus(err)
	}
	return putErrs(keyErrs(p, len(puts)))
}

// BatchPutRevoke implements API.
func (r *Remote) BatchPutRevoke(ctx context.Context, puts []PutRef) ([]error, error) {
	p, err := r.c.BatchPutRevoke(ctx, putsPB(puts))
	if err != nil {
		return nil, fromStatus(err)
	}
	return putErrs(keyErrs(p, len(puts)))
}

// ExistKey implements API.
func (r *Remote) ExistKey(ctx context.Context, key string) (bool, error) {
	p, err := r.c.ExistKey(ctx, &pb.LookupRequest{Key: []byte(key), OffloadPath: IsOffloadPath(ctx)})
	if err != nil {
		return false, fromStatus(err)
	}
	return p.GetExists(), nil
}

// GetReplicaList implements API.
func (r *Remote) GetReplicaList(ctx context.Context, key string) (ObjectInfo, error) {
	p, err := r.c.GetReplicaList(ctx, &pb.LookupRequest{Key: []byte(key), OffloadPath: IsOffloadPath(ctx)})
	if err != nil {
		return ObjectInfo{}, fromStatus(err)
	}
	return infoFromPB(p.GetInfo()), nil
}

// BatchExistKey implements API.
func (r *Remote) BatchExistKey(ctx context.Context, keys []string) ([]ExistResult, error) {
	p, err := r.c.BatchExistKey(ctx, &pb.BatchLookupRequest{Keys: keyBytes(keys), OffloadPath: IsOffloadPath(ctx)})
	if err != nil {
		return nil, fromStatus(err)
	}
	if len(p.GetResults()) != len(keys) {
		return nil, fmt.Errorf("masterapi: %d results for %d keys: %w", len(p.GetResults()), len(keys), codes.ErrRPCFail)
	}
	out := make([]ExistResult, len(keys))
	for i, x := range p.GetResults() {
		out[i] = ExistResult{Exists: x.GetExists(), Err: itemErr(x.GetCode(), x.GetMessage())}
	}
	return out, nil
}

// BatchGetReplicaList implements API.
func (r *Remote) BatchGetReplicaList(ctx context.Context, keys []string) ([]ReplicaListResult, error) {
	p, err := r.c.BatchGetReplicaList(ctx, &pb.BatchLookupRequest{Keys: keyBytes(keys), OffloadPath: IsOffloadPath(ctx)})
	if err != nil {
		return nil, fromStatus(err)
	}
	if len(p.GetResults()) != len(keys) {
		return nil, fmt.Errorf("masterapi: %d results for %d keys: %w", len(p.GetResults()), len(keys), codes.ErrRPCFail)
	}
	out := make([]ReplicaListResult, len(keys))
	nrep := 0
	for _, x := range p.GetResults() {
		nrep += len(x.GetInfo().GetReplicas())
	}
	slab := make([]Replica, nrep) // one backing array for the batch
	for i, x := range p.GetResults() {
		if x.GetCode() != 0 {
			out[i].Err = itemErr(x.GetCode(), x.GetMessage())
			continue
		}
		in := x.GetInfo()
		info := ObjectInfo{Key: keys[i], Size: in.GetSize(), CRC: in.GetCrc()}
		if n := in.GetLeaseDeadlineUnixNano(); n != 0 {
			info.LeaseDeadline = time.Unix(0, n)
		}
		n := len(in.GetReplicas())
		info.Replicas, slab = slab[:n:n], slab[n:]
		for j, r := range in.GetReplicas() {
			info.Replicas[j] = ReplicaFromPB(r)
		}
		out[i].Info = info
	}
	return out, nil
}

// Remove implements API.
func (r *Remote) Remove(ctx context.Context, key string, force bool) error {
	_, err := r.c.Remove(ctx, &pb.RemoveRequest{Key: []byte(key), Force: force})
	return fromStatus(err)
}

// RemoveAll implements API.
func (r *Remote) RemoveAll(ctx context.Context, force bool) (int64, error) {
	p, err := r.c.RemoveAll(ctx, &pb.RemoveAllRequest{Force: force})
	if err != nil {
		return 0, fromStatus(err)
	}
	return p.GetCount(), nil
}

// RemoveByRegex implements API.
func (r *Remote) RemoveByRegex(ctx context.Context, pattern string, force bool) (int64, error) {
	p, err := r.c.RemoveByRegex(ctx, &pb.RemoveByRegexRequest{Pattern: pattern, Force: force})
	if err != nil {
		return 0, fromStatus(err)
	}
	return p.GetCount(), nil
}

// EvictMemory implements API.
func (r *Remote) EvictMemory(ctx context.Context, keys []string, all bool) (EvictMemoryResult, error) {
	p, err := r.c.EvictMemory(ctx, &pb.EvictMemoryRequest{Keys: keyBytes(keys), All: all})
	if err != nil {
		return EvictMemoryResult{}, fromStatus(err)
	}
	return EvictMemoryResult{Dropped: p.GetCount(), NoDiskCopy: p.GetSkippedNoDiskCopy(), Leased: p.GetSkippedLeased(),
		OffloadPending: p.GetSkippedOffloadPending(), HardPinned: p.GetSkippedHardPinned(),
		PutInProgress: p.GetSkippedPutInProgress(), NotFound: p.GetSkippedNotFound(),
		NotInMemory: p.GetSkippedNotInMemory()}, nil
}

// EvictMemoryPB converts res to its wire form (for the master's gRPC
// server).
func EvictMemoryPB(res EvictMemoryResult) *pb.EvictMemoryResponse {
	return &pb.EvictMemoryResponse{Count: res.Dropped, SkippedNoDiskCopy: res.NoDiskCopy, SkippedLeased: res.Leased,
		SkippedOffloadPending: res.OffloadPending, SkippedHardPinned: res.HardPinned,
		SkippedPutInProgress: res.PutInProgress, SkippedNotFound: res.NotFound, SkippedNotInMemory: res.NotInMemory}
}

func diskPB(objs []DiskObject) []*pb.DiskObject {
	out := make([]*pb.DiskObject, len(objs))
	for i, d := range objs {
		out[i] = &pb.DiskObject{Key: []byte(d.Key), Size: d.Size, Crc: d.CRC}
	}
	return out
}

// NotifyOffloadSuccess implements API.
func (r *Remote) NotifyOffloadSuccess(ctx context.Context, req NotifyRequest) ([]error, error) {
	in := &pb.NotifyOffloadSuccessRequest{Node: req.Node, Persisted: diskPB(req.Persisted), Failed: make([]*pb.OffloadFailure, len(req.Failed))}
	for i, f := range req.Failed {
		in.Failed[i] = &pb.OffloadFailure{Key: []byte(f.Key), Retryable: f.Retryable, Reason: f.Reason}
	}
	p, err := r.c.NotifyOffloadSuccess(ctx, in)
	if err != nil {
		return nil, fromStatus(err)
	}
	return keyErrs(p, len(req.Persisted))
}

// ReRegisterDiskObjects implements API.
func (r *Remote) ReRegisterDiskObjects(ctx context.Context, node string, objs []DiskObject) ([]error, error) {
	p, err := r.c.ReRegisterDiskObjects(ctx, &pb.RegisterDiskObjectsRequest{Node: node, Objects: diskPB(objs)})
	if err != nil {
		return nil, fromStatus(err)
	}
	return keyErrs(p, len(objs))
}

// EvictDiskReplica implements API.
func (r *Remote) EvictDiskReplica(ctx context.Context, node string, keys []string) (EvictResult, error) {
	p, err := r.c.EvictDiskReplica(ctx, &pb.EvictDiskReplicaRequest{Node: node, Keys: keyBytes(keys)})
	if err != nil {
		return EvictResult{}, fromStatus(err)
	}
	res := EvictResult{Dropped: p.GetCount()}
	if len(p.GetKeep()) > 0 {
		res.Keep = make([]string, len(p.GetKeep()))
		for i, k := range p.GetKeep() {
			res.Keep[i] = string(k)
		}
	}
	return res, nil
}

// ReconcileBegin implements API.
func (r *Remote) ReconcileBegin(ctx context.Context, node string, d RangeDigest) (ReconcileSession, error) {
	p, err := r.c.ReconcileBegin(ctx, &pb.ReconcileBeginRequest{Node: node, Counts: d.Counts, Sums: d.Sums})
	if err != nil {
		return ReconcileSession{}, fromStatus(err)
	}
	return ReconcileSession{ID: p.GetSession(), Differ: p.GetDiffer()}, nil
}

// ReconcileKeys implements API.
func (r *Remote) ReconcileKeys(ctx context.Context, node string, session uint64, keys []string) (ReconcileKeysResult, error) {
	p, err := r.c.ReconcileKeys(ctx, &pb.ReconcileKeysRequest{Node: node, Session: session, Keys: keyBytes(keys)})
	if err != nil {
		return ReconcileKeysResult{}, fromStatus(err)
	}
	var res ReconcileKeysResult
	if len(p.GetUnwanted()) > 0 {
		res.Unwanted = make([]string, len(p.GetUnwanted()))
		for i, k := range p.GetUnwanted() {
			res.Unwanted[i] = string(k)
		}
	}
	return res, nil
}

// ReconcileEnd implements API.
func (r *Remote) ReconcileEnd(ctx context.Context, node string, session uint64) (int64, error) {
	p, err := r.c.ReconcileEnd(ctx, &pb.ReconcileEndRequest{Node: node, Session: session})
	if err != nil {
		return 0, fromStatus(err)
	}
	return p.GetCount(), nil
}

// ReportBadReplica implements API.
func (r *Remote) ReportBadReplica(ctx context.Context, key string, crc uint32, rep Replica) error {
	_, err := r.c.ReportBadReplica(ctx, &pb.ReportBadReplicaRequest{Key: []byte(key), Crc: crc, Replica: ReplicaPB(rep)})
	return fromStatus(err)
}

// Stats implements API.
func (r *Remote) Stats(ctx context.Context) (Stats, error) {
	p, err := r.c.Stats(ctx, &pb.StatsRequest{})
	if err != nil {
		return Stats{}, fromStatus(err)
	}
	var rows []NodeStats
	for _, n := range p.GetPerNode() {
		rows = append(rows, NodeStats{Node: n.GetNode(), Endpoint: n.GetEndpoint(), Incarnation: n.GetIncarnation(), Alive: n.GetAlive(),
			Segments: n.GetSegments(), SegmentSize: n.GetSegmentSize(), SegmentUsed: n.GetSegmentUsed(),
			MemoryReplicas: n.GetMemoryReplicas(), MemoryBytes: n.GetMemoryBytes(), DiskReplicas: n.GetDiskReplicas(), DiskBytes: n.GetDiskBytes(),
			OffloadQueued: n.GetOffloadQueued(), OffloadInFlight: n.GetOffloadInFlight()})
	}
	return Stats{PerNode: rows, Objects: p.GetObjects(), MemoryReplicas: p.GetMemoryReplicas(), DiskReplicas: p.GetDiskReplicas(),
		MemoryBytes: p.GetMemoryBytes(), DiskBytes: p.GetDiskBytes(), Segments: p.GetSegments(),
		SegmentCapacity: p.GetSegmentCapacity(), SegmentUsed: p.GetSegmentUsed(), Nodes: p.GetNodes(),
		OffloadQueued: p.GetOffloadQueued(), OffloadInFlight: p.GetOffloadInFlight(), Evictions: p.GetEvictions(),
		OffloadQueuedTot: p.GetOffloadQueuedTotal(), OffloadPersisted: p.GetOffloadPersistedTotal(),
		OffloadFailed: p.GetOffloadFailedTotal(), ExpiredNodes: p.GetExpiredNodesTotal(),
		Promotions: p.GetPromotionsTotal(), PromotionsAbandoned: p.GetPromotionsAbandonedTotal()}, nil
}

// ReplicaPB converts r to its wire form (for the master's gRPC server).
func ReplicaPB(r Replica) *pb.Replica {
	return &pb.Replica{Kind: pb.ReplicaKind(r.Kind), Status: pb.ReplicaStatus(r.Status), Node: r.Node,
		Endpoint: r.Endpoint, Segment: r.Segment, Offset: r.Offset, Length: r.Length, PutToken: r.PutToken}
}

// PullRemovals implements API.
func (r *Remote) PullRemovals(ctx context.Context, req PullRequest) (PullReply, error) {
	p, err := r.c.PullRemovals(ctx, &pb.PullRemovalsRequest{Node: req.Node, HasSsd: req.HasSSD,
		Dram: &pb.RemovalCursor{Log: req.DRAM.Log, Seq: req.DRAM.Seq}, Ssd: &pb.RemovalCursor{Log: req.SSD.Log, Seq: req.SSD.Seq}})
	if err != nil {
		return PullReply{}, fromStatus(err)
	}
	rep := PullReply{Log: p.GetLog(), Through: p.GetThrough(), DropDRAM: p.GetDropDram(), DropSSD: p.GetDropSsd(), More: p.GetMore()}
	if n := len(p.GetRemovals()); n > 0 {
		rep.Removals = make([]Removal, n)
		for i, e := range p.GetRemovals() {
			rep.Removals[i] = Removal{Seq: e.GetSeq(), Kind: RemovalKind(e.GetKind()), Key: string(e.GetKey())}
			if sp := e.GetSpared(); len(sp) > 0 {
				rep.Removals[i].Spared = make([]string, len(sp))
				for j, k := range sp {
					rep.Removals[i].Spared[j] = string(k)
				}
			}
		}
	}
	if n := len(p.GetForget()); n > 0 {
		rep.Forget = make([]MemoryRef, n)
		for i, f := range p.GetForget() {
			rep.Forget[i] = MemoryRef{Offset: f.GetOffset(), Token: f.GetPutToken()}
		}
	}
	return rep, nil
}
