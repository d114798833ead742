package masterapi

import (
	"context"
	"strconv"

	"google.golang.org/grpc/metadata"

	pb "github.com/tierstore/tierstore/internal/rpcpb"
)

// MemoryObject is one complete object in a node's DRAM segment, as the node
// recorded it from the write that stored it (the write's header carries the
// key, the put's pins, the size and the CRC32C) and re-checked (its bytes'
// CRC32C) before re-registering it at a master that does not know it: a
// new leader after a failover, or a restarted master (docs/ha.md, rebuild).
type MemoryObject struct {
	Key      string
	Offset   int64
	Length   int64  // == the object's size
	CRC      uint32 // CRC32C of the bytes
	PutToken uint64 // the put that wrote the range
	SoftPin  bool
	HardPin  bool
}

// TermTrailer is the gRPC trailer in which a highly available master
// stamps every answer with its leadership term (decimal). A Remote dialed
// with an etcd:// address refuses answers of a term older than the newest
// it has seen (they come from a deposed leader) and retries the call on
// the current leader.
const TermTrailer = "tierstore-term"

// TermMD is the trailer metadata carrying term.
func TermMD(term uint64) metadata.MD {
	return metadata.Pairs(TermTrailer, strconv.FormatUint(term, 10))
}

// termOf reads the term of a trailer; 0 when it carries none.
func termOf(md metadata.MD) uint64 {
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

// MemoryObjectsPB is the wire form of objs (the master's server reads it
// back with MemoryObjectsFromPB).
func MemoryObjectsPB(objs []MemoryObject) []*pb.MemoryObject {
	out := make([]*pb.MemoryObject, len(objs))
	for i, m := range objs {
		out[i] = &pb.MemoryObject{Key: []byte(m.Key), Offset: m.Offset, Length: m.Length, Crc: m.CRC,
			PutToken: m.PutToken, SoftPin: m.SoftPin, HardPin: m.HardPin}
	}
	return out
}

// MemoryObjectsFromPB converts the wire form back.
func MemoryObjectsFromPB(in []*pb.MemoryObject) []MemoryObject {
	out := make([]MemoryObject, len(in))
	for i, m := range in {
		out[i] = MemoryObject{Key: string(m.GetKey()), Offset: m.GetOffset(), Length: m.GetLength(), CRC: m.GetCrc(),
			PutToken: m.GetPutToken(), SoftPin: m.GetSoftPin(), HardPin: m.GetHardPin()}
	}
	return out
}

// ReRegisterMemoryObjects implements API.
func (r *Remote) ReRegisterMemoryObjects(ctx context.Context, node, segment string, objs []MemoryObject, done bool) ([]error, error) {
	p, err := r.c.ReRegisterMemoryObjects(ctx, &pb.RegisterMemoryObjectsRequest{Node: node, Segment: segment,
		Objects: MemoryObjectsPB(objs), Done: done})
	if err != nil {
		return nil, fromStatus(err)
	}
	return keyErrs(p, len(objs))
}

// Term is the newest leadership term this Remote has seen, from etcd or
// from an answer (0 for a Remote dialed with host:port).
func (r *Remote) Term() uint64 {
	if r.rc == nil {
		return 0
	}
	return r.rc.term()
}

// LeaderChanged returns the leader's term as last resolved and a channel
// closed when the resolved leader changes (a new leader elected, or none
// left). A Remote dialed with host:port never changes: its channel is nil.
// A store node uses it to re-register with a new leader at once.
func (r *Remote) LeaderChanged() (uint64, <-chan struct{}) {
	if r.rc == nil {
		return 0, nil
	}
	l, ch := r.rc.res.Changed()
	return l.Term, ch
}

// LeaderAddr is the address of the master this Remote talks to: the
// resolved leader (empty while none is known), or the dialed host:port.
func (r *Remote) LeaderAddr() string {
	if r.rc == nil {
		return r.addr
	}
	return r.rc.res.Current().Addr
}
