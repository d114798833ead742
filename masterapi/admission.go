package masterapi

import (
	"context"

	pb "github.com/tierstore/tierstore/internal/rpcpb"
)

// The node's side of SSD admission and promotion (package admission,
// tinylfu; docs/design.md, "Admission across the RPC boundary"): the
// heartbeat (NodeAPI.Heartbeat) carries the node's SSD report to the master
// and the master's frequency sketch and promotion tasks back; PromoteEnd
// answers promotions.

// MaxPromotions caps the promotion tasks of one heartbeat.
const MaxPromotions = 256

// SSDVictim is one SSD bucket the node would evict next
// (admission.VictimValue).
type SSDVictim struct {
	Bytes int64   // file bytes its eviction frees
	Span  int64   // object bytes it holds, live and dead
	Value float64 // sum over its live objects of estimated frequency x size
}

// SSDReport is a node's SSD fill level and next eviction victims
// (admission.SSDReport).
type SSDReport struct {
	High, Low, Used int64
	Victims         []SSDVictim // first to go first
}

// HeartbeatRequest is the offload heartbeat with admission state.
type HeartbeatRequest struct {
	Node string
	Max  int // most offload tasks (0: the master's default)
	// SSD is the node's SSD report; nil: unchanged since its last one.
	SSD *SSDReport
	// WantSketch: the node takes the admission policy's frequency sketch,
	// answered when SketchVersion is 0 or the master's sketch has moved
	// on since that version (by 1/64 of its ageing period).
	WantSketch bool
	// SketchVersion is the version of the sketch the node holds (0: none).
	SketchVersion uint64
}

// PromoteTask tells a node to copy Key from its SSD tier into its
// segment's range [Offset, Offset+Length), writing as put PutToken (the
// promotion owns the range, invariant 8), then to answer PromoteEnd.
type PromoteTask struct {
	Key     string
	Segment string
	Offset  int64
	Length  int64
	Size    int64
	CRC     uint32
	// PutToken identifies the promotion, as a put's token does.
	PutToken uint64
}

// HeartbeatReply answers Heartbeat.
type HeartbeatReply struct {
	Tasks []OffloadTask
	// Term is the leadership term of the answer (0 without high
	// availability); a node drops tasks and promotions of an older term.
	Term uint64
	// Sketch is the admission policy's sketch (admission.Sketch
	// MarshalBinary) when asked for, kept and moved on; nil otherwise.
	// SketchVersion is its version.
	Sketch        []byte
	SketchVersion uint64
	// WantSSDReport: the admission policy uses the node's SSD reports.
	WantSSDReport bool
	// Promotions are objects to copy from SSD into DRAM.
	Promotions []PromoteTask
}

// PromoteResult is the outcome of one PromoteTask.
type PromoteResult struct {
	Key      string
	PutToken uint64
	// Loaded: the bytes are in the range and match the task's CRC32C.
	Loaded bool
	Reason string // why not, when not Loaded
}

// Heartbeat implements NodeAPI over the OffloadHeartbeat RPC.
func (r *Remote) Heartbeat(ctx context.Context, req HeartbeatRequest) (HeartbeatReply, error) {
	max := min(MaxHeartbeatTasks, req.Max)
	if max < 0 {
		max = 0
	}
	in := &pb.OffloadHeartbeatRequest{Node: req.Node, MaxTasks: int32(max), WantSketch: req.WantSketch, SketchVersion: req.SketchVersion}
	if req.SSD != nil {
		in.SsdReport = SSDReportPB(*req.SSD)
	}
	p, err := r.c.OffloadHeartbeat(ctx, in)
	if err != nil {
		return HeartbeatReply{}, fromStatus(err)
	}
	out := HeartbeatReply{Term: p.GetTerm(), Sketch: p.GetAdmissionSketch(), SketchVersion: p.GetSketchVersion(), WantSSDReport: p.GetSsdReportWanted(),
		Tasks: make([]OffloadTask, len(p.GetTasks()))}
	for i, t := range p.GetTasks() {
		out.Tasks[i] = OffloadTask{Key: string(t.GetKey()), Segment: t.GetSegment(), Offset: t.GetOffset(), Length: t.GetLength(), Size: t.GetSize(), CRC: t.GetCrc(), Term: p.GetTerm()}
	}
	for _, t := range p.GetPromotions() {
		out.Promotions = append(out.Promotions, PromoteTask{Key: string(t.GetKey()), Segment: t.GetSegment(), Offset: t.GetOffset(),
			Length: t.GetLength(), Size: t.GetSize(), CRC: t.GetCrc(), PutToken: t.GetPutToken()})
	}
	if len(out.Sketch) == 0 {
		out.Sketch = nil
	}
	return out, nil
}

// PromoteEnd implements NodeAPI.
func (r *Remote) PromoteEnd(ctx context.Context, node string, results []PromoteResult) ([]error, error) {
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

// SSDReportPB converts a report to its wire form.
func SSDReportPB(r SSDReport) *pb.SSDReport {
	out := &pb.SSDReport{High: r.High, Low: r.Low, Used: r.Used, Victims: make([]*pb.SSDVictim, len(r.Victims))}
	for i, v := range r.Victims {
		out.Victims[i] = &pb.SSDVictim{Bytes: v.Bytes, Span: v.Span, Value: v.Value}
	}
	return out
}

// SSDReportFromPB converts a wire report back (for the master's server);
// nil for nil.
func SSDReportFromPB(p *pb.SSDReport) *SSDReport {
	if p == nil {
		return nil
	}
	out := &SSDReport{High: p.GetHigh(), Low: p.GetLow(), Used: p.GetUsed(), Victims: make([]SSDVictim, len(p.GetVictims()))}
	for i, v := range p.GetVictims() {
		out.Victims[i] = SSDVictim{Bytes: v.GetBytes(), Span: v.GetSpan(), Value: v.GetValue()}
	}
	return out
}

// PromoteResultsFromPB converts a PromoteEnd request's results (for the
// master's server).
func PromoteResultsFromPB(in []*pb.PromoteResult) []PromoteResult {
	out := make([]PromoteResult, len(in))
	for i, x := range in {
		out[i] = PromoteResult{Key: string(x.GetKey()), PutToken: x.GetPutToken(), Loaded: x.GetLoaded(), Reason: x.GetReason()}
	}
	return out
}

// PromoteTasksPB converts promotion tasks to their wire form.
func PromoteTasksPB(in []PromoteTask) []*pb.PromoteTask {
	out := make([]*pb.PromoteTask, len(in))
	for i, t := range in {
		out[i] = &pb.PromoteTask{Key: []byte(t.Key), Segment: t.Segment, Offset: t.Offset, Length: t.Length,
			Size: t.Size, Crc: t.CRC, PutToken: t.PutToken}
	}
	return out
}
