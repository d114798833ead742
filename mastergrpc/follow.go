package mastergrpc

import (
	"context"
	"strconv"

	"google.golang.org/grpc/metadata"

	pb "github.com/tierstore/tierstore/internal/rpcpb"
	"github.com/tierstore/tierstore/masterapi"
)

// TermTrailer is the gRPC trailer in which a highly available master
// stamps every answer with its leadership term (decimal). A Client dialed
// with an etcd:// address refuses answers of a term older than the newest
// it has seen (they come from a deposed leader) and retries the call on
// the current leader.
const TermTrailer = "tierstore-term"

// TermMD is the trailer metadata carrying term.
func TermMD(term uint64) metadata.MD {
	return metadata.Pairs(TermTrailer, strconv.FormatUint(term, 10))
}

// TermOf reads the term of a trailer; 0 when it carries none.
func TermOf(md metadata.MD) uint64 {
	v := md.Get(TermTrailer)
	if len(v) == 0 {
		return 0
	}
	t, err := strconv.ParseUint(v[0], 10, 64)
	if err != nil {
		return 0
	}
	return t
}

// dramObjectsPB is the wire form of objs.
func dramObjectsPB(objs []masterapi.DRAMObject) []*pb.DRAMObject {
	out := make([]*pb.DRAMObject, len(objs))
	for i, m := range objs {
		out[i] = &pb.DRAMObject{Key: []byte(m.Key), Offset: m.Offset, Length: m.Length, Crc: m.CRC,
			PutToken: m.PutToken, SoftPin: m.SoftPin, HardPin: m.HardPin}
	}
	return out
}

// ReRegisterDRAMObjects implements API.
func (r *Client) ReRegisterDRAMObjects(ctx context.Context, node, segment string, objs []masterapi.DRAMObject, done bool) ([]error, error) {
	p, err := r.c.ReRegisterDRAMObjects(ctx, &pb.RegisterDRAMObjectsRequest{Node: node, Segment: segment,
		Objects: dramObjectsPB(objs), Done: done})
	if err != nil {
		return nil, fromStatus(err)
	}
	return keyErrs(p, len(objs))
}

// Term is the newest leadership term this Client has seen: its
// connection's, when that follows a leader (Follower), else 0.
func (r *Client) Term() uint64 {
	if f, ok := r.conn.(Follower); ok {
		return f.Term()
	}
	return 0
}

// LeaderChanged returns the leader's term as last resolved and a channel
// closed when the resolved leader changes (a new leader elected, or none
// left). A Client whose connection does not follow a leader (host:port)
// never changes: its channel is nil. A store node uses it to re-register
// with a new leader at once.
func (r *Client) LeaderChanged() (uint64, <-chan struct{}) {
	if f, ok := r.conn.(Follower); ok {
		return f.LeaderChanged()
	}
	return 0, nil
}

// LeaderAddr is the address of the master this Client talks to: the
// resolved leader (empty while none is known), or the dialed host:port.
func (r *Client) LeaderAddr() string {
	if f, ok := r.conn.(Follower); ok {
		return f.LeaderAddr()
	}
	return r.addr
}
