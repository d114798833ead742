package masterapi

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"
)

// MaxHeartbeatTasks caps the offload tasks one Heartbeat returns.
const MaxHeartbeatTasks = 16384

// ReplicaKind says where a replica lives.
type ReplicaKind uint8

const (
	// DRAM: bytes in a node's DRAM segment at Segment/Offset/Length.
	DRAM ReplicaKind = 1
	// SSD: bytes on a node's SSD tier, served by Node at Endpoint.
	SSD ReplicaKind = 2
)

func (k ReplicaKind) String() string {
	switch k {
	case DRAM:
		return "DRAM"
	case SSD:
		return "SSD"
	}
	return "UNKNOWN"
}

// ReplicaStatus is a replica's lifecycle state. Only Complete replicas are
// ever returned by lookups.
type ReplicaStatus uint8

const (
	// Processing: space allocated by PutStart, bytes not yet written.
	Processing ReplicaStatus = 1
	// Complete: readable.
	Complete ReplicaStatus = 2
)

func (s ReplicaStatus) String() string {
	switch s {
	case Processing:
		return "PROCESSING"
	case Complete:
		return "COMPLETE"
	}
	return "UNKNOWN"
}

// Replica describes one copy of an object.
type Replica struct {
	Kind     ReplicaKind
	Status   ReplicaStatus
	Node     string // owning node id
	Endpoint string // the node's peer data service address
	Segment  string // DRAM only: segment name on Node
	Offset   int64  // DRAM only: byte offset inside the segment
	Length   int64  // DRAM only: bytes at Offset (== object size)
	// PutToken identifies the put that allocated a DRAM replica's range
	// (0 for SSD). PutStart answers it with the Processing replica:
	// the writer carries it to the node (WriteRange) and to the master
	// (PutEnd, PutRevoke); a node refuses a write whose token does not own
	// the range (docs/design.md invariant 8). Lookups answer the token of
	// the put that wrote a Complete DRAM replica, and ReportBadReplica
	// uses it to tell that replica from a later one at the same place.
	//
	// Tokens grow strictly: every PutStart gets a larger token than any the
	// master issued before, also across master restarts (the master issues
	// max(last+1, unix_ms<<22)), so a range allocated again always comes
	// with a larger token than its previous owner's.
	PutToken uint64
	// Grant, when the master has a grant secret (--grant_secret_file;
	// package internal/grant): in a lookup's replica the read grant, in
	// PutStart's answer the write grant of the range (node, key, range,
	// PutToken, until the put's discard deadline). The reader or writer
	// passes it to the node, which refuses a read or write without the
	// grant made for it. Empty without a secret. A string (bytes), so that
	// a Replica stays comparable.
	Grant string
}

// PutRef names one put in progress for BatchPutEnd and BatchPutRevoke: the
// key and the token PutStart answered for it (Replica.PutToken).
type PutRef struct {
	Key   string
	Token uint64
}

// ObjectInfo is what GetReplicaList answers: the object's size and CRC32C
// (Castagnoli) and its readable replicas, best first (DRAM before
// SSD).
type ObjectInfo struct {
	Key           string
	Size          int64
	CRC           uint32
	Replicas      []Replica
	LeaseDeadline time.Time // the read lease granted by this lookup
}

// NodeStatus is a Ping answer.
type NodeStatus uint8

const (
	// NodeOK: the master knows the node; nothing to do.
	NodeOK NodeStatus = 1
	// NeedRemount: the master does not know the node (it expired, or the
	// master restarted): the node must MountSegment again and re-register
	// its SSD objects (ReRegisterSSDColumns).
	NeedRemount NodeStatus = 2
)

func (s NodeStatus) String() string {
	switch s {
	case NodeOK:
		return "OK"
	case NeedRemount:
		return "NEED_REMOUNT"
	}
	return "UNKNOWN"
}

// MountRequest announces a node's DRAM segment.
type MountRequest struct {
	Node     string // node id, unique in the cluster
	Endpoint string // the node's peer data service address (host:port)
	Segment  string // segment name, unique on the node
	Size     int64  // bytes
	// Incarnation identifies the node process (for example a random id
	// chosen at start-up). A mount whose Incarnation or Endpoint differs
	// from the known node's means the node restarted with an empty DRAM
	// segment: the old incarnation is retired like an expired node (its
	// replicas unreadable at once, lease-aware sweep) and the mount starts a
	// new one. "" disables the incarnation check.
	Incarnation string
	// HoldAllocation: the node re-registers the objects its segment holds
	// (ReRegisterDRAMObjects, the last call with done set) before the
	// master may allocate in it, so no put is given a range a live object
	// occupies (docs/ha.md).
	HoldAllocation bool
}

// PingReply answers Ping.
type PingReply struct {
	Status    NodeStatus
	ClientTTL time.Duration // the node must ping more often than this
	// Term is the answering master's leadership term (0 without high
	// availability): a node ignores answers of a term older than one it
	// has seen (docs/ha.md, fencing).
	Term uint64
}

// PutStartRequest asks for space for a new object.
type PutStartRequest struct {
	Key           string
	Size          int64  // value length in bytes, > 0
	CRC           uint32 // CRC32C (Castagnoli) of the value
	PreferredNode string // allocate on this node's segment if it has room; "" = any
	SoftPin       bool   // evicted only after unpinned objects, for default_kv_soft_pin_ttl after the last access
	HardPin       bool   // never evicted from DRAM
	// Replicas is the number of DRAM replicas to place, each on a
	// different node, the preferred node's first (Mooncake's replica_num);
	// 0 means 1, at most MaxReplicas. With fewer live nodes (or fewer with
	// room, after eviction and put_start_max_wait) the put fails, unless
	// AllowFewer.
	Replicas int
	// AllowFewer places as many of the Replicas as fit now (at least one)
	// instead of failing: the first replica waits for room as any put,
	// the further ones are placed only where room is or eviction makes it
	// at once. The answer says how many were placed.
	AllowFewer bool
}

// MaxReplicas bounds PutStartRequest.Replicas.
const MaxReplicas = 16

// PutStartReply answers PutStart: the DRAM replicas (status Processing)
// the caller must fill, all of one put (one PutToken), each on a different
// node. The embedded Replica is the first, on the preferred node when it
// had room; More holds the others (PutStartRequest.Replicas > 1). The put
// is published by PutEnd only when every one of them was written.
type PutStartReply struct {
	Replica
	More []Replica
}

// Replicas returns every replica of the put, the first first.
func (p PutStartReply) Replicas() []Replica {
	return append([]Replica{p.Replica}, p.More...)
}

// PutStartResult answers one item of BatchPutStart: the DRAM replicas
// (status Processing) the caller must fill, or Err.
type PutStartResult struct {
	PutStartReply
	Err error
}

// ExistResult answers one key of BatchExistKey.
type ExistResult struct {
	Exists bool
	Err    error
}

// ReplicaListResult answers one key of BatchGetReplicaList.
type ReplicaListResult struct {
	Info ObjectInfo
	Err  error
}

// OffloadTask tells a node to copy one object from its DRAM segment to its
// SSD tier. The source range stays pinned (never evicted or freed) until the
// node answers with NotifyOffloadSuccess (persisted or failed), the node
// dies, or the task times out.
type OffloadTask struct {
	Key     string
	Segment string
	Offset  int64
	Length  int64
	Size    int64
	CRC     uint32
	// Term is the leadership term the task was issued under (0 without
	// high availability); a node drops tasks of a term older than one it
	// has seen.
	Term uint64
}

// SSDObject is an object held on a node's SSD.
type SSDObject struct {
	Key  string
	Size int64
	CRC  uint32
}

// OffloadFailure answers a task that did not reach SSD.
type OffloadFailure struct {
	Key       string
	Retryable bool // the node may succeed later; the master may queue it again
	Reason    string
}

// NotifyRequest answers offload tasks (or registers SSD objects without a
// task): Persisted keys are durable and committed on the node's SSD;
// Failed keys are not on SSD.
type NotifyRequest struct {
	Node      string
	Persisted []SSDObject
	Failed    []OffloadFailure
}

// EvictResult answers EvictSSDReplica.
type EvictResult struct {
	// Dropped counts the node's SSD replicas the master dropped.
	Dropped int64
	// Keep lists the keys of the call whose replica the master kept: the
	// key's read lease is active and the node's SSD replica is its
	// only readable one (docs/design.md invariant 4). The node must keep
	// each of them readable (re-insert it into another bucket before the
	// victim bucket goes); it stays listed as the node's replica.
	Keep []string
}

// EvictDRAMResult answers EvictDRAM: the DRAM replicas dropped, and
// those left in place by reason. With all, only objects that hold a DRAM
// replica are counted; with keys, each named key is counted once under
// Dropped or one reason.
type EvictDRAMResult struct {
	Dropped int64
	// NoSSDCopy: the object has no readable SSD replica (yet): its
	// offload has not been answered, or offload is off.
	NoSSDCopy int64
	// Leased: a reader of the object's lease was given only the DRAM
	// replica (docs/design.md invariant 4); it may go when the lease ends.
	Leased int64
	// OffloadPending: an offload task (queued or in flight) pins the DRAM
	// replica until the node answers.
	OffloadPending int64
	// HardPinned: the put asked for a hard pin; never evicted.
	HardPinned int64
	// PutInProgress: the key's put has not ended.
	PutInProgress int64
	// NotFound, NotInDRAM: a named key with no object, or with no DRAM
	// replica.
	NotFound, NotInDRAM int64
}

// Skipped is the number of replicas (or named keys) left in place.
func (r EvictDRAMResult) Skipped() int64 {
	return r.NoSSDCopy + r.Leased + r.OffloadPending + r.HardPinned + r.PutInProgress + r.NotFound + r.NotInDRAM
}

// SkipReasons renders the non-zero skip counts, most frequent reason first
// ("3 without an SSD copy yet, 1 leased"); "" when nothing was skipped.
func (r EvictDRAMResult) SkipReasons() string {
	type reason struct {
		n    int64
		what string
	}
	rs := []reason{
		{r.NoSSDCopy, "without an SSD copy yet"},
		{r.OffloadPending, "pinned by an offload task"},
		{r.Leased, "leased by a reader that has only the DRAM copy"},
		{r.HardPinned, "hard-pinned"},
		{r.PutInProgress, "put in progress"},
		{r.NotFound, "not found"},
		{r.NotInDRAM, "not in DRAM"},
	}
	sort.SliceStable(rs, func(i, j int) bool { return rs[i].n > rs[j].n })
	var parts []string
	for _, x := range rs {
		if x.n > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", x.n, x.what))
		}
	}
	return strings.Join(parts, ", ")
}

// Stats is a snapshot of the master's state and counters. The replica and
// byte totals count the replicas of live node incarnations only; those of
// retired incarnations (unreadable, kept for a lease) are in their PerNode
// rows (Alive false). Objects counts every object, a lost one kept for its
// lease included.
type Stats struct {
	Objects          int64
	DRAMReplicas     int64
	SSDReplicas      int64
	DRAMBytes        int64 // object bytes with a DRAM replica
	SSDBytes         int64 // object bytes with at least one SSD replica, per replica
	Segments         int64
	SegmentCapacity  int64
	SegmentUsed      int64
	Nodes            int64
	OffloadQueued    int64 // tasks waiting to be fetched
	OffloadInFlight  int64 // tasks fetched, not yet answered
	Evictions        int64 // DRAM replicas evicted since start
	OffloadQueuedTot int64
	OffloadPersisted int64
	OffloadFailed    int64
	ExpiredNodes     int64
	// Promotions counts DRAM replicas added by promotion (published);
	// PromotionsAbandoned the promotions a node answered that were not
	// published (SSD copy gone, object removed or put again meanwhile,
	// node failed to load).
	Promotions, PromotionsAbandoned int64
	// PerNode has one row per node incarnation, sorted by node id: the live
	// ones, then (Alive false) retired incarnations that replicas still
	// point at (kept unreadable for their objects' leases).
	PerNode []NodeStats
}

// NodeStats is one node's row in Stats. Replica counts include replicas
// not yet complete (a put in progress) and, for a retired incarnation, the
// unreadable ones kept for a lease.
type NodeStats struct {
	Node            string
	Endpoint        string
	Incarnation     string
	Alive           bool
	Segments        int64 // mounted DRAM segments
	SegmentSize     int64 // their bytes
	SegmentUsed     int64 // bytes allocated in them
	DRAMReplicas    int64 // objects with a DRAM replica on this node
	DRAMBytes       int64 // their bytes
	SSDReplicas     int64 // objects with an SSD replica on this node
	SSDBytes        int64 // their bytes
	OffloadQueued   int64 // tasks waiting to be fetched by this node
	OffloadInFlight int64 // tasks this node fetched, not yet answered
}

// ClientAPI is what a client (package client) needs of the master: puts,
// lookups, removal, DRAM eviction, bad-replica reports and counters.
// Implemented in-process by *master.Service and over gRPC by
// *mastergrpc.Client.
// Errors wrap the sentinels of package internal/errcode (codes.ErrObjectNotFound,
// ...): test them with errors.Is, the same way for both implementations.
// Batch calls return one result per input, in order; their own error is
// reserved for failures of the whole call (bad request, transport). Keys are
// opaque bytes carried in a string, 1..keyspec.MaxLen long.
type ClientAPI interface {
	// PutStart allocates the DRAM replicas (status Processing) of a new
	// object: req.Replicas of them (default one), on as many distinct
	// nodes. ErrObjectExists if the key has a complete replica (or a put
	// in progress); ErrNoAvailableHandle if no segment has room even after
	// eviction, or (unless req.AllowFewer) fewer than req.Replicas live
	// nodes have a segment for it (at once) or room in it (after the
	// wait); ErrInvalidKey / ErrInvalidParams for bad input (Replicas
	// outside 0..MaxReplicas).
	PutStart(ctx context.Context, req PutStartRequest) (PutStartReply, error)
	// The put owns the replica's range from PutStart until PutEnd,
	// PutRevoke or put_start_discard_timeout (docs/design.md invariant 8):
	// no other object gets the range meanwhile, even if the key is removed.
	// A put that waits for room (eviction, offload) waits at most until ctx
	// ends or put_start_max_wait passes.
	//
	// PutEnd marks the Processing replicas of the put identified by token
	// Complete, all at once (readers see all of them or none); the
	// admission policy may queue an offload task. A repeated PutEnd of a
	// completed put is a no-op. ErrStalePut when token is not the key's
	// current put (nothing changes); ErrReplicaGone when the segment of any
	// of its replicas died meanwhile (nothing is published: revoke and put
	// again); ErrInvalidParams for token 0.
	PutEnd(ctx context.Context, key string, token uint64) error
	// PutRevoke abandons the put identified by token and frees its range.
	// ErrStalePut when token is not the key's current put (a put removed by
	// a forced Remove has its range freed by this call);
	// ErrInvalidParams when that put has ended already, or for token 0.
	PutRevoke(ctx context.Context, key string, token uint64) error
	BatchPutStart(ctx context.Context, reqs []PutStartRequest) ([]PutStartResult, error)
	BatchPutEnd(ctx context.Context, puts []PutRef) ([]error, error)
	BatchPutRevoke(ctx context.Context, puts []PutRef) ([]error, error)
	// ExistKey reports whether key has a readable replica, and if so grants
	// a read lease of default_kv_lease_ttl. It agrees with GetReplicaList:
	// false where that answers ErrObjectNotFound or ErrReplicaNotReady,
	// ErrReplicaGone where that does (every replica lost inside a lease).
	ExistKey(ctx context.Context, key string) (bool, error)
	// GetReplicaList returns key's readable replicas and grants a read
	// lease. ErrObjectNotFound: never existed (or removed / expired);
	// ErrReplicaGone: it existed but every node holding it died, inside the
	// lease (Mooncake #4508, docs/design.md invariant 4); ErrReplicaNotReady: only a put in progress.
	GetReplicaList(ctx context.Context, key string) (ObjectInfo, error)
	BatchExistKey(ctx context.Context, keys []string) ([]ExistResult, error)
	BatchGetReplicaList(ctx context.Context, keys []string) ([]ReplicaListResult, error)
	// Remove deletes key and frees its DRAM. Unless force:
	// ErrReplicaNotReady while a put of key is in progress (the put then
	// completes normally), ErrObjectHasLease while a read lease is active
	// or an offload task pins the object. A forced Remove of a put in
	// progress removes the object at once but frees its range only when
	// that put ends (PutEnd or PutRevoke, answered ErrStalePut) or its
	// put_start_discard_timeout passes: the writer may still be writing.
	Remove(ctx context.Context, key string, force bool) error
	// RemoveAll removes every object (skipping, unless force, those Remove
	// would refuse: leased, pinned by an offload task, a put in progress)
	// and returns how many were removed. Each object goes through the same
	// removal as Remove.
	RemoveAll(ctx context.Context, force bool) (int64, error)
	// RemoveByRegex is RemoveAll for the objects whose key matches
	// pattern anywhere (Go regexp syntax, RE2; Mooncake's
	// remove_by_regex). A pattern that does not compile is
	// ErrInvalidParams, naming it; nothing is removed then.
	RemoveByRegex(ctx context.Context, pattern string, force bool) (int64, error)
	// EvictDRAM drops the DRAM replicas of the given keys (or of every
	// object when all) that also have a readable SSD replica,
	// honouring pins, offload tasks and leases (a leased object's DRAM
	// replica stays while a reader of the lease was given no SSD
	// replica, docs/design.md invariant 4). Answers how many were dropped,
	// and how many were left in place, by reason.
	EvictDRAM(ctx context.Context, keys []string, all bool) (EvictDRAMResult, error)
	// ReportBadReplica tells the master that replica r of key failed its
	// size or CRC32C check, or that r's node answered it does not hold the
	// object on SSD (crc is the CRC32C the reader expected, from its
	// lookup). The master drops that replica (a DRAM range pinned by a
	// fetched offload task is freed only when the task ends); an object
	// left with no replica keeps its metadata while leased (lookups answer
	// ErrReplicaGone) and is removed after. ErrObjectNotFound for an
	// unknown key; ErrReplicaNotFound, and nothing dropped, when the object
	// has no such replica: already dropped (DRAM eviction may drop a leased
	// object's DRAM replica that has an SSD copy), or the key was put
	// again (another CRC, or for a DRAM replica another PutToken). Such
	// reports are expected and harmless.
	ReportBadReplica(ctx context.Context, key string, crc uint32, r Replica) error
	// Stats returns a snapshot of counters.
	Stats(ctx context.Context) (Stats, error)
}

// NodeAPI is what a store node (package node) needs of the master: its
// segment's mount and liveness, the offload mailbox, and the SSD replica
// registry (notify, re-registration, eviction, reconcile). The same
// implementations and error conventions as ClientAPI.
type NodeAPI interface {
	// MountSegment registers node (if new) and its DRAM segment. Mounting a
	// segment that is already mounted with the same size is a no-op;
	// a different size is ErrSegmentExists. A mount counts as a ping. A new
	// Incarnation or Endpoint retires the node's previous incarnation first.
	MountSegment(ctx context.Context, req MountRequest) error
	// UnmountSegment removes a segment: its DRAM replicas become
	// unreadable at once and are cleared by the lease-aware sweep.
	UnmountSegment(ctx context.Context, node, segment string) error
	// LeaveNode retires node now, as if its client_ttl had passed: its
	// process is closing it (Node.Close), so its DRAM and SSD replicas
	// stop being listed at once instead of client_ttl later (an SSD tier
	// that survives is re-registered when the node mounts again). Only
	// the incarnation given is retired ("" matches any): a late call of
	// an old process does not retire its successor (nil). An unknown
	// node is ErrClientNotFound.
	LeaveNode(ctx context.Context, node, incarnation string) error
	// Ping keeps node alive. An unknown node gets NeedRemount (not an error).
	Ping(ctx context.Context, node string) (PingReply, error)
	// Heartbeat returns up to req.Max (0: a default) queued offload tasks
	// of req.Node and marks them in flight; it counts as a ping. It carries
	// req.SSD to the admission policy, answers the policy's sketch when
	// req.WantSketch and the policy keeps one, and hands out up to
	// MaxPromotions promotion tasks of the node (admission.go).
	Heartbeat(ctx context.Context, req HeartbeatRequest) (HeartbeatReply, error)
	// PromoteEnd answers promotion tasks: a Loaded result publishes the
	// DRAM replica (the node wrote the object's bytes into the task's
	// range, CRC32C checked: commit before publish, invariant 1); a result
	// not loaded frees the range. One error per result: nil, or
	// ErrStalePut when the promotion no longer stands (the object was
	// removed or put again, or the promotion was abandoned because its SSD
	// copy went: its range is freed and nothing is published).
	PromoteEnd(ctx context.Context, node string, results []PromoteResult) ([]error, error)
	// NotifyOffloadSuccess answers tasks: each Persisted key gets (or
	// refreshes) an SSD replica on node and its source is unpinned;
	// each Failed key's task is dropped and its source unpinned, and a
	// Retryable failure queues the task again (at most 3 attempts in all,
	// timeouts included); whatever the task's state, a Failed key also
	// loses node's SSD replica if it has one (the node says the key
	// is not on its SSD). It is idempotent. The result has one error per
	// Persisted item: nil (recorded), ErrChecksumConflict (size/CRC differ
	// from the object's metadata) or ErrObjectNotFound (the key is unknown,
	// or its object was removed while node offloaded it): the node must
	// delete the SSD copy of every refused key. Only ReRegisterSSDColumns
	// creates objects.
	NotifyOffloadSuccess(ctx context.Context, req NotifyRequest) ([]error, error)
	// ReRegisterSSDColumns records objects a node holds on SSD (after a
	// node or master restart), creating unknown ones, a chunk at a time in
	// columns; an existing object with another size/CRC is refused per
	// item (ErrChecksumConflict), as is one removed above the node's
	// removal log cursor (ErrObjectNotFound). The result has one error per
	// object (nil: recorded). A chunk whose columns do not agree or that
	// holds a bad key is refused whole (ErrBadColumns), nothing recorded.
	ReRegisterSSDColumns(ctx context.Context, node string, objs SSDColumns) ([]error, error)
	// EvictSSDReplica is called before node deletes an SSD bucket holding
	// keys. Key by key, the master drops node's SSD replica, except
	// for a key whose read lease is active and whose only readable replica
	// is that one: it is kept and answered in EvictResult.Keep, and the
	// node must keep it readable (re-insert it elsewhere on its SSD). An
	// object left with no replica is removed (after its lease). Never
	// all-or-nothing: the call fails whole only for a bad key
	// (ErrInvalidKey) or a closed master.
	EvictSSDReplica(ctx context.Context, node string, keys []string) (EvictResult, error)
	// ReconcileBegin starts a reconcile session of node (see reconcile.go):
	// d digests the keys the node holds on SSD; the answer lists the ranges
	// whose digests differ from the master's digest of node's SSD
	// replicas. It supersedes node's previous session. ErrNeedRemount for
	// an unknown node; ErrInvalidParams for a malformed digest.
	ReconcileBegin(ctx context.Context, node string, d SlotDigest) (ReconcileSession, error)
	// ReconcileKeys sends keys node holds in the session's differing ranges
	// (keys of other ranges are ignored). Each key's replica is marked
	// seen; the answer lists the keys the node must delete
	// (ReconcileKeysResult.Unwanted). ErrInvalidParams when session is not
	// node's current session (superseded, ended, or the master restarted).
	ReconcileKeys(ctx context.Context, node string, session uint64, keys []string) (ReconcileKeysResult, error)
	// ReconcileEnd drops node's SSD replicas in the session's
	// differing ranges that no ReconcileKeys of the session named (with the
	// usual lease rule for the metadata) and returns how many it dropped;
	// the session ends. The same errors as ReconcileKeys. The node must not
	// send a notify or re-registration between Begin and End, and must not
	// end a session (nor act on Unwanted) if it remounted meanwhile.
	ReconcileEnd(ctx context.Context, node string, session uint64) (int64, error)
	// ReRegisterDRAMObjects recreates complete DRAM replicas of objects
	// node's DRAM segment holds (after a failover or master restart; see
	// DRAMObject) and marks their ranges allocated. Per item: nil, or why
	// it was refused (the node forgets that record). done ends the
	// segment's re-registration: a segment mounted with HoldAllocation
	// takes new puts only after it. ErrNeedRemount for an unknown node,
	// ErrSegmentNotFound for a segment it has not mounted.
	ReRegisterDRAMObjects(ctx context.Context, node, segment string, objs []DRAMObject, done bool) ([]error, error)
	// PullRemovals hands node the durable entries of the removal log above
	// its cursors (and the DRAM records it must forget), and records its
	// SSD cursor, against which its SSD re-registration is checked
	// (docs/design.md, invariant 10). It counts as a ping. ErrNeedRemount
	// for an unknown node.
	PullRemovals(ctx context.Context, req PullRequest) (PullReply, error)
}

// API is the master's whole interface: both halves. *master.Service and
// *mastergrpc.Client implement it.
type API interface {
	ClientAPI
	NodeAPI
}

type offloadPathKey struct{}

// WithOffloadPath marks ctx as belonging to the offload machinery: lookups
// made with it do not count toward read admission (and over gRPC the mark
// travels in the request).
func WithOffloadPath(ctx context.Context) context.Context {
	return context.WithValue(ctx, offloadPathKey{}, true)
}

// IsOffloadPath reports whether ctx was marked by WithOffloadPath.
func IsOffloadPath(ctx context.Context) bool {
	v, _ := ctx.Value(offloadPathKey{}).(bool)
	return v
}

// MaxOffloadWait caps the timeout of one OffloadWaiter.WaitOffload.
const MaxOffloadWait = time.Minute

// OffloadWaiter is the part of NodeAPI that lets a master wake a node when
// its offload is pressing (a put waits for DRAM room, queued offload bytes
// pass a quarter of the node's DRAM, promotions are queued), so that the
// node fetches its tasks at once instead of at its next heartbeat tick.
// *master.Service and *mastergrpc.Client implement it; a node whose master
// does not offloads on its ticks only.
type OffloadWaiter interface {
	// WaitOffload returns true as soon as node's offload is pressing (at
	// once if it is), false after timeout (capped at MaxOffloadWait).
	// ErrNeedRemount for an unknown node. Not a ping.
	WaitOffload(ctx context.Context, node string, timeout time.Duration) (bool, error)
}

// Toucher is the part of ClientAPI that hears of reads the master did not
// see: a client reports the keys it read from its replica-location cache
// (client/loccache.go), and the master counts each as a lookup for the
// object's recency (its DRAM eviction order) and the admission policy's
// frequencies, granting no lease. Keys no longer readable in DRAM are
// skipped, not errors. *master.Service and *mastergrpc.Client implement
// it; a client whose master connection does not reports nothing.
type Toucher interface {
	// Touch counts a read of each of keys (duplicates once).
	// ErrInvalidKey for a malformed key (nothing is counted then).
	Touch(ctx context.Context, keys []string) error
}

// Prefetcher is the part of ClientAPI that brings SSD-resident objects into
// DRAM ahead of a read: each key whose only readable copies are on SSD is
// queued for promotion on the node of its SSD copy, admitted by the
// admission policy's frequency test and bounded by the master's prefetch
// budget; keys in DRAM already, missing keys or keys the policy or budget
// refuse are left as they are (not errors). *master.Service and
// *mastergrpc.Client implement it.
type Prefetcher interface {
	// Prefetch returns how many keys it queued for promotion.
	// ErrInvalidKey for a malformed key (nothing is queued then).
	Prefetch(ctx context.Context, keys []string) (int, error)
}
