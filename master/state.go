package master

import (
	"sync"
	"sync/atomic"

	"github.com/tierstore/tierstore/internal/errcode"
)

// node is one incarnation of a store node. When a node expires its node value
// is marked dead and dropped; a returning node gets a new value, so replicas
// that point at the old one stay unreadable.
type node struct {
	id          string
	endpoint    string       // immutable
	incarnation string       // immutable; "" when the node does not send one
	ix          uint32       // immutable: its index in Service.incs
	lastPing    atomic.Int64 // unix nanoseconds of the last ping, mount or heartbeat
	dead        atomic.Bool  // set once, when the node expires
	// presized: a re-registration of this incarnation sized the shards'
	// maps (ReRegisterSSDColumns' Expected hint); once per incarnation.
	presized atomic.Bool

	// segments is protected by Service.nodesMu.
	segments map[string]*segment

	box mailbox
	// admitting counts the objects the admission policy admitted to this
	// node's SSD whose task is not queued yet (admitToSSD): a report of
	// the node counts them as outstanding (ReportSSD).
	admitting atomic.Int64
	// wake is rung when the node's offload may have become pressing
	// (wake.go): a WaitOffload of the node re-checks.
	wake broadcast
	// promo queues the node's promotion candidates (promote.go).
	promo promoBox
	// forget lists the DRAM records the node must forget (removals_service.go).
	forget forgetBox
	// pulled is rung at every PullRemovals of the node: forced removals of
	// leased objects wait for its DRAM cursor (removewait.go).
	pulled broadcast
	// cursorMu protects dramLog, dramSeq (the DRAM cursor of the node's
	// last pull) and owedLog, owed, owedUntil (the largest sequence number
	// a forced removal waits for the node to apply, and until when: the
	// lease's end, unix ns). A leaf.
	cursorMu         sync.Mutex
	dramLog, owedLog string
	dramSeq, owed    uint64
	owedUntil        int64

	// dig is the SSD replica digest of the node id, shared by all
	// its incarnations (reconcile.go). Immutable.
	dig *ssdDigest

	// Replicas that point at this incarnation, and their object bytes
	// (changed with the global counters, under the object's shard lock).
	dramReplicas, dramBytes, ssdReplicas, ssdBytes atomic.Int64
}

// segment is one mounted DRAM segment of a node.
type segment struct {
	node *node
	name string
	size int64
	dead atomic.Bool // unmounted, or its node expired: replicas unreadable
	// held: mounted with HoldAllocation, its DRAM re-registration not done
	// yet: nothing is allocated in it (dramreg.go).
	held atomic.Bool

	mu    sync.Mutex // protects alloc
	alloc *allocator
}

func (g *segment) live() bool { return !g.dead.Load() && !g.node.dead.Load() }

// dramReplica is one DRAM copy of an object. The DRAM replicas of an
// object all belong to one put (one token, completed together by PutEnd),
// each on a different node.
type dramReplica struct {
	seg      *segment
	off, len int64
	token    uint64 // the put that allocated the range (invariant 8)
	complete bool
	// promo: the range was allocated by a promotion (promote.go), not by
	// a client's put: the node fills it from its SSD tier.
	promo bool
}

// ssdReplica is an object's copy on a node's SSD.
type ssdReplica struct {
	node *node
	// viaTask: recorded as the persisted answer to an offload task this
	// master issued (not a re-registration).
	viaTask bool
	// seen is the reconcile session that last found the key on the node's
	// SSD, or the session current when the replica was recorded
	// (reconcile.go).
	seen uint32
}

// object is the metadata of one key. All fields are protected by the lock of
// the shard that holds the object. (Fields are ordered so that the struct
// has no padding beyond dramReplica's and 4 bytes: 152 bytes, in the
// allocator's 160-byte class; the master's memory per object,
// docs/benchmarks.md.)
type object struct {
	size int64

	// dram is the first DRAM replica when dram.seg != nil (the put's
	// preferred node's, when it had room); more, when not nil, the put's
	// further DRAM replicas (PutStartRequest.Replicas > 1), each on
	// another node, and nil when dram.seg is nil. A pointer: a put of one
	// replica pays 8 bytes for it. Go through drams, dramOn, dramAt and
	// removeDRAMAt (replicas.go), which keep that shape.
	dram dramReplica
	more *[]dramReplica
	ssd  []ssdReplica // at most one per node id

	leaseUntil int64 // unix ns: read lease; removal paths wait for it
	// dramLeaseUntil (unix ns) is the end of the latest lease whose reader
	// may depend on the DRAM replica: its lookup listed no SSD
	// replica, or an SSD replica was dropped while it was leased.
	// Until then DRAM eviction keeps the DRAM replica (see leaseNeedsDRAM).
	dramLeaseUntil int64
	softPinUntil   int64 // unix ns, meaningful when softPin
	putStart       int64 // unix ns of PutStart while dram is not complete
	lastUse        int64 // unix ns of the last lookup hit, or of PutEnd: orders eviction victims
	// token is the put token of the put that wrote the object's bytes (0
	// for an object re-registered from SSD, whose copies carry none): a
	// RemoveAll or RemoveByRegex leaves objects put during its scan.
	token uint64

	// offload is the node whose offload task (queued or in flight) pins dram;
	// nil when no task exists.
	offload *node

	crc     uint32
	reads   uint32 // demand lookups counted by read admission
	softPin bool
	hardPin bool
	// offloadFails counts the retryable failures (and timeouts) of the
	// current admission's offload task; at maxOffloadAttempts the task is
	// dropped. Reset when admission queues the object anew.
	offloadFails uint8
	// offloadGaveUp says why the current admission's offload ended without
	// an SSD copy for good (a permanent failure, or maxOffloadAttempts
	// failures): DRAM eviction then drops the object instead of queuing it
	// again (offload_on_evict would otherwise wedge DRAM). Reset when an
	// admission decision queues the object anew, and by a new put.
	offloadGaveUp gaveUp
}

// gaveUp is why an object's offload ended for good.
type gaveUp uint8

const (
	offloadOK         gaveUp = iota // not given up
	offloadPermanent                // the node answered a permanent failure
	offloadOutOfTries               // maxOffloadAttempts failures or timeouts
)

func (g gaveUp) String() string {
	switch g {
	case offloadPermanent:
		return "offload failed permanently"
	case offloadOutOfTries:
		return "offload failed on every attempt"
	}
	return "none"
}

func (o *object) leased(now int64) bool { return o.leaseUntil > now }

// leaseNeedsDRAM reports whether o's lease forbids dropping its DRAM
// replica (invariant 4): a lease promises that the object stays readable,
// not that its DRAM replica stays, so DRAM may go inside a lease when a
// SSD replica on a live node stays readable and every reader of the
// lease was given that replica (dramLeaseUntil has passed).
func (o *object) leaseNeedsDRAM(now int64) bool {
	return o.leased(now) && (o.dramLeaseUntil > now || !o.readableSSD())
}

func (o *object) softPinned(now int64) bool { return o.softPin && o.softPinUntil > now }

// readableDRAM reports whether a DRAM replica can be read.
func (o *object) readableDRAM() bool { return o.dramSource() != nil }

// dramSource returns o's first readable DRAM replica (complete, on a live
// segment): the source of its offload task. nil when there is none.
func (o *object) dramSource() *dramReplica {
	for _, m := range o.drams() {
		if m.complete && m.seg.live() {
			return m
		}
	}
	return nil
}

func (o *object) readableSSD() bool {
	for _, d := range o.ssd {
		if !d.node.dead.Load() {
			return true
		}
	}
	return false
}

// onlyReadableOn reports whether node id's SSD replica is o's only
// readable replica (no readable DRAM copy, no other live SSD copy).
func (o *object) onlyReadableOn(id string) bool {
	if o.readableDRAM() {
		return false
	}
	mine := false
	for _, d := range o.ssd {
		if d.node.dead.Load() {
			continue
		}
		if d.node.id != id {
			return false
		}
		mine = true
	}
	return mine
}

func (o *object) readable() bool { return o.readableDRAM() || o.readableSSD() }

// putInProgress reports whether a put of o's key holds a range on a live
// segment and has not ended (its writer may be writing).
func (o *object) putInProgress() bool {
	for _, m := range o.drams() {
		if !m.complete && m.seg.live() {
			return true
		}
	}
	return false
}

func (o *object) empty() bool { return o.dram.seg == nil && len(o.ssd) == 0 }

// ssdIndex returns the index of node id's SSD replica, or -1.
func (o *object) ssdIndex(id string) int {
	for i, d := range o.ssd {
		if d.node.id == id {
			return i
		}
	}
	return -1
}

// shard is one slice of the key space. Its maps are nil until their first
// entry (putObj, noteDRAM, hold): a nil map reads as empty.
type shard struct {
	mu   sync.Mutex // protects objs, c, dram, held and every *object in them
	objs map[string]*object
	// c holds the shard's compact objects (compact.go): a key is in objs
	// or in c, never both.
	c compactSet
	// dram holds every object of objs that has a DRAM replica (noteDRAM,
	// called wherever one is added), and possibly some that no longer do
	// or that left objs: the DRAM eviction scans (dramObjects) walk it
	// instead of every object, SSD-only ones included, and drop those
	// stale entries as they pass them.
	dram map[string]*object
	// held holds the objects of objs kept for their lease (or their put
	// in progress) in a state the tick must revisit: left without a
	// replica (settleEmpty), or with replicas on a dead node or segment
	// (the sweep's clearDead). It may hold entries of objects that have
	// gone or changed since. settleHeld revisits them, these objects
	// only, not every object.
	held map[string]*object
	// i is the shard's index in Service.shards, and sets the Service's
	// indexes of the shards whose dram or held set may be non-empty
	// (shardSet): noteDRAM and Service.hold set the shard's bit, the walks
	// that find a set empty clear it. Immutable.
	i    int32
	sets *shardSets
	_    [16]byte // keep neighbouring shard locks on different cache lines
}

// shardSets are the Service's indexes of shards (shardSet).
type shardSets struct {
	dram shardSet // shards whose dram set may be non-empty
	held shardSet // shards whose held set may be non-empty
}

// scanHold is how many objects a walk over every object of a shard
// (RemoveAll, RemoveByRegex, EvictDRAM of all, the sweep) visits per hold of the
// shard's lock: at 50M objects a shard holds ~50k, and a put to it would
// otherwise wait for the whole shard's walk (tens of ms).
const scanHold = 1024

// scanAll calls fn for every object of objs, releasing the shard lock
// (which the caller holds, and holds again when scanAll returns) after
// every scanHold objects, between two calls of fn, and running yielded
// while it is released. What happens while it is released is a map
// change between two steps of one range loop (the Go spec: an entry
// removed before it is reached is not produced, an entry added may or may
// not be), so fn must hold for objects that arrive during the walk (the
// removals skip objects of a larger put token; the sweep's rule holds for
// any object at any time).
func (sh *shard) scanAll(yielded func(), fn func(key string, o *object)) {
	n := 0
	for k, o := range sh.objs {
		fn(k, o)
		if n++; n%scanHold == 0 {
			sh.mu.Unlock()
			if yielded != nil {
				yielded()
			}
			sh.mu.Lock()
		}
	}
}

// noteDRAM records that o, objs[key], has a DRAM replica now. Caller holds
// the shard lock.
func (sh *shard) noteDRAM(key string, o *object) {
	if sh.dram == nil {
		sh.dram = map[string]*object{}
	}
	sh.dram[key] = o
	sh.sets.dram.add(int(sh.i))
}

// putObj sets objs[key]. The shard's maps are made on first use: a master
// has tens of thousands of shards (Config.Shards), most of them empty in
// a small deployment or a test.
func (sh *shard) putObj(key string, o *object) {
	if sh.objs == nil {
		sh.objs = map[string]*object{}
	}
	sh.objs[key] = o
}

// dramObjects calls fn for every object of the shard that has a DRAM
// replica (and may call it for none other), dropping the stale entries of
// dram on the way; when none is left it clears the shard's bit in the
// index of shards holding DRAM objects (shardSets.dram). Caller holds the
// shard lock.
func (sh *shard) dramObjects(fn func(key string, o *object)) {
	for k, o := range sh.dram {
		if sh.objs[k] != o || o.dramCount() == 0 {
			delete(sh.dram, k)
			continue
		}
		fn(k, o)
	}
	if len(sh.dram) == 0 {
		sh.sets.dram.remove(int(sh.i))
	}
}

// orphan is the source range of an in-flight offload task whose object was
// removed (or whose DRAM replica was dropped) after the node fetched the
// task. The node may still be copying the range, so it stays allocated in
// its segment until the node answers the task (the answer is refused with
// code), the node dies (the segment's allocator goes with it) or the task
// times out. Freeing it at once would let another put reuse the range while
// the node copies it.
type orphan struct {
	key      string
	seg      *segment
	off, len int64
	deadline int64        // unix ns, the task's deadline
	code     errcode.Code // the per-key answer to a persisted notify
}

// parkedPut is a range of a put in progress whose object a forced Remove
// deleted (invariant 8): its writer may still be writing, so the range
// stays allocated until the put's PutEnd or PutRevoke (answered
// ErrStalePut) or its discard deadline; a dead segment's allocator goes
// with it.
type parkedPut struct {
	key      string
	seg      *segment
	off, len int64
	deadline int64 // unix ns: PutStart + put_start_discard_timeout
}

// mailbox is a node's offload queue. Lock order: shard.mu before mailbox.mu.
type mailbox struct {
	mu      sync.Mutex       // protects the fields below
	queue   []string         // FIFO of keys; entries not in pending are stale
	pending map[string]int64 // queued, not yet fetched: key -> bytes of its source range
	// pendingBytes is the sum of pending's bytes (wake.go: a node is woken
	// when it passes a quarter of its DRAM).
	pendingBytes int64
	inflight     map[string]int64 // fetched by the node: key -> deadline (unix ns)
	// orphans are fetched tasks whose object (or source replica) went away;
	// a pending task of the same key is not handed out while its orphan
	// exists, so the node's answer for a key is never ambiguous.
	orphans map[string]orphan
}

func (b *mailbox) init() {
	b.pending = map[string]int64{}
	b.inflight = map[string]int64{}
	b.orphans = map[string]orphan{}
}

// orphan turns key's in-flight task into an orphan holding o's range and
// reports whether it did (false: the task is not in flight).
func (b *mailbox) orphan(key string, o orphan) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	d, ok := b.inflight[key]
	if !ok {
		return false
	}
	delete(b.inflight, key)
	o.key, o.deadline = key, d
	b.orphans[key] = o
	return true
}

// inFlight reports whether key's task has been fetched by the node.
func (b *mailbox) inFlight(key string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	_, ok := b.inflight[key]
	return ok
}

// takeOrphan removes and returns key's orphan.
func (b *mailbox) takeOrphan(key string) (orphan, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	o, ok := b.orphans[key]
	if ok {
		delete(b.orphans, key)
	}
	return o, ok
}

// takeExpiredOrphans removes and returns the orphans whose deadline is
// before now.
func (b *mailbox) takeExpiredOrphans(now int64) []orphan {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []orphan
	for k, o := range b.orphans {
		if o.deadline < now {
			out = append(out, o)
			delete(b.orphans, k)
		}
	}
	return out
}

// orphanList returns a copy of the orphans (Check).
func (b *mailbox) orphanList() []orphan {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make([]orphan, 0, len(b.orphans))
	for _, o := range b.orphans {
		out = append(out, o)
	}
	return out
}

func (b *mailbox) size() int { return len(b.pending) + len(b.inflight) }

// add queues key, whose source range is bytes long; false when the
// mailbox holds limit tasks already.
func (b *mailbox) add(key string, bytes int64, limit int) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, ok := b.pending[key]; ok {
		return true
	}
	if _, ok := b.inflight[key]; ok {
		return true
	}
	if b.size() >= limit {
		return false
	}
	b.pending[key] = bytes
	b.pendingBytes += bytes
	b.queue = append(b.queue, key)
	return true
}

// drop forgets key's task, queued or in flight.
func (b *mailbox) drop(key string) {
	b.mu.Lock()
	b.pendingBytes -= b.pending[key]
	delete(b.pending, key)
	delete(b.inflight, key)
	if len(b.queue) > 64 && len(b.queue) > 4*len(b.pending) {
		q := b.queue[:0:0]
		for _, k := range b.queue {
			if _, ok := b.pending[k]; ok {
				q = append(q, k)
			}
		}
		b.queue = q
	}
	b.mu.Unlock()
}

// take moves up to max queued keys to in flight with the given deadline.
// A key whose orphan is still out stays queued.
func (b *mailbox) take(max int, deadline int64) []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out, held []string
	i := 0
	for ; i < len(b.queue) && len(out) < max; i++ {
		k := b.queue[i]
		if _, ok := b.pending[k]; !ok {
			continue
		}
		if _, ok := b.orphans[k]; ok {
			held = append(held, k)
			continue
		}
		b.pendingBytes -= b.pending[k]
		delete(b.pending, k)
		b.inflight[k] = deadline
		out = append(out, k)
	}
	b.queue = append(held, b.queue[i:]...)
	if len(b.queue) == 0 {
		b.queue = nil
	}
	return out
}

// expired returns the in-flight keys whose deadline is before now.
func (b *mailbox) expired(now int64) []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []string
	for k, d := range b.inflight {
		if d < now {
			out = append(out, k)
		}
	}
	return out
}

// queuedBytes returns how many tasks are queued (not fetched) and the
// bytes of their sources.
func (b *mailbox) queuedBytes() (int, int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.pending), b.pendingBytes
}

func (b *mailbox) counts() (queued, inflight int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.pending), len(b.inflight)
}
