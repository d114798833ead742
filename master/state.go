package master

import (
	"sync"
	"sync/atomic"
)

// node is one incarnation of a store node. When a node expires its node value
// is marked dead and dropped; a returning node gets a new value, so replicas
// that point at the old one stay unreadable.
type node struct {
	id          string
	endpoint    string       // immutable
	incarnation string       // immutable; "" when the node does not send one
	lastPing    atomic.Int64 // unix nanoseconds of the last ping, mount or heartbeat
	dead        atomic.Bool  // set once, when the node expires

	// segments is protected by Service.nodesMu.
	segments map[string]*segment

	box mailbox
}

// segment is one mounted DRAM segment of a node.
type segment struct {
	node *node
	name string
	size int64
	dead atomic.Bool // unmounted, or its node expired: replicas unreadable

	mu    sync.Mutex // protects alloc
	alloc *allocator
}

func (g *segment) live() bool { return !g.dead.Load() && !g.node.dead.Load() }

// memReplica is an object's DRAM copy.
type memReplica struct {
	seg      *segment
	off, len int64
	complete bool
}

// diskReplica is an object's copy on a node's SSD.
type diskReplica struct {
	node *node
}

// object is the metadata of one key. All fields are protected by the lock of
// the shard that holds the object.
type object struct {
	size int64
	crc  uint32

	mem  memReplica    // the DRAM replica when mem.seg != nil
	disk []diskReplica // at most one per node id

	leaseUntil   int64 // unix ns: read lease; removal paths wait for it
	softPinUntil int64 // unix ns, meaningful when softPin
	putStart     int64 // unix ns of PutStart while mem is not complete
	softPin      bool
	hardPin      bool
	gone         bool   // a replica was lost while the object was leased
	reads        uint32 // demand lookups counted by read admission

	// offload is the node whose offload task (queued or in flight) pins mem;
	// nil when no task exists.
	offload *node
}

func (o *object) leased(now int64) bool { return o.leaseUntil > now }

func (o *object) softPinned(now int64) bool { return o.softPin && o.softPinUntil > now }

// readableMem reports whether the DRAM replica can be read.
func (o *object) readableMem() bool {
	return o.mem.seg != nil && o.mem.complete && o.mem.seg.live()
}

func (o *object) readableDisk() bool {
	for _, d := range o.disk {
		if !d.node.dead.Load() {
			return true
		}
	}
	return false
}

func (o *object) readable() bool { return o.readableMem() || o.readableDisk() }

func (o *object) empty() bool { return o.mem.seg == nil && len(o.disk) == 0 }

// diskIndex returns the index of node id's disk replica, or -1.
func (o *object) diskIndex(id string) int {
	for i, d := range o.disk {
		if d.node.id == id {
			return i
		}
	}
	return -1
}

// shard is one slice of the key space.
type shard struct {
	mu   sync.Mutex // protects objs and every *object in it
	objs map[string]*object
	_    [40]byte // keep neighbouring shard locks on different cache lines
}

// mailbox is a node's offload queue. Lock order: shard.mu before mailbox.mu.
type mailbox struct {
	mu       sync.Mutex          // protects the fields below
	queue    []string            // FIFO of keys; entries not in pending are stale
	pending  map[string]struct{} // queued, not yet fetched
	inflight map[string]int64    // fetched by the node: key -> deadline (unix ns)
}

func (b *mailbox) init() {
	b.pending = map[string]struct{}{}
	b.inflight = map[string]int64{}
}

func (b *mailbox) size() int { return len(b.pending) + len(b.inflight) }

// add queues key; false when the mailbox holds limit tasks already.
func (b *mailbox) add(key string, limit int) bool {
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
	b.pending[key] = struct{}{}
	b.queue = append(b.queue, key)
	return true
}

// drop forgets key's task, queued or in flight.
func (b *mailbox) drop(key string) {
	b.mu.Lock()
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
func (b *mailbox) take(max int, deadline int64) []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []string
	i := 0
	for ; i < len(b.queue) && len(out) < max; i++ {
		k := b.queue[i]
		if _, ok := b.pending[k]; !ok {
			continue
		}
		delete(b.pending, k)
		b.inflight[k] = deadline
		out = append(out, k)
	}
	b.queue = b.queue[i:]
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

func (b *mailbox) counts() (queued, inflight int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.pending), len(b.inflight)
}
