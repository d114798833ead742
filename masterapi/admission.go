package masterapi

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
	FileBytes int64   // file bytes its eviction frees
	Span      int64   // object bytes it holds, live and dead
	Value     float64 // sum over its live objects of estimated frequency x size
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
