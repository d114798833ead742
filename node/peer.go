package node

import (
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/tierstore/tierstore/internal/errcode"
	"github.com/tierstore/tierstore/internal/rpcpb"
	"github.com/tierstore/tierstore/internal/wire"
	"github.com/tierstore/tierstore/tier"
)

// toCode maps node-side errors to the codes sentinels peers receive.
func toCode(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, ErrOutOfRange), errors.Is(err, ErrRangeNotOwned), errors.Is(err, ErrNoPutToken):
		return errcode.Wrap(errcode.InvalidParams, err)
	case errors.Is(err, tier.ErrNotFound):
		return errcode.Wrap(errcode.ObjectNotFound, err)
	case errors.Is(err, tier.ErrChecksum):
		return errcode.Wrap(errcode.ChecksumMismatch, err)
	case errors.Is(err, tier.ErrInvalidKey):
		return errcode.Wrap(errcode.InvalidKey, err)
	case errors.Is(err, ErrClosed), errors.Is(err, tier.ErrClosed):
		return errcode.Wrap(errcode.ShuttingDown, err)
	}
	return err
}

// peerServer implements rpcpb.NodePeerServer on a Node: its counters
// (values travel on the data plane, dataplane.go).
type peerServer struct {
	rpcpb.UnimplementedNodePeerServer
	n *Node
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
		OffloadFailedBy: st.OffloadFailedBy,
		DramRecords:     st.DRAMRecords, RemovalLog: st.RemovalSSD.Log,
		RemovalCursorDram: st.RemovalDRAM.Seq, RemovalCursorSsd: st.RemovalSSD.Seq,
		RemovalLogRemoved: st.RemovalLogRemoved,
		SsdBytesLive:      st.Tier.LiveBytes, SsdBytesDead: st.Tier.DeadBytes, SsdBucketsMostlyDead: st.Tier.MostlyDeadBuckets,
	}, nil
}

// writeChunk is how much an in-process write copies under one ownership
// check: a newer put's claim waits for one such copy at most.
const writeChunk = 1 << 20

// WriteRange writes value into the node's segment at off for the put
// identified by token (the in-process form of the data plane's write;
// client.LocalNode). It is refused (ErrRangeNotOwned, wrapped in
// errcode.ErrInvalidParams) when a newer put wrote an overlapping range,
// and (ErrNoPutToken) without a token (docs/design.md invariant 8).
//
// A write whose context carries its object (wire.WithObject) is recorded
// for re-registration at a new master (ha.go), with crc as its CRC32C.
func (n *Node) WriteRange(ctx context.Context, segment string, off int64, value []byte, crc uint32, token uint64) error {
	start := time.Now()
	w, err := n.beginWrite(ctx, segment, off, int64(len(value)), token)
	if err != nil {
		return err
	}
	// Copied a chunk at a time, as the data plane receives, so that a
	// newer put's claim waits for one chunk copy at most.
	for pos := 0; pos < len(value); {
		k, err := w.Fill(int64(pos), func(dst []byte) (int, error) {
			return copy(dst, value[pos:min(pos+writeChunk, len(value))]), nil
		})
		if err != nil {
			w.Abort()
			return err
		}
		pos += k
	}
	w.Commit(crc)
	n.observeLocalPut(start)
	return nil
}

// rangeWrite is one put's write of [off, off+length) of the segment,
// claimed for its token by beginWrite (wire.RangeWriter).
type rangeWrite struct {
	n           *Node
	off, length int64
	token       uint64
	obj         wire.Object // the object the bytes are (recorded at Commit)
	hasObj      bool
	remote      bool // a data-plane write (counted as a peer write)
}

// beginWrite checks segment and range and claims [off, off+length) for
// the put with token (invariant 8), before any byte is written.
func (n *Node) beginWrite(ctx context.Context, segment string, off, length int64, token uint64) (*rangeWrite, error) {
	if err := n.checkSegment(segment); err != nil {
		return nil, err
	}
	if length < 0 || length > n.seg.Size() {
		return nil, toCode(fmt.Errorf("%w: a write of %d bytes into a segment of %d", ErrOutOfRange, length, n.seg.Size()))
	}
	if err := n.seg.check(off, int(length)); err != nil {
		return nil, toCode(err)
	}
	if err := n.claimRange(off, length, token); err != nil {
		return nil, toCode(err)
	}
	w := &rangeWrite{n: n, off: off, length: length, token: token}
	w.obj, w.hasObj = wire.ObjectOf(ctx)
	return w, nil
}

// Fill hands fill the range from pos to its end in the segment's mapping,
// if the put still owns it. The check and fill happen under ownMu held
// shared, so a newer put's claim (which takes it exclusively) waits for
// fill, and no fill of an older put follows that claim.
func (w *rangeWrite) Fill(pos int64, fill func(dst []byte) (int, error)) (int, error) {
	n := w.n
	n.ownMu.RLock()
	defer n.ownMu.RUnlock()
	a, b := w.off+pos, w.off+w.length
	if err := n.owners.check(a, b, w.token); err != nil {
		return 0, toCode(err)
	}
	view, release := n.seg.pin()
	defer release()
	dst, err := view(a, int(b-a))
	if err != nil {
		return 0, toCode(err)
	}
	return fill(dst)
}

// Commit records the object the complete write stored (for
// re-registration at a new master, ha.go), unless a newer put claimed
// part of the range meanwhile.
func (w *rangeWrite) Commit(crc uint32) {
	if w.hasObj {
		w.n.recordWrite(w.obj, w.off, w.length, crc, w.token)
	}
	if w.remote {
		w.n.metrics.peerWrites.Add(1) // before the reply: a client that has it sees the count
	}
}

// Abort records nothing: the bytes stay in the put's own range, unread.
func (w *rangeWrite) Abort() {}

// claimRange records that the put with token writes [off, off+length)
// (invariant 8), or refuses it.
func (n *Node) claimRange(off, length int64, token uint64) error {
	n.ownMu.Lock()
	defer n.ownMu.Unlock()
	return n.owners.claim(off, off+length, token)
}

// writeOwned copies p to the segment at off if the put with token still
// owns that range. The check and the copy happen under ownMu held shared,
// so a newer put's claim (which takes it exclusively) waits for the copy,
// and no copy of an older put follows that claim.
func (n *Node) writeOwned(p []byte, off int64, token uint64) error {
	n.ownMu.RLock()
	defer n.ownMu.RUnlock()
	if err := n.owners.check(off, off+int64(len(p)), token); err != nil {
		return err
	}
	return n.seg.WriteAt(p, off)
}

// ReadRange returns a copy of n bytes of the node's segment at off (for
// tests and tools; the client reads with ReadRangeInto).
func (n *Node) ReadRange(_ context.Context, segment string, off, length int64) ([]byte, error) {
	return n.readRange(segment, off, length)
}

// ReadSSD returns key's value from the node's SSD tier, CRC32C-checked
// (for tests and tools; the client reads with ReadSSDInto).
func (n *Node) ReadSSD(ctx context.Context, key []byte) ([]byte, error) {
	return n.readSSD(ctx, key)
}

// PeerStats asks the node serving peers at endpoint for its Stats; opts
// follow the plaintext default (a node with TLS: the credentials).
func PeerStats(ctx context.Context, endpoint string, opts ...grpc.DialOption) (Stats, error) {
	all := append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials()), rpcpb.WithVersion(rpcpb.NodeProtocol)}, opts...)
	cc, err := grpc.NewClient(endpoint, all...)
	if err != nil {
		return Stats{}, fmt.Errorf("node: dial node %s: %w: %v", endpoint, errcode.ErrRPCFail, err)
	}
	defer cc.Close()
	r, err := rpcpb.NewNodePeerClient(cc).NodeStats(ctx, &rpcpb.PeerStatsRequest{})
	if err != nil {
		return Stats{}, fmt.Errorf("node: node stats of %s: %w", endpoint, errcode.FromStatus(err))
	}
	return Stats{
		Endpoint: endpoint, Segment: r.GetSegment(), SegmentSize: int64(r.GetSegmentSize()),
		OffloadEnabled: r.GetOffloadEnabled(), Backend: r.GetBackend(),
		Tier: tier.Stats{
			Objects: r.GetSsdObjects(), Buckets: r.GetSsdBuckets(), BytesUsed: r.GetSsdBytesUsed(),
			Capacity: r.GetSsdCapacity(), BucketsWritten: r.GetSsdBucketsWritten(),
			BytesWritten: r.GetSsdBytesWritten(), ObjectsLoaded: r.GetSsdObjectsLoaded(),
			BytesRead: r.GetSsdBytesRead(), Evictions: r.GetSsdEvictions(), ChecksumErrors: r.GetSsdChecksumErrors(),
			LiveBytes: r.GetSsdBytesLive(), DeadBytes: r.GetSsdBytesDead(), MostlyDeadBuckets: r.GetSsdBucketsMostlyDead(),
		},
		OffloadPersisted: r.GetOffloadPersisted(), OffloadFailed: r.GetOffloadFailed(),
		PeerReadsDRAM: r.GetPeerReadsDram(), PeerReadsSSD: r.GetPeerReadsSsd(),
		OffloadFailedBy: r.GetOffloadFailedBy(),
	}, nil
}
