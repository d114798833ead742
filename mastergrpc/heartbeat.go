package mastergrpc

import (
	"context"
	"time"

	pb "github.com/tierstore/tierstore/internal/rpcpb"
	"github.com/tierstore/tierstore/masterapi"
)

// Heartbeat implements NodeAPI over the OffloadHeartbeat RPC.
func (r *Client) Heartbeat(ctx context.Context, req masterapi.HeartbeatRequest) (masterapi.HeartbeatReply, error) {
	max := min(masterapi.MaxHeartbeatTasks, req.Max)
	if max < 0 {
		max = 0
	}
	in := &pb.OffloadHeartbeatRequest{Node: req.Node, MaxTasks: int32(max), WantSketch: req.WantSketch, SketchVersion: req.SketchVersion,
		SketchTransfer: req.SketchTransfer, SketchOffset: req.SketchOffset}
	if req.SSD != nil {
		in.SsdReport = ssdReportPB(*req.SSD)
	}
	p, err := r.c.OffloadHeartbeat(ctx, in)
	if err != nil {
		return masterapi.HeartbeatReply{}, fromStatus(err)
	}
	out := masterapi.HeartbeatReply{Term: p.GetTerm(), WantSSDReport: p.GetSsdReportWanted(),
		Tasks: make([]masterapi.OffloadTask, len(p.GetTasks()))}
	for i, t := range p.GetTasks() {
		out.Tasks[i] = masterapi.OffloadTask{Key: string(t.GetKey()), Segment: t.GetSegment(), Offset: t.GetOffset(), Length: t.GetLength(), Size: t.GetSize(), CRC: t.GetCrc(), Term: p.GetTerm()}
	}
	for _, t := range p.GetPromotions() {
		out.Promotions = append(out.Promotions, masterapi.PromoteTask{Key: string(t.GetKey()), Segment: t.GetSegment(), Offset: t.GetOffset(),
			Length: t.GetLength(), Size: t.GetSize(), CRC: t.GetCrc(), PutToken: t.GetPutToken()})
	}
	if c := p.GetSketchChunk(); c != nil {
		out.Sketch = &masterapi.SketchChunk{Version: c.GetVersion(), Width: c.GetWidth(), DoorBits: c.GetDoorBits(), Period: c.GetPeriod(),
			Samples: c.GetSamples(), Resets: c.GetResets(), Offset: c.GetOffset(), Total: c.GetTotal(), Data: c.GetData()}
	}
	return out, nil
}

// PromoteEnd implements NodeAPI.
func (r *Client) PromoteEnd(ctx context.Context, node string, results []masterapi.PromoteResult) ([]error, error) {
	in := &pb.PromoteEndRequest{Node: node, Results: make([]*pb.PromoteResult, len(results))}
	for i, x := range results {
		in.Results[i] = &pb.PromoteResult{Key: []byte(x.Key), PutToken: x.PutToken, Loaded: x.Loaded, Reason: x.Reason}
	}
	p, err := r.c.PromoteEnd(ctx, in)
	if err != nil {
		return nil, fromStatus(err)
	}
	return putErrs(keyErrs(p, len(results)))
}

// ssdReportPB converts a report to its wire form.
func ssdReportPB(r masterapi.SSDReport) *pb.SSDReport {
	out := &pb.SSDReport{High: r.High, Low: r.Low, Used: r.Used, Victims: make([]*pb.SSDVictim, len(r.Victims))}
	for i, v := range r.Victims {
		out.Victims[i] = &pb.SSDVictim{FileBytes: v.FileBytes, Span: v.Span, Worth: v.Worth}
	}
	return out
}

// WaitOffload implements masterapi.OffloadWaiter over the WaitOffload RPC.
func (r *Client) WaitOffload(ctx context.Context, node string, timeout time.Duration) (bool, error) {
	p, err := r.c.WaitOffload(ctx, &pb.WaitOffloadRequest{Node: node, TimeoutMs: timeout.Milliseconds()})
	if err != nil {
		return false, fromStatus(err)
	}
	return p.GetPressed(), nil
}

// Touch implements masterapi.Toucher over the Touch RPC.
func (r *Client) Touch(ctx context.Context, keys []string) error {
	_, err := r.c.Touch(ctx, &pb.KeysRequest{Keys: keyBytes(keys)})
	return fromStatus(err)
}

// Prefetch implements masterapi.Prefetcher over the Prefetch RPC.
func (r *Client) Prefetch(ctx context.Context, keys []string) (int, error) {
	p, err := r.c.Prefetch(ctx, &pb.KeysRequest{Keys: keyBytes(keys)})
	if err != nil {
		return 0, fromStatus(err)
	}
	return int(p.GetQueued()), nil
}
