package client

import (
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/tierstore/tierstore/internal/codes"
	"github.com/tierstore/tierstore/internal/rpcpb"
	"github.com/tierstore/tierstore/tier"
)

// MaxChunk is the largest value chunk carried by one stream message.
const MaxChunk = 1 << 20

// maxMsgSize bounds a gRPC message: one chunk plus headers.
const maxMsgSize = MaxChunk + 64<<10

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// CRC32C is the Castagnoli CRC of b, the checksum every object carries.
func CRC32C(b []byte) uint32 { return crc32.Checksum(b, castagnoli) }

// peer is the data plane to one node: the local node directly, or a remote
// node through its gRPC peer service.
type peer interface {
	writeRange(ctx context.Context, segment string, off int64, value []byte, crc uint32) error
	readRange(ctx context.Context, segment string, off int64, n int64) ([]byte, error)
	readSSD(ctx context.Context, key []byte) ([]byte, error)
}

// toCode maps node-side errors to the codes sentinels peers receive.
func toCode(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, ErrOutOfRange):
		return fmt.Errorf("%w: %w", codes.ErrInvalidParams, err)
	case errors.Is(err, tier.ErrNotFound):
		return fmt.Errorf("%w: %w", codes.ErrObjectNotFound, err)
	case errors.Is(err, tier.ErrChecksum):
		return fmt.Errorf("%w: %w", codes.ErrChecksumMismatch, err)
	case errors.Is(err, tier.ErrInvalidKey):
		return fmt.Errorf("%w: %w", codes.ErrInvalidKey, err)
	case errors.Is(err, ErrClosed), errors.Is(err, tier.ErrClosed):
		return fmt.Errorf("%w: %w", codes.ErrShuttingDown, err)
	}
	return err
}

// peerServer implements rpcpb.NodePeerServer on a Node.
type peerServer struct {
	rpcpb.UnimplementedNodePeerServer
	n *Node
}

func (s *peerServer) WriteRange(stream grpc.ClientStreamingServer[rpcpb.PeerWriteChunk, rpcpb.PeerWriteReply]) error {
	first, err := stream.Recv()
	if err != nil {
		return codes.ToStatus(fmt.Errorf("client: write range: no header: %w", err))
	}
	if err := s.n.checkSegment(first.GetSegment()); err != nil {
		return codes.ToStatus(err)
	}
	off, total := int64(first.GetOffset()), int64(first.GetTotalLen())
	if err := s.n.seg.check(off, int(total)); err != nil || total < 0 {
		return codes.ToStatus(toCode(err))
	}
	h := crc32.New(castagnoli)
	var got int64
	msg := first
	for {
		d := msg.GetData()
		if got+int64(len(d)) > total {
			return codes.ToStatus(codes.Errorf(codes.InvalidParams, "client: write range: %d bytes sent for a %d-byte range", got+int64(len(d)), total))
		}
		if err := s.n.seg.WriteAt(d, off+got); err != nil {
			return codes.ToStatus(toCode(err))
		}
		h.Write(d)
		got += int64(len(d))
		msg, err = stream.Recv()
		if err == io.EOF {
			break
		}
		if err != nil {
			return codes.ToStatus(err)
		}
	}
	if got != total {
		return codes.ToStatus(codes.Errorf(codes.TransferFail, "client: write range: %d of %d bytes received", got, total))
	}
	if first.GetHasCrc() && h.Sum32() != first.GetCrc32C() {
		return codes.ToStatus(codes.Errorf(codes.ChecksumMismatch, "client: write range: received bytes have CRC32C %08x, sender said %08x", h.Sum32(), first.GetCrc32C()))
	}
	s.n.metrics.peerWrites.Add(1)
	return stream.SendAndClose(&rpcpb.PeerWriteReply{Written: uint64(got)})
}

func sendChunks(send func(*rpcpb.PeerDataChunk) error, value []byte, crc uint32, hasCRC bool) error {
	first := true
	for first || len(value) > 0 {
		n := min(len(value), MaxChunk)
		c := &rpcpb.PeerDataChunk{Data: value[:n]}
		if first {
			c.TotalLen, c.Crc32C, c.HasCrc = uint64(len(value)), crc, hasCRC
			first = false
		}
		if err := send(c); err != nil {
			return err
		}
		value = value[n:]
	}
	return nil
}

func (s *peerServer) ReadRange(req *rpcpb.PeerReadRangeRequest, stream grpc.ServerStreamingServer[rpcpb.PeerDataChunk]) error {
	if err := s.n.checkSegment(req.GetSegment()); err != nil {
		return codes.ToStatus(err)
	}
	if req.GetLength() > uint64(s.n.seg.Size()) {
		return codes.ToStatus(toCode(fmt.Errorf("%w: length %d", ErrOutOfRange, req.GetLength())))
	}
	// Stream straight from the mapping (the gRPC codec copies each chunk
	// into its frame): one copy fewer than Segment.Read. The reader checks
	// the CRC32C, so a range reused under it is a miss, not wrong bytes.
	view, release := s.n.seg.pin()
	defer release()
	val, err := view(int64(req.GetOffset()), int(req.GetLength()))
	if err != nil {
		return codes.ToStatus(toCode(err))
	}
	s.n.metrics.peerReadsDRAM.Add(1)
	return sendChunks(stream.Send, val, 0, false)
}

func (s *peerServer) ReadSSD(req *rpcpb.PeerReadSSDRequest, stream grpc.ServerStreamingServer[rpcpb.PeerDataChunk]) error {
	val, err := s.n.readSSD(stream.Context(), req.GetKey())
	if err != nil {
		return codes.ToStatus(err)
	}
	s.n.metrics.peerReadsSSD.Add(1)
	return sendChunks(stream.Send, val, CRC32C(val), true)
}

func (s *peerServer) NodeStats(ctx context.Context, _ *rpcpb.PeerStatsRequest) (*rpcpb.PeerStatsReply, error) {
	st := s.n.Stats()
	return &rpcpb.PeerStatsReply{
		Segment: st.Segment, SegmentSize: uint64(st.SegmentSize), OffloadEnabled: st.OffloadEnabled,
		Backend: st.Backend, SsdObjects: st.Tier.Objects, SsdBuckets: st.Tier.Buckets,
		SsdBytesUsed: st.Tier.BytesUsed, SsdCapacity: st.Tier.Capacity,
		SsdBucketsWritten: st.Tier.BucketsWritten, SsdBytesWritten: st.Tier.BytesWritten,
		SsdObjectsLoaded: st.Tier.ObjectsLoaded, SsdBytesRead: st.Tier.BytesRead,
		SsdEvictions: st.Tier.Evictions, SsdChecksumErrors: st.Tier.ChecksumErrors,
		OffloadPersisted: st.OffloadPersisted, OffloadFailed: st.OffloadFailed,
		PeerReadsDram: st.PeerReadsDRAM, PeerReadsSsd: st.PeerReadsSSD,
	}, nil
}

// localPeer reaches the node of this process without a socket.
type localPeer struct{ n *Node }

func (p localPeer) writeRange(_ context.Context, segment string, off int64, value []byte, _ uint32) error {
	if err := p.n.checkSegment(segment); err != nil {
		return err
	}
	return toCode(p.n.seg.WriteAt(value, off))
}

func (p localPeer) readRange(_ context.Context, segment string, off, n int64) ([]byte, error) {
	return p.n.readRange(segment, off, n)
}

func (p localPeer) readSSD(ctx context.Context, key []byte) ([]byte, error) {
	return p.n.readSSD(ctx, key)
}

// remotePeer reaches a node through its peer service.
type remotePeer struct {
	c rpcpb.NodePeerClient
}

func (p remotePeer) writeRange(ctx context.Context, segment string, off int64, value []byte, crc uint32) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	st, err := p.c.WriteRange(ctx)
	if err != nil {
		return codes.FromStatus(err)
	}
	first := true
	for first || len(value) > 0 {
		n := min(len(value), MaxChunk)
		c := &rpcpb.PeerWriteChunk{Data: value[:n]}
		if first {
			c.Segment, c.Offset, c.TotalLen, c.Crc32C, c.HasCrc = segment, uint64(off), uint64(len(value)), crc, true
			first = false
		}
		if err := st.Send(c); err != nil {
			if err == io.EOF {
				break // the server ended the stream; CloseAndRecv has its status
			}
			return codes.FromStatus(err)
		}
		value = value[n:]
	}
	if _, err := st.CloseAndRecv(); err != nil {
		return codes.FromStatus(err)
	}
	return nil
}

func recvValue(recv func() (*rpcpb.PeerDataChunk, error)) ([]byte, uint32, bool, error) {
	first, err := recv()
	if err != nil {
		return nil, 0, false, codes.FromStatus(err)
	}
	total := first.GetTotalLen()
	if total > 1<<40 {
		return nil, 0, false, codes.Errorf(codes.TransferFail, "client: peer announced %d bytes", total)
	}
	val := make([]byte, 0, total)
	val = append(val, first.GetData()...)
	for {
		c, err := recv()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, 0, false, codes.FromStatus(err)
		}
		val = append(val, c.GetData()...)
	}
	if uint64(len(val)) != total {
		return nil, 0, false, codes.Errorf(codes.TransferFail, "client: peer sent %d of %d bytes", len(val), total)
	}
	return val, first.GetCrc32C(), first.GetHasCrc(), nil
}

func (p remotePeer) readRange(ctx context.Context, segment string, off, n int64) ([]byte, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	st, err := p.c.ReadRange(ctx, &rpcpb.PeerReadRangeRequest{Segment: segment, Offset: uint64(off), Length: uint64(n)})
	if err != nil {
		return nil, codes.FromStatus(err)
	}
	val, _, _, err := recvValue(st.Recv)
	return val, err
}

func (p remotePeer) readSSD(ctx context.Context, key []byte) ([]byte, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	st, err := p.c.ReadSSD(ctx, &rpcpb.PeerReadSSDRequest{Key: key})
	if err != nil {
		return nil, codes.FromStatus(err)
	}
	val, crc, has, err := recvValue(st.Recv)
	if err != nil {
		return nil, err
	}
	if has && CRC32C(val) != crc {
		return nil, codes.Errorf(codes.ChecksumMismatch, "client: SSD value from peer fails its CRC32C")
	}
	return val, nil
}

// Flow-control windows of peer connections: values are streamed in 1 MiB
// chunks, and gRPC's default 64 KiB window would stall each chunk on
// round trips.
const (
	streamWindow = 8 << 20
	connWindow   = 32 << 20
)

// serverOptions are the gRPC options of the peer service.
func serverOptions() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.MaxRecvMsgSize(maxMsgSize), grpc.MaxSendMsgSize(maxMsgSize),
		grpc.InitialWindowSize(streamWindow), grpc.InitialConnWindowSize(connWindow),
	}
}

// dialOptions are the gRPC options of connections to peers.
func dialOptions() []grpc.DialOption {
	return []grpc.DialOption{
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithInitialWindowSize(streamWindow), grpc.WithInitialConnWindowSize(connWindow),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(maxMsgSize), grpc.MaxCallSendMsgSize(maxMsgSize)),
	}
}

// peerPool caches one gRPC connection per remote endpoint.
type peerPool struct {
	// mu protects conns and closed.
	mu     sync.Mutex
	conns  map[string]*grpc.ClientConn
	closed bool
}

func (pp *peerPool) get(endpoint string) (peer, error) {
	pp.mu.Lock()
	defer pp.mu.Unlock()
	if pp.closed {
		return nil, ErrClosed
	}
	if cc, ok := pp.conns[endpoint]; ok {
		return remotePeer{rpcpb.NewNodePeerClient(cc)}, nil
	}
	cc, err := grpc.NewClient(endpoint, dialOptions()...)
	if err != nil {
		return nil, codes.Errorf(codes.RPCFail, "client: dial peer %s: %v", endpoint, err)
	}
	if pp.conns == nil {
		pp.conns = map[string]*grpc.ClientConn{}
	}
	pp.conns[endpoint] = cc
	return remotePeer{rpcpb.NewNodePeerClient(cc)}, nil
}

func (pp *peerPool) close() {
	pp.mu.Lock()
	defer pp.mu.Unlock()
	pp.closed = true
	for _, cc := range pp.conns {
		cc.Close()
	}
	pp.conns = nil
}

// PeerStats asks the node serving peers at endpoint for its NodeStats.
func PeerStats(ctx context.Context, endpoint string) (NodeStats, error) {
	cc, err := grpc.NewClient(endpoint, dialOptions()...)
	if err != nil {
		return NodeStats{}, codes.Errorf(codes.RPCFail, "client: dial node %s: %v", endpoint, err)
	}
	defer cc.Close()
	r, err := rpcpb.NewNodePeerClient(cc).NodeStats(ctx, &rpcpb.PeerStatsRequest{})
	if err != nil {
		return NodeStats{}, fmt.Errorf("client: node stats of %s: %w", endpoint, codes.FromStatus(err))
	}
	return NodeStats{
		Endpoint: endpoint, Segment: r.GetSegment(), SegmentSize: int64(r.GetSegmentSize()),
		OffloadEnabled: r.GetOffloadEnabled(), Backend: r.GetBackend(),
		Tier: tier.Stats{
			Objects: r.GetSsdObjects(), Buckets: r.GetSsdBuckets(), BytesUsed: r.GetSsdBytesUsed(),
			Capacity: r.GetSsdCapacity(), BucketsWritten: r.GetSsdBucketsWritten(),
			BytesWritten: r.GetSsdBytesWritten(), ObjectsLoaded: r.GetSsdObjectsLoaded(),
			BytesRead: r.GetSsdBytesRead(), Evictions: r.GetSsdEvictions(), ChecksumErrors: r.GetSsdChecksumErrors(),
		},
		OffloadPersisted: r.GetOffloadPersisted(), OffloadFailed: r.GetOffloadFailed(),
		PeerReadsDRAM: r.GetPeerReadsDram(), PeerReadsSSD: r.GetPeerReadsSsd(),
	}, nil
}
