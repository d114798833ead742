package masterapi

// The node's side of SSD admission and promotion (package admission,
// tinylfu; docs/design.md, "Admission across the RPC boundary"): the
// heartbeat (NodeAPI.Heartbeat) carries the node's SSD report to the master
// and the master's frequency sketch and promotion tasks back; PromoteEnd
// answers promotions.

// MaxPromotions caps the promotion tasks of one heartbeat.
const MaxPromotions = 256

// SSDReport is what a store node tells the master about its SSD tier, so
// that admission (package admission, TinyLFU.ReportSSD) can compare a
// candidate with what it would displace. The node computes it from its
// tier (fill level, and the next eviction victims weighed with
// eviction.Worth and the master's sketch); the heartbeat carries it
// (rpcpb SSDReport); the master keeps the latest per node. This is the one
// shape of the report: node, wire converters and admission all use it.
type SSDReport struct {
	// High is the fill level in bytes (bucket files plus writes in
	// progress) that a write may reach without evicting: capacity times
	// the tier's high watermark. 0 means the tier is unlimited.
	High int64
	// Low is the level an eviction round brings the tier down to.
	Low int64
	// Used is the bytes of bucket files plus writes in progress.
	Used int64
	// Victims are the buckets the tier would evict next, first to go
	// first; a node reports at least enough of them to cover High-Low
	// bytes.
	Victims []SSDVictim
}

// SSDVictim is one SSD bucket as admission sees it (eviction.Worth
// computes it).
type SSDVictim struct {
	// FileBytes is the bucket file's size: what evicting it frees.
	FileBytes int64
	// Span is the bytes of object space it holds, live and dead (file
	// size without the bucket format's overhead).
	Span int64
	// Worth is the sum, over the objects the bucket still holds, of
	// estimated frequency times size in bytes.
	Worth float64
}

// Density is the bucket's worth per byte of object space, dead space
// included: the size-weighted mean frequency of the live objects, scaled
// down by the share of dead space, so comparable to a candidate's
// estimated frequency (a candidate of frequency f earns f per byte it
// occupies; the bucket format's own overhead is left out on both sides).
// Objects removed or re-offloaded elsewhere lower it.
func (v SSDVictim) Density() float64 {
	if v.Span <= 0 {
		return 0
	}
	return v.Worth / float64(v.Span)
}

// HeartbeatRequest is the offload heartbeat with admission state.
type HeartbeatRequest struct {
	Node string
	Max  int // most offload tasks (0: the master's default)
	// SSD is the node's SSD report; nil: unchanged since its last one.
	SSD *SSDReport
	// WantSketch: the node takes the admission policy's frequency sketch,
	// in chunks: a transfer starts when SketchVersion is 0 or the master's
	// sketch has moved on since that version (by 1/64 of its ageing
	// period), and a transfer in progress (SketchTransfer) continues.
	WantSketch bool
	// SketchVersion is the version of the sketch the node holds (0: none).
	SketchVersion uint64
	// SketchTransfer is the version of the sketch transfer the node is
	// joining (0: none), SketchOffset the words of it received so far.
	SketchTransfer, SketchOffset uint64
}

// SketchChunk is a piece of the admission sketch (admission.SketchChunk):
// words [Offset, Offset+len(Data)/8) of Total.
type SketchChunk struct {
	Version, Width, DoorBits uint64
	Period, Samples, Resets  int64
	Offset, Total            uint64
	Data                     []byte
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
	// Sketch is the next chunk of the admission policy's sketch when
	// asked for and due (see HeartbeatRequest.WantSketch); nil otherwise.
	Sketch *SketchChunk
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
