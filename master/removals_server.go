package master

import (
	"context"

	pb "github.com/tierstore/tierstore/internal/rpcpb"
	"github.com/tierstore/tierstore/masterapi"
)

// PullRemovals serves the gRPC call.
func (s *Server) PullRemovals(ctx context.Context, r *pb.PullRemovalsRequest) (*pb.PullRemovalsResponse, error) {
	req := masterapi.PullRequest{Node: r.GetNode(), HasSSD: r.GetHasSsd(),
		DRAM: masterapi.RemovalCursor{Log: r.GetDram().GetLog(), Seq: r.GetDram().GetSeq()},
		SSD:  masterapi.RemovalCursor{Log: r.GetSsd().GetLog(), Seq: r.GetSsd().GetSeq()}}
	rep, err := s.api.PullRemovals(ctx, req)
	if err != nil {
		return nil, toStatus(err)
	}
	out := &pb.PullRemovalsResponse{Log: rep.Log, Through: rep.Through, DropDram: rep.DropDRAM, DropSsd: rep.DropSSD, More: rep.More}
	if len(rep.Removals) > 0 {
		out.Removals = make([]*pb.Removal, len(rep.Removals))
		for i, e := range rep.Removals {
			out.Removals[i] = &pb.Removal{Seq: e.Seq, Kind: uint32(e.Kind), Key: []byte(e.Key), Spared: keyBytes(e.Spared)}
		}
	}
	if len(rep.Forget) > 0 {
		out.Forget = make([]*pb.DRAMRef, len(rep.Forget))
		for i, f := range rep.Forget {
			out.Forget[i] = &pb.DRAMRef{Offset: f.Offset, PutToken: f.Token}
		}
	}
	return out, nil
}
