package master

import (
	pb "github.com/tierstore/tierstore/internal/rpcpb"
	"github.com/tierstore/tierstore/masterapi"
	"github.com/tierstore/tierstore/mastergrpc"
)

// Conversions of the master service's wire messages that only the server
// needs (the client's, and the replica conversion both sides use, are in
// package mastergrpc).

// putStartRequestFromPB is the inverse of the request's wire form.
func putStartRequestFromPB(r *pb.PutStartRequest) masterapi.PutStartRequest {
	return masterapi.PutStartRequest{Key: string(r.GetKey()), Size: r.GetSize(), CRC: r.GetCrc(), PreferredNode: r.GetPreferredNode(),
		SoftPin: r.GetSoftPin(), HardPin: r.GetHardPin(), Replicas: int(r.GetReplicas()), AllowFewer: r.GetAllowFewerReplicas()}
}

// putReplyPB is the wire form of a PutStartReply: the first replica and
// the others.
func putReplyPB(p masterapi.PutStartReply) (*pb.Replica, []*pb.Replica) {
	var more []*pb.Replica
	for _, m := range p.More {
		more = append(more, mastergrpc.ReplicaPB(m))
	}
	return mastergrpc.ReplicaPB(p.Replica), more
}

// evictDRAMPB converts res to its wire form.
func evictDRAMPB(res masterapi.EvictDRAMResult) *pb.EvictDRAMResponse {
	return &pb.EvictDRAMResponse{Count: res.Dropped, SkippedNoSsdCopy: res.NoSSDCopy, SkippedLeased: res.Leased,
		SkippedOffloadPending: res.OffloadPending, SkippedHardPinned: res.HardPinned,
		SkippedPutInProgress: res.PutInProgress, SkippedNotFound: res.NotFound, SkippedNotInDram: res.NotInDRAM}
}

// ssdReportFromPB converts a wire report back;
// nil for nil.
func ssdReportFromPB(p *pb.SSDReport) *masterapi.SSDReport {
	if p == nil {
		return nil
	}
	out := &masterapi.SSDReport{High: p.GetHigh(), Low: p.GetLow(), Used: p.GetUsed(), Victims: make([]masterapi.SSDVictim, len(p.GetVictims()))}
	for i, v := range p.GetVictims() {
		out.Victims[i] = masterapi.SSDVictim{FileBytes: v.GetFileBytes(), Span: v.GetSpan(), Worth: v.GetWorth()}
	}
	return out
}

// promoteResultsFromPB converts a PromoteEnd request's results .
func promoteResultsFromPB(in []*pb.PromoteResult) []masterapi.PromoteResult {
	out := make([]masterapi.PromoteResult, len(in))
	for i, x := range in {
		out[i] = masterapi.PromoteResult{Key: string(x.GetKey()), PutToken: x.GetPutToken(), Loaded: x.GetLoaded(), Reason: x.GetReason()}
	}
	return out
}

// promoteTasksPB converts promotion tasks to their wire form.
func promoteTasksPB(in []masterapi.PromoteTask) []*pb.PromoteTask {
	out := make([]*pb.PromoteTask, len(in))
	for i, t := range in {
		out[i] = &pb.PromoteTask{Key: []byte(t.Key), Segment: t.Segment, Offset: t.Offset, Length: t.Length,
			Size: t.Size, Crc: t.CRC, PutToken: t.PutToken}
	}
	return out
}

// dramObjectsFromPB converts the wire form back.
func dramObjectsFromPB(in []*pb.DRAMObject) []masterapi.DRAMObject {
	out := make([]masterapi.DRAMObject, len(in))
	for i, m := range in {
		out[i] = masterapi.DRAMObject{Key: string(m.GetKey()), Offset: m.GetOffset(), Length: m.GetLength(), CRC: m.GetCrc(),
			PutToken: m.GetPutToken(), SoftPin: m.GetSoftPin(), HardPin: m.GetHardPin()}
	}
	return out
}
