package wire

import (
	"context"
	"fmt"
	"hash/crc32"
	"io"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/tierstore/tierstore/internal/codes"
	"github.com/tierstore/tierstore/internal/rpcpb"
)

// MaxChunk is the largest value chunk carried by one stream message.
const MaxChunk = 1 << 20

// maxMsgSize bounds a gRPC message: one chunk plus headers.
const maxMsgSize = MaxChunk + 64<<10

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// CRC32C is the Castagnoli CRC of b, the checksum every object carries.
func CRC32C(b []byte) uint32 { return crc32.Checksum(b, castagnoli) }

// UpdateCRC32C returns crc updated with b (crc of the bytes before b).
func UpdateCRC32C(crc uint32, b []byte) uint32 { return crc32.Update(crc, castagnoli, b) }

// NewCRC32C returns a running Castagnoli CRC.
func NewCRC32C() interface {
	io.Writer
	Sum32() uint32
} {
	return crc32.New(castagnoli)
}

// Flow-control windows of peer connections: values are streamed in 1 MiB
// chunks, and gRPC's default 64 KiB window would stall each chunk on
// round trips.
const (
	streamWindow = 8 << 20
	connWindow   = 32 << 20
)

// ServerOptions are the gRPC options of a node's peer service.
func ServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.MaxRecvMsgSize(maxMsgSize), grpc.MaxSendMsgSize(maxMsgSize),
		grpc.InitialWindowSize(streamWindow), grpc.InitialConnWindowSize(connWindow),
	}
}

// DialOptions are the gRPC options of connections to a node's peer service.
func DialOptions() []grpc.DialOption {
	return []grpc.DialOption{
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithInitialWindowSize(streamWindow), grpc.WithInitialConnWindowSize(connWindow),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(maxMsgSize), grpc.MaxCallSendMsgSize(maxMsgSize)),
	}
}

// SendChunks streams value in chunks of at most MaxChunk; the first chunk
// carries the total length and, when hasCRC, the value's CRC32C.
func SendChunks(send func(*rpcpb.PeerDataChunk) error, value []byte, crc uint32, hasCRC bool) error {
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

// RecvValue assembles a value streamed by SendChunks. A peer that announces
// more than limit bytes, sends more than it announced, or fewer (the stream
// ends early, or sends nothing), is refused with codes.ErrTransferFail
// before anything larger than limit is allocated; a stream that breaks
// (the peer disconnects) gives the transport's error (codes.ErrRPCFail)
// with how many bytes had arrived. No bytes are returned with an error. It
// returns the value and the CRC32C the sender announced (hasCRC false when
// it announced none).
func RecvValue(recv func() (*rpcpb.PeerDataChunk, error), limit int64) (val []byte, crc uint32, hasCRC bool, err error) {
	first, err := recv()
	if err == io.EOF {
		return nil, 0, false, codes.Errorf(codes.TransferFail, "wire: peer sent no data (at most %d bytes expected)", limit)
	}
	if err != nil {
		return nil, 0, false, fmt.Errorf("wire: peer stream broke before the first chunk: %w", codes.FromStatus(err))
	}
	total := first.GetTotalLen()
	if limit < 0 || total > uint64(limit) {
		return nil, 0, false, codes.Errorf(codes.TransferFail, "wire: peer announced %d bytes, at most %d expected", total, limit)
	}
	val = make([]byte, 0, total)
	for c := first; ; {
		if uint64(len(val))+uint64(len(c.GetData())) > total {
			return nil, 0, false, codes.Errorf(codes.TransferFail, "wire: peer sent more than the %d bytes it announced", total)
		}
		val = append(val, c.GetData()...)
		if c, err = recv(); err == io.EOF {
			break
		} else if err != nil {
			return nil, 0, false, fmt.Errorf("wire: peer stream broke after %d of %d bytes: %w", len(val), total, codes.FromStatus(err))
		}
	}
	if uint64(len(val)) != total {
		return nil, 0, false, codes.Errorf(codes.TransferFail, "wire: peer sent %d of %d bytes", len(val), total)
	}
	return val, first.GetCrc32C(), first.GetHasCrc(), nil
}

// Peer reaches one node through its peer service. Safe for concurrent use.
type Peer struct {
	c rpcpb.NodePeerClient
}

// WriteRange streams value into the node's segment at off for the put
// identified by token; the node checks the range, the token's ownership of
// it, the length and crc before it answers.
func (p Peer) WriteRange(ctx context.Context, segment string, off int64, value []byte, crc uint32, token uint64) error {
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
			c.Segment, c.Offset, c.TotalLen, c.Crc32C, c.HasCrc, c.PutToken = segment, uint64(off), uint64(len(value)), crc, true, token
			if o, ok := ObjectOf(ctx); ok {
				c.Key, c.SoftPin, c.HardPin = []byte(o.Key), o.SoftPin, o.HardPin
			}
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

// ReadRange reads n bytes of the node's segment at off. The caller checks
// the bytes against the object's CRC32C.
func (p Peer) ReadRange(ctx context.Context, segment string, off, n int64) ([]byte, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	st, err := p.c.ReadRange(ctx, &rpcpb.PeerReadRangeRequest{Segment: segment, Offset: uint64(off), Length: uint64(n)})
	if err != nil {
		return nil, codes.FromStatus(err)
	}
	val, _, _, err := RecvValue(st.Recv, n)
	return val, err
}

// ReadSSD reads key from the node's SSD tier; size bounds what the node may
// send (the object's size from the master). The value's CRC32C, announced by
// the node, is checked here.
func (p Peer) ReadSSD(ctx context.Context, key []byte, size int64) ([]byte, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	st, err := p.c.ReadSSD(ctx, &rpcpb.PeerReadSSDRequest{Key: key})
	if err != nil {
		return nil, codes.FromStatus(err)
	}
	val, crc, has, err := RecvValue(st.Recv, size)
	if err != nil {
		return nil, err
	}
	if has && CRC32C(val) != crc {
		return nil, codes.Errorf(codes.ChecksumMismatch, "wire: SSD value from peer fails its CRC32C")
	}
	return val, nil
}

// Stats asks the node for its counters.
func (p Peer) Stats(ctx context.Context) (*rpcpb.PeerStatsReply, error) {
	r, err := p.c.NodeStats(ctx, &rpcpb.PeerStatsRequest{})
	if err != nil {
		return nil, codes.FromStatus(err)
	}
	return r, nil
}

// Pool caches one connection per node endpoint. The zero Pool is ready;
// Close closes every connection and refuses later Gets. Safe for concurrent
// use.
type Pool struct {
	// mu protects conns and closed.
	mu     sync.Mutex
	conns  map[string]*grpc.ClientConn
	closed bool
}

// Get returns the Peer at endpoint, dialling it on first use.
func (pp *Pool) Get(endpoint string) (Peer, error) {
	pp.mu.Lock()
	defer pp.mu.Unlock()
	if pp.closed {
		return Peer{}, ErrClosed
	}
	if cc, ok := pp.conns[endpoint]; ok {
		return Peer{rpcpb.NewNodePeerClient(cc)}, nil
	}
	cc, err := grpc.NewClient(endpoint, DialOptions()...)
	if err != nil {
		return Peer{}, codes.Errorf(codes.RPCFail, "wire: dial peer %s: %v", endpoint, err)
	}
	if pp.conns == nil {
		pp.conns = map[string]*grpc.ClientConn{}
	}
	pp.conns[endpoint] = cc
	return Peer{rpcpb.NewNodePeerClient(cc)}, nil
}

// Close closes every connection of the pool.
func (pp *Pool) Close() {
	pp.mu.Lock()
	defer pp.mu.Unlock()
	pp.closed = true
	for _, cc := range pp.conns {
		cc.Close()
	}
	pp.conns = nil
}

// Dial opens a connection of its own to the node at endpoint (for one-off
// calls such as Stats); close it with the returned function.
func Dial(endpoint string) (Peer, func() error, error) {
	cc, err := grpc.NewClient(endpoint, DialOptions()...)
	if err != nil {
		return Peer{}, nil, fmt.Errorf("wire: dial node %s: %w: %v", endpoint, codes.ErrRPCFail, err)
	}
	return Peer{rpcpb.NewNodePeerClient(cc)}, cc.Close, nil
}
