package mastergrpc

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/tierstore/tierstore/internal/errcode"
	pb "github.com/tierstore/tierstore/internal/rpcpb"
	"github.com/tierstore/tierstore/masterapi"
)

// MaxMessageSize bounds one gRPC message of the master service (both ways):
// the client's and the server's (package master) limit. Reconcile of a node
// holding a few hundred thousand keys fits.
const MaxMessageSize = 64 << 20

// Client is a client of a master over gRPC. It implements masterapi.API;
// errors carry the server's codes (errors.Is(err, errcode.ErrObjectNotFound)
// works), and transport failures wrap errcode.ErrRPCFail. Safe for
// concurrent use.
type Client struct {
	conn Conn
	c    pb.MasterClient
	addr string
}

var _ masterapi.API = (*Client)(nil)

// FlowWindow is the HTTP/2 flow-control window, of a stream and of a
// connection, of both ends of a connection to a master (DefaultDialOptions,
// ServerOptions): static, the ceiling gRPC's dynamic windows grow to
// (16 MiB). A static window turns off gRPC's bandwidth-delay estimation,
// which sends a window update and a PING on every message received while
// no PING is outstanding: with one master call at a time, a PING and its
// ack on every call, both ways (docs/benchmarks.md, "Stop 45: put path
// CPU").
const FlowWindow = 16 << 20

// DefaultDialOptions are the options every connection to a master starts
// with: plaintext, MaxMessageSize both ways, static flow-control windows
// (FlowWindow), and the caller's protocol version (rpcpb.WithVersion).
func DefaultDialOptions() []grpc.DialOption {
	return []grpc.DialOption{
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(MaxMessageSize), grpc.MaxCallSendMsgSize(MaxMessageSize)),
		grpc.WithInitialWindowSize(FlowWindow), grpc.WithInitialConnWindowSize(FlowWindow),
		pb.WithVersion(pb.MasterProtocol),
	}
}

// ServerOptions are the transport options of a master's gRPC server (package
// master's NewServer starts with them): MaxMessageSize both ways, static
// flow-control windows (FlowWindow).
func ServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{grpc.MaxRecvMsgSize(MaxMessageSize), grpc.MaxSendMsgSize(MaxMessageSize),
		grpc.InitialWindowSize(FlowWindow), grpc.InitialConnWindowSize(FlowWindow)}
}

// Dial returns a Client for the master at addr: "host:port", or
// "scheme://..." for a scheme a package linked into the program registered
// (RegisterScheme; package ha registers etcd://h1:2379,h2:2379[/prefix],
// the elected leader of highly available masters, docs/ha.md). It does not
// wait for the connection: the first call connects (and fails with
// errcode.ErrRPCFail if the master is unreachable). opts are appended to
// DefaultDialOptions. On a host:port connection a call answered "ask
// again" (UNAVAILABLE_IN_CURRENT_STATUS: a master rebuilding from the
// nodes after a restart) is sent again within AskAgainFor and the
// caller's deadline (askAgain), and a call that finds the connection
// failed asks for a new attempt at once and waits for it, at most
// ReconnectWait, before failing unsent (reconnect).
func Dial(ctx context.Context, addr string, opts ...grpc.DialOption) (*Client, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("mastergrpc: dial %s: %w", addr, err)
	}
	all := append(DefaultDialOptions(), opts...)
	if scheme, _, ok := strings.Cut(addr, "://"); ok {
		d := schemeDialer(scheme)
		if d == nil {
			return nil, fmt.Errorf("mastergrpc: dial %s: %w: no dialer for %s:// is linked into this program (for etcd://, import github.com/tierstore/tierstore/ha)",
				addr, errcode.ErrInvalidParams, scheme)
		}
		conn, err := d(addr, all)
		if err != nil {
			return nil, fmt.Errorf("mastergrpc: dial %s: %w", addr, err)
		}
		return NewClient(conn, addr), nil
	}
	cc, err := grpc.NewClient(addr, append(all, grpc.WithChainUnaryInterceptor((&hostConn{}).interceptor))...)
	if err != nil {
		return nil, fmt.Errorf("mastergrpc: dial %s: %w: %w", addr, errcode.ErrRPCFail, err)
	}
	return NewClient(cc, addr), nil
}

// NewClient returns a Client that sends its calls on conn; addr names the
// master (or the scheme address) in messages and LeaderAddr.
func NewClient(conn Conn, addr string) *Client {
	return &Client{conn: conn, c: pb.NewMasterClient(conn), addr: addr}
}

// Close closes the connection (and whatever a scheme's connection holds:
// its resolver).
func (r *Client) Close() error { return r.conn.Close() }

func fromStatus(err error) error { return errcode.FromStatus(err) }

func keyBytes(keys []string) [][]byte {
	out := make([][]byte, len(keys))
	for i, k := range keys {
		out[i] = []byte(k)
	}
	return out
}

func itemErr(code int32, msg string) error { return errcode.WithMessage(errcode.Code(code), msg) }

// ReplicaFromPB converts a wire replica back (for the master's gRPC server).
func ReplicaFromPB(p *pb.Replica) masterapi.Replica {
	return masterapi.Replica{Kind: masterapi.ReplicaKind(p.GetKind()), Status: masterapi.ReplicaStatus(p.GetStatus()), Node: p.GetNode(),
		Endpoint: p.GetEndpoint(), Segment: p.GetSegment(), Offset: p.GetOffset(), Length: p.GetLength(),
		PutToken: p.GetPutToken(), Grant: string(p.GetGrant())}
}

func infoFromPB(p *pb.ObjectInfo) masterapi.ObjectInfo {
	in := masterapi.ObjectInfo{Key: string(p.GetKey()), Size: p.GetSize(), CRC: p.GetCrc(), Replicas: make([]masterapi.Replica, len(p.GetReplicas()))}
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
		return nil, fmt.Errorf("mastergrpc: %d results for %d items: %w", len(r.GetResults()), n, errcode.ErrRPCFail)
	}
	out := make([]error, n)
	for i, x := range r.GetResults() {
		out[i] = itemErr(x.GetCode(), x.GetMessage())
	}
	return out, nil
}

// MountSegment implements API.
func (r *Client) MountSegment(ctx context.Context, req masterapi.MountRequest) error {
	_, err := r.c.MountSegment(ctx, &pb.MountSegmentRequest{Node: req.Node, Endpoint: req.Endpoint, Segment: req.Segment, Size: req.Size, Incarnation: req.Incarnation, HoldAllocation: req.HoldAllocation})
	return fromStatus(err)
}

// UnmountSegment implements API.
func (r *Client) UnmountSegment(ctx context.Context, node, segment string) error {
	_, err := r.c.UnmountSegment(ctx, &pb.UnmountSegmentRequest{Node: node, Segment: segment})
	return fromStatus(err)
}

// LeaveNode implements API.
func (r *Client) LeaveNode(ctx context.Context, node, incarnation string) error {
	_, err := r.c.LeaveNode(ctx, &pb.LeaveNodeRequest{Node: node, Incarnation: incarnation})
	return fromStatus(err)
}

// Ping implements API.
func (r *Client) Ping(ctx context.Context, node string) (masterapi.PingReply, error) {
	p, err := r.c.Ping(ctx, &pb.PingRequest{Node: node})
	if err != nil {
		return masterapi.PingReply{}, fromStatus(err)
	}
	return masterapi.PingReply{Status: masterapi.NodeStatus(p.GetStatus()), ClientTTL: time.Duration(p.GetClientTtlMs()) * time.Millisecond, Term: p.GetTerm()}, nil
}

func putPB(q masterapi.PutStartRequest) *pb.PutStartRequest {
	return &pb.PutStartRequest{Key: []byte(q.Key), Size: q.Size, Crc: q.CRC, PreferredNode: q.PreferredNode, SoftPin: q.SoftPin, HardPin: q.HardPin,
		Replicas: int32(max(math.MinInt32, min(q.Replicas, math.MaxInt32))), AllowFewerReplicas: q.AllowFewer}
}

// putReplyFromPB reads a put's replicas: the first and the others.
func putReplyFromPB(first *pb.Replica, more []*pb.Replica) masterapi.PutStartReply {
	out := masterapi.PutStartReply{Replica: ReplicaFromPB(first)}
	for _, m := range more {
		out.More = append(out.More, ReplicaFromPB(m))
	}
	return out
}

// PutStart implements API.
func (r *Client) PutStart(ctx context.Context, req masterapi.PutStartRequest) (masterapi.PutStartReply, error) {
	p, err := r.c.PutStart(ctx, putPB(req))
	if err != nil {
		return masterapi.PutStartReply{}, fromStatus(err)
	}
	return putReplyFromPB(p.GetReplica(), p.GetMore()), nil
}

// PutEnd implements API.
func (r *Client) PutEnd(ctx context.Context, key string, token uint64) error {
	_, err := r.c.PutEnd(ctx, &pb.KeyRequest{Key: []byte(key), PutToken: token})
	return putErr(fromStatus(err))
}

// PutRevoke implements API.
func (r *Client) PutRevoke(ctx context.Context, key string, token uint64) error {
	_, err := r.c.PutRevoke(ctx, &pb.KeyRequest{Key: []byte(key), PutToken: token})
	return putErr(fromStatus(err))
}

// putsPB is the wire form of a batch of puts: keys and their tokens.
func putsPB(puts []masterapi.PutRef) *pb.KeysRequest {
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
func (r *Client) BatchPutStart(ctx context.Context, reqs []masterapi.PutStartRequest) ([]masterapi.PutStartResult, error) {
	in := &pb.BatchPutStartRequest{Items: make([]*pb.PutStartRequest, len(reqs))}
	for i, q := range reqs {
		in.Items[i] = putPB(q)
	}
	p, err := r.c.BatchPutStart(ctx, in)
	if err != nil {
		return nil, fromStatus(err)
	}
	if len(p.GetResults()) != len(reqs) {
		return nil, fmt.Errorf("mastergrpc: %d results for %d items: %w", len(p.GetResults()), len(reqs), errcode.ErrRPCFail)
	}
	out := make([]masterapi.PutStartResult, len(reqs))
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
func (r *Client) BatchPutEnd(ctx context.Context, puts []masterapi.PutRef) ([]error, error) {
	p, err := r.c.BatchPutEnd(ctx, putsPB(puts))
	if err != nil {
		return nil, fromStatus(err)
	}
	return putErrs(keyErrs(p, len(puts)))
}

// BatchPutRevoke implements API.
func (r *Client) BatchPutRevoke(ctx context.Context, puts []masterapi.PutRef) ([]error, error) {
	p, err := r.c.BatchPutRevoke(ctx, putsPB(puts))
	if err != nil {
		return nil, fromStatus(err)
	}
	return putErrs(keyErrs(p, len(puts)))
}

// ExistKey implements API.
func (r *Client) ExistKey(ctx context.Context, key string) (bool, error) {
	p, err := r.c.ExistKey(ctx, &pb.LookupRequest{Key: []byte(key), OffloadPath: masterapi.IsOffloadPath(ctx)})
	if err != nil {
		return false, fromStatus(err)
	}
	return p.GetExists(), nil
}

// GetReplicaList implements API.
func (r *Client) GetReplicaList(ctx context.Context, key string) (masterapi.ObjectInfo, error) {
	p, err := r.c.GetReplicaList(ctx, &pb.LookupRequest{Key: []byte(key), OffloadPath: masterapi.IsOffloadPath(ctx)})
	if err != nil {
		return masterapi.ObjectInfo{}, fromStatus(err)
	}
	return infoFromPB(p.GetInfo()), nil
}

// BatchExistKey implements API.
func (r *Client) BatchExistKey(ctx context.Context, keys []string) ([]masterapi.ExistResult, error) {
	p, err := r.c.BatchExistKey(ctx, &pb.BatchLookupRequest{Keys: keyBytes(keys), OffloadPath: masterapi.IsOffloadPath(ctx)})
	if err != nil {
		return nil, fromStatus(err)
	}
	if len(p.GetResults()) != len(keys) {
		return nil, fmt.Errorf("mastergrpc: %d results for %d keys: %w", len(p.GetResults()), len(keys), errcode.ErrRPCFail)
	}
	out := make([]masterapi.ExistResult, len(keys))
	for i, x := range p.GetResults() {
		out[i] = masterapi.ExistResult{Exists: x.GetExists(), Err: itemErr(x.GetCode(), x.GetMessage())}
	}
	return out, nil
}

// BatchGetReplicaList implements API.
func (r *Client) BatchGetReplicaList(ctx context.Context, keys []string) ([]masterapi.ReplicaListResult, error) {
	p, err := r.c.BatchGetReplicaList(ctx, &pb.BatchLookupRequest{Keys: keyBytes(keys), OffloadPath: masterapi.IsOffloadPath(ctx)})
	if err != nil {
		return nil, fromStatus(err)
	}
	if len(p.GetResults()) != len(keys) {
		return nil, fmt.Errorf("mastergrpc: %d results for %d keys: %w", len(p.GetResults()), len(keys), errcode.ErrRPCFail)
	}
	out := make([]masterapi.ReplicaListResult, len(keys))
	nrep := 0
	for _, x := range p.GetResults() {
		nrep += len(x.GetInfo().GetReplicas())
	}
	slab := make([]masterapi.Replica, nrep) // one backing array for the batch
	for i, x := range p.GetResults() {
		if x.GetCode() != 0 {
			out[i].Err = itemErr(x.GetCode(), x.GetMessage())
			continue
		}
		in := x.GetInfo()
		info := masterapi.ObjectInfo{Key: keys[i], Size: in.GetSize(), CRC: in.GetCrc()}
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
func (r *Client) Remove(ctx context.Context, key string, force bool) error {
	_, err := r.c.Remove(ctx, &pb.RemoveRequest{Key: []byte(key), Force: force})
	return fromStatus(err)
}

// RemoveAll implements API.
func (r *Client) RemoveAll(ctx context.Context, force bool) (int64, error) {
	p, err := r.c.RemoveAll(ctx, &pb.RemoveAllRequest{Force: force})
	if err != nil {
		return 0, fromStatus(err)
	}
	return p.GetCount(), nil
}

// RemoveByRegex implements API.
func (r *Client) RemoveByRegex(ctx context.Context, pattern string, force bool) (int64, error) {
	p, err := r.c.RemoveByRegex(ctx, &pb.RemoveByRegexRequest{Pattern: pattern, Force: force})
	if err != nil {
		return 0, fromStatus(err)
	}
	return p.GetCount(), nil
}

// EvictDRAM implements API.
func (r *Client) EvictDRAM(ctx context.Context, keys []string, all bool) (masterapi.EvictDRAMResult, error) {
	p, err := r.c.EvictDRAM(ctx, &pb.EvictDRAMRequest{Keys: keyBytes(keys), All: all})
	if err != nil {
		return masterapi.EvictDRAMResult{}, fromStatus(err)
	}
	return masterapi.EvictDRAMResult{Dropped: p.GetCount(), NoSSDCopy: p.GetSkippedNoSsdCopy(), Leased: p.GetSkippedLeased(),
		OffloadPending: p.GetSkippedOffloadPending(), HardPinned: p.GetSkippedHardPinned(),
		PutInProgress: p.GetSkippedPutInProgress(), NotFound: p.GetSkippedNotFound(),
		NotInDRAM: p.GetSkippedNotInDram()}, nil
}

func ssdPB(objs []masterapi.SSDObject) []*pb.SSDObject {
	out := make([]*pb.SSDObject, len(objs))
	for i, d := range objs {
		out[i] = &pb.SSDObject{Key: []byte(d.Key), Size: d.Size, Crc: d.CRC}
	}
	return out
}

// NotifyOffloadSuccess implements API.
func (r *Client) NotifyOffloadSuccess(ctx context.Context, req masterapi.NotifyRequest) ([]error, error) {
	in := &pb.NotifyOffloadSuccessRequest{Node: req.Node, Persisted: ssdPB(req.Persisted), Failed: make([]*pb.OffloadFailure, len(req.Failed))}
	for i, f := range req.Failed {
		in.Failed[i] = &pb.OffloadFailure{Key: []byte(f.Key), Retryable: f.Retryable, Reason: f.Reason}
	}
	p, err := r.c.NotifyOffloadSuccess(ctx, in)
	if err != nil {
		return nil, fromStatus(err)
	}
	return keyErrs(p, len(req.Persisted))
}

// ReRegisterSSDColumns implements API: the chunk goes as columns
// (master protocol 4) and the answer lists only the refused objects.
func (r *Client) ReRegisterSSDColumns(ctx context.Context, node string, objs masterapi.SSDColumns) ([]error, error) {
	if err := objs.Check(); err != nil {
		return nil, err
	}
	p, err := r.c.ReRegisterSSDObjects(ctx, &pb.RegisterSSDObjectsRequest{Node: node, Expected: objs.Expected,
		Objects: &pb.SSDObjectColumns{Keys: objs.Keys, KeyLens: objs.Lens, Sizes: objs.Sizes, Crcs: objs.CRCs}})
	if err != nil {
		return nil, columnsErr(fromStatus(err))
	}
	refused, results := p.GetRefused(), p.GetResults()
	if len(refused) != len(results) {
		return nil, fmt.Errorf("mastergrpc: re-register: %d refused indexes for %d results: %w", len(refused), len(results), errcode.ErrRPCFail)
	}
	out := make([]error, objs.Len())
	for i, at := range refused {
		if int(at) >= len(out) {
			return nil, fmt.Errorf("mastergrpc: re-register: refused index %d in a chunk of %d: %w", at, len(out), errcode.ErrRPCFail)
		}
		out[at] = itemErr(results[i].GetCode(), results[i].GetMessage())
	}
	return out, nil
}

// columnsErr restores masterapi.ErrBadColumns on an error that crossed
// the wire (INVALID_PARAMS with its message).
func columnsErr(err error) error {
	if err == nil || errcode.Of(err) != errcode.InvalidParams || !strings.Contains(err.Error(), "bad SSD object columns") {
		return err
	}
	return &wireErr{msg: err.Error(), errs: []error{masterapi.ErrBadColumns, err}}
}

// EvictSSDReplica implements API.
func (r *Client) EvictSSDReplica(ctx context.Context, node string, keys []string) (masterapi.EvictResult, error) {
	p, err := r.c.EvictSSDReplica(ctx, &pb.EvictSSDReplicaRequest{Node: node, Keys: keyBytes(keys)})
	if err != nil {
		return masterapi.EvictResult{}, fromStatus(err)
	}
	res := masterapi.EvictResult{Dropped: p.GetCount()}
	if len(p.GetKeep()) > 0 {
		res.Keep = make([]string, len(p.GetKeep()))
		for i, k := range p.GetKeep() {
			res.Keep[i] = string(k)
		}
	}
	return res, nil
}

// ReconcileBegin implements API.
func (r *Client) ReconcileBegin(ctx context.Context, node string, d masterapi.SlotDigest) (masterapi.ReconcileSession, error) {
	p, err := r.c.ReconcileBegin(ctx, &pb.ReconcileBeginRequest{Node: node, Counts: d.Counts, Sums: d.Sums})
	if err != nil {
		return masterapi.ReconcileSession{}, fromStatus(err)
	}
	return masterapi.ReconcileSession{ID: p.GetSession(), Differ: p.GetDiffer()}, nil
}

// ReconcileKeys implements API.
func (r *Client) ReconcileKeys(ctx context.Context, node string, session uint64, keys []string) (masterapi.ReconcileKeysResult, error) {
	p, err := r.c.ReconcileKeys(ctx, &pb.ReconcileKeysRequest{Node: node, Session: session, Keys: keyBytes(keys)})
	if err != nil {
		return masterapi.ReconcileKeysResult{}, fromStatus(err)
	}
	var res masterapi.ReconcileKeysResult
	if len(p.GetUnwanted()) > 0 {
		res.Unwanted = make([]string, len(p.GetUnwanted()))
		for i, k := range p.GetUnwanted() {
			res.Unwanted[i] = string(k)
		}
	}
	return res, nil
}

// ReconcileEnd implements API.
func (r *Client) ReconcileEnd(ctx context.Context, node string, session uint64) (int64, error) {
	p, err := r.c.ReconcileEnd(ctx, &pb.ReconcileEndRequest{Node: node, Session: session})
	if err != nil {
		return 0, fromStatus(err)
	}
	return p.GetCount(), nil
}

// ReportBadReplica implements API.
func (r *Client) ReportBadReplica(ctx context.Context, key string, crc uint32, rep masterapi.Replica) error {
	_, err := r.c.ReportBadReplica(ctx, &pb.ReportBadReplicaRequest{Key: []byte(key), Crc: crc, Replica: ReplicaPB(rep)})
	return fromStatus(err)
}

// Stats implements API.
func (r *Client) Stats(ctx context.Context) (masterapi.Stats, error) {
	p, err := r.c.Stats(ctx, &pb.StatsRequest{})
	if err != nil {
		return masterapi.Stats{}, fromStatus(err)
	}
	var rows []masterapi.NodeStats
	for _, n := range p.GetPerNode() {
		rows = append(rows, masterapi.NodeStats{Node: n.GetNode(), Endpoint: n.GetEndpoint(), Incarnation: n.GetIncarnation(), Alive: n.GetAlive(),
			Segments: n.GetSegments(), SegmentSize: n.GetSegmentSize(), SegmentUsed: n.GetSegmentUsed(),
			DRAMReplicas: n.GetDramReplicas(), DRAMBytes: n.GetDramBytes(), SSDReplicas: n.GetSsdReplicas(), SSDBytes: n.GetSsdBytes(),
			OffloadQueued: n.GetOffloadQueued(), OffloadInFlight: n.GetOffloadInFlight()})
	}
	return masterapi.Stats{PerNode: rows, Objects: p.GetObjects(), DRAMReplicas: p.GetDramReplicas(), SSDReplicas: p.GetSsdReplicas(),
		DRAMBytes: p.GetDramBytes(), SSDBytes: p.GetSsdBytes(), Segments: p.GetSegments(),
		SegmentCapacity: p.GetSegmentCapacity(), SegmentUsed: p.GetSegmentUsed(), Nodes: p.GetNodes(),
		OffloadQueued: p.GetOffloadQueued(), OffloadInFlight: p.GetOffloadInFlight(), Evictions: p.GetEvictions(),
		OffloadQueuedTot: p.GetOffloadQueuedTotal(), OffloadPersisted: p.GetOffloadPersistedTotal(),
		OffloadFailed: p.GetOffloadFailedTotal(), ExpiredNodes: p.GetExpiredNodesTotal(),
		Promotions: p.GetPromotionsTotal(), PromotionsAbandoned: p.GetPromotionsAbandonedTotal()}, nil
}

// ReplicaPB converts r to its wire form (for the master's gRPC server).
func ReplicaPB(r masterapi.Replica) *pb.Replica {
	return &pb.Replica{Kind: pb.ReplicaKind(r.Kind), Status: pb.ReplicaStatus(r.Status), Node: r.Node,
		Endpoint: r.Endpoint, Segment: r.Segment, Offset: r.Offset, Length: r.Length, PutToken: r.PutToken, Grant: []byte(r.Grant)}
}

// PullRemovals implements API.
func (r *Client) PullRemovals(ctx context.Context, req masterapi.PullRequest) (masterapi.PullReply, error) {
	p, err := r.c.PullRemovals(ctx, &pb.PullRemovalsRequest{Node: req.Node, HasSsd: req.HasSSD,
		Dram: &pb.RemovalCursor{Log: req.DRAM.Log, Seq: req.DRAM.Seq}, Ssd: &pb.RemovalCursor{Log: req.SSD.Log, Seq: req.SSD.Seq}})
	if err != nil {
		return masterapi.PullReply{}, fromStatus(err)
	}
	rep := masterapi.PullReply{Log: p.GetLog(), Through: p.GetThrough(), DropDRAM: p.GetDropDram(), DropSSD: p.GetDropSsd(), More: p.GetMore()}
	if n := len(p.GetRemovals()); n > 0 {
		rep.Removals = make([]masterapi.Removal, n)
		for i, e := range p.GetRemovals() {
			rep.Removals[i] = masterapi.Removal{Seq: e.GetSeq(), Kind: masterapi.RemovalKind(e.GetKind()), Key: string(e.GetKey())}
			if sp := e.GetSpared(); len(sp) > 0 {
				rep.Removals[i].Spared = make([]string, len(sp))
				for j, k := range sp {
					rep.Removals[i].Spared[j] = string(k)
				}
			}
		}
	}
	if n := len(p.GetForget()); n > 0 {
		rep.Forget = make([]masterapi.DRAMRef, n)
		for i, f := range p.GetForget() {
			rep.Forget[i] = masterapi.DRAMRef{Offset: f.GetOffset(), Token: f.GetPutToken()}
		}
	}
	return rep, nil
}

// wireErr is an error received over gRPC that also matches a sentinel of
// this package the code alone cannot carry.
type wireErr struct {
	msg  string
	errs []error
}

func (e *wireErr) Error() string   { return e.msg }
func (e *wireErr) Unwrap() []error { return e.errs }

// putErr restores ErrStalePut on an error of PutEnd or PutRevoke that
// crossed the wire: those calls answer REPLICA_NOT_FOUND for nothing else.
func putErr(err error) error {
	if err == nil || errcode.Of(err) != errcode.ReplicaNotFound || errors.Is(err, masterapi.ErrStalePut) {
		return err
	}
	return &wireErr{msg: err.Error(), errs: []error{masterapi.ErrStalePut, err}}
}
