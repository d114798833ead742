package master

import (
	"context"
	"fmt"
	"hash/maphash"
	"log/slog"
	"math/bits"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tierstore/tierstore/admission"
	"github.com/tierstore/tierstore/internal/codes"
)

// Service is the master, in-process. It implements API. Create it with New;
// Close stops its background loop.
type Service struct {
	cfg    Config
	clock  Clock
	log    *slog.Logger
	policy admission.Policy
	// countLookups is policy.WantsLookups(), cached.
	countLookups bool

	seed   maphash.Seed
	shards []shard
	mask   uint64

	nodesMu sync.RWMutex // protects nodes, retired and every node.segments map
	nodes   map[string]*node
	// retired holds expired or replaced incarnations while replicas still
	// point at them (kept for the lease); Stats lists them as not alive and
	// forgets them once they hold nothing.
	retired []*node

	evictMu  sync.Mutex    // serialises eviction rounds
	evictGen atomic.Uint64 // incremented after every eviction round

	// sweepDirty is set when replicas became unreadable (unmount, expiry,
	// lost disk replica) and cleared by a sweep that left nothing behind.
	sweepDirty atomic.Bool
	// processing counts objects whose DRAM replica is not complete yet.
	processing atomic.Int64
	// lastReclaim is the time (unix ns) of the last sweep.
	lastReclaim atomic.Int64

	cnt counters
	met *metrics

	evictCh chan struct{}
	stop    chan struct{}
	done    chan struct{}
	closed  atomic.Bool
	once    sync.Once
}

// counters are the live totals reported by Stats and the metrics.
type counters struct {
	objects, memReplicas, diskReplicas atomic.Int64
	memBytes, diskBytes                atomic.Int64
	evictions                          atomic.Int64
	offloadQueued, offloadPersisted    atomic.Int64
	offloadFailed, expiredNodes        atomic.Int64
	offloadRetried, offloadAbandoned   atomic.Int64
	badReplicas                        atomic.Int64
}

var _ API = (*Service)(nil)

// New returns a Service for cfg. Zero-valued Clock and Logger take
// SystemClock and slog.Default(). With cfg.MonitorInterval > 0 a background
// loop runs Tick at that period and evicts when a segment passes the high
// watermark.
func New(cfg Config) (*Service, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	s := &Service{cfg: cfg, clock: cfg.Clock, log: cfg.Logger, policy: cfg.Admission}
	if s.clock == nil {
		s.clock = SystemClock{}
	}
	if s.log == nil {
		s.log = slog.Default()
	}
	if s.policy == nil {
		p, err := admission.FromSettings(cfg.admissionSettings())
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrBadConfig, err)
		}
		s.policy = p
	}
	s.countLookups = s.policy.WantsLookups()
	n := 1 << bits.Len(uint(cfg.Shards-1))
	s.shards = make([]shard, n)
	for i := range s.shards {
		s.shards[i].objs = map[string]*object{}
	}
	s.mask = uint64(n - 1)
	s.seed = maphash.MakeSeed()
	s.nodes = map[string]*node{}
	s.met = newMetrics(s)
	s.startAdmission()
	s.evictCh = make(chan struct{}, 1)
	s.stop = make(chan struct{})
	s.done = make(chan struct{})
	if cfg.MonitorInterval > 0 {
		go s.loop()
	} else {
		close(s.done)
	}
	s.log.Info("master started", "policy", s.policy.Name(), "lease_ttl", cfg.DefaultKVLeaseTTL,
		"client_ttl", cfg.ClientTTL, "high_watermark", cfg.EvictionHighWatermarkRatio,
		"eviction_ratio", cfg.EvictionRatio, "shards", n)
	return s, nil
}

// Close stops the background loop. Calls made after Close fail with
// ErrClosed.
func (s *Service) Close() error {
	s.once.Do(func() {
		s.closed.Store(true)
		close(s.stop)
	})
	<-s.done
	return nil
}

// Config returns the configuration the Service runs with.
func (s *Service) Config() Config { return s.cfg }

// Policy returns the admission policy in use.
func (s *Service) Policy() admission.Policy { return s.policy }

func (s *Service) loop() {
	defer close(s.done)
	t := time.NewTicker(s.cfg.MonitorInterval)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
			s.Tick()
			s.evictIfAboveWatermark()
		case <-s.evictCh:
			s.evictIfAboveWatermark()
		}
	}
}

// Tick runs one round of background work: expire silent nodes, time out
// unanswered offload tasks, reclaim abandoned puts and sweep unreadable
// replicas whose lease has expired. The background loop calls it; tests with
// a ManualClock call it directly.
func (s *Service) Tick() {
	now := s.now()
	s.expireNodes(now)
	s.timeoutTasks(now)
	// Abandoned puts need a full scan; do it at most every quarter of
	// put_start_discard_timeout, and at once when replicas became
	// unreadable.
	reclaimDue := s.processing.Load() > 0 && now-s.lastReclaim.Load() >= s.cfg.PutStartDiscardTimeout.Nanoseconds()/4
	if s.sweepDirty.Load() || reclaimDue {
		s.lastReclaim.Store(now)
		s.sweep(now)
	}
}

func (s *Service) now() int64 { return s.clock.Now().UnixNano() }

func (s *Service) shardOf(key string) *shard {
	return &s.shards[s.shardIndex(key)]
}

// shardIndex is the index in s.shards of key's shard.
func (s *Service) shardIndex(key string) int {
	return int(maphash.String(s.seed, key) & s.mask)
}

// check returns ErrClosed after Close and the context's error.
func (s *Service) check(ctx context.Context) error {
	if s.closed.Load() {
		return ErrClosed
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("master: %w", err)
	}
	return nil
}

func validKey(key string) error {
	if len(key) == 0 {
		return codes.Errorf(codes.InvalidKey, "master: empty key")
	}
	if len(key) > MaxKeyLen {
		return codes.Errorf(codes.InvalidKey, "master: key of %d bytes exceeds %d", len(key), MaxKeyLen)
	}
	return nil
}

// observe records err in the error metrics and returns it.
func (s *Service) observe(err error) error {
	if err != nil {
		s.met.countErr(err)
	}
	return err
}

// ---- nodes and segments ----

func (s *Service) lookupNode(id string) *node {
	s.nodesMu.RLock()
	n := s.nodes[id]
	s.nodesMu.RUnlock()
	return n
}

// MountSegment implements API.
func (s *Service) MountSegment(ctx context.Context, req MountRequest) error {
	if err := s.check(ctx); err != nil {
		return err
	}
	switch {
	case req.Node == "":
		return s.observe(codes.Errorf(codes.InvalidParams, "master: mount: empty node id"))
	case req.Segment == "":
		return s.observe(codes.Errorf(codes.InvalidParams, "master: mount: empty segment name"))
	case req.Size < allocAlign:
		return s.observe(codes.Errorf(codes.InvalidParams, "master: mount: segment size %d below %d bytes", req.Size, allocAlign))
	}
	now := s.now()
	s.nodesMu.Lock()
	n := s.nodes[req.Node]
	replaced := false
	if n != nil && ((req.Incarnation != "" && req.Incarnation != n.incarnation) ||
		(req.Endpoint != "" && req.Endpoint != n.endpoint)) {
		// The node restarted (new process, empty DRAM) before it was
		// expired: retire the old incarnation as if it had expired.
		s.retireLocked(n)
		n, replaced = nil, true
	}
	if n == nil {
		n = &node{id: req.Node, endpoint: req.Endpoint, incarnation: req.Incarnation, segments: map[string]*segment{}}
		n.box.init()
		s.nodes[req.Node] = n
		s.log.Info("node joined", "node", req.Node, "endpoint", req.Endpoint, "incarnation", req.Incarnation, "replaced_old", replaced)
	}
	n.lastPing.Store(now)
	err := s.mountLocked(n, req)
	s.nodesMu.Unlock()
	if replaced {
		s.sweepDirty.Store(true)
		s.sweep(now)
	}
	return s.observe(err)
}

// mountLocked adds req's segment to n. Caller holds nodesMu.
func (s *Service) mountLocked(n *node, req MountRequest) error {
	if g, ok := n.segments[req.Segment]; ok {
		if g.size != req.Size {
			return codes.Errorf(codes.SegmentExists, "master: segment %q of node %q is mounted with size %d, not %d", req.Segment, req.Node, g.size, req.Size)
		}
		return nil
	}
	n.segments[req.Segment] = &segment{node: n, name: req.Segment, size: req.Size, alloc: newAllocator(req.Size)}
	s.log.Info("segment mounted", "node", req.Node, "segment", req.Segment, "size", req.Size)
	return nil
}

// UnmountSegment implements API.
func (s *Service) UnmountSegment(ctx context.Context, nodeID, seg string) error {
	if err := s.check(ctx); err != nil {
		return err
	}
	s.nodesMu.Lock()
	n := s.nodes[nodeID]
	if n == nil {
		s.nodesMu.Unlock()
		return s.observe(codes.Errorf(codes.ClientNotFound, "master: unmount: node %q", nodeID))
	}
	g := n.segments[seg]
	if g == nil {
		s.nodesMu.Unlock()
		return s.observe(codes.Errorf(codes.SegmentNotFound, "master: unmount: segment %q of node %q", seg, nodeID))
	}
	delete(n.segments, seg)
	g.dead.Store(true)
	s.nodesMu.Unlock()
	s.sweepDirty.Store(true)
	s.log.Info("segment unmounted", "node", nodeID, "segment", seg)
	s.sweep(s.now())
	return nil
}

// Ping implements API.
func (s *Service) Ping(ctx context.Context, nodeID string) (PingReply, error) {
	if err := s.check(ctx); err != nil {
		return PingReply{}, err
	}
	r := PingReply{Status: NeedRemount, ClientTTL: s.cfg.ClientTTL}
	if n := s.lookupNode(nodeID); n != nil {
		n.lastPing.Store(s.now())
		r.Status = NodeOK
	}
	return r, nil
}

// retireLocked removes node n: it is marked dead with its segments, so its
// replicas are unreadable at once; the caller runs the lease-aware sweep
// after releasing nodesMu. Caller holds nodesMu.
func (s *Service) retireLocked(n *node) {
	delete(s.nodes, n.id)
	s.pruneRetiredLocked()
	s.retired = append(s.retired, n)
	n.dead.Store(true)
	for _, g := range n.segments {
		g.dead.Store(true)
	}
	s.cnt.expiredNodes.Add(1)
}

// expireNodes expires every node silent for longer than client_ttl.
func (s *Service) expireNodes(now int64) {
	ttl := s.cfg.ClientTTL.Nanoseconds()
	var dead []*node
	s.nodesMu.Lock()
	for _, n := range s.nodes {
		if now-n.lastPing.Load() > ttl {
			s.retireLocked(n)
			dead = append(dead, n)
		}
	}
	s.nodesMu.Unlock()
	if len(dead) == 0 {
		return
	}
	for _, n := range dead {
		s.log.Warn("node expired", "node", n.id, "client_ttl", s.cfg.ClientTTL)
	}
	s.sweepDirty.Store(true)
	s.sweep(now)
}

// ExpireNode expires nodeID now, as if it had been silent for client_ttl
// (tests and operators). It reports whether the node was known.
func (s *Service) ExpireNode(nodeID string) bool {
	s.nodesMu.Lock()
	n := s.nodes[nodeID]
	if n == nil {
		s.nodesMu.Unlock()
		return false
	}
	s.retireLocked(n)
	s.nodesMu.Unlock()
	s.log.Warn("node expired by request", "node", nodeID)
	s.sweepDirty.Store(true)
	s.sweep(s.now())
	return true
}

// sweep is the lease-aware stale-handle sweep (reference 000): replicas that
// became unreadable (segment unmounted, node expired) are removed only once
// the object's lease has expired; an object left without replicas is removed
// only then too. Abandoned puts (PROCESSING longer than
// put_start_discard_timeout) are reclaimed. Offload pins held by dead nodes
// are released.
func (s *Service) sweep(now int64) {
	left := false
	discard := s.cfg.PutStartDiscardTimeout.Nanoseconds()
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		for key, o := range sh.objs {
			if o.offload != nil && o.offload.dead.Load() {
				o.offload = nil // the dead node's mailbox went with it
			}
			if o.mem.seg != nil && !o.mem.complete && o.mem.seg.live() && now-o.putStart > discard {
				s.log.Debug("reclaiming abandoned put", "key_len", len(key), "node", o.mem.seg.node.id)
				s.dropMem(o)
			}
			if !s.clearDead(o, now) {
				left = true
			}
			if o.empty() && !o.leased(now) {
				s.deleteObj(sh, key, o)
			} else if o.empty() {
				left = true
			}
		}
		sh.mu.Unlock()
	}
	if !left {
		s.sweepDirty.Store(false)
	}
}

// clearDead drops o's unreadable replicas if o's lease has expired; it
// reports false when dead replicas remain (kept for the lease). Caller holds
// the shard lock.
func (s *Service) clearDead(o *object, now int64) bool {
	deadMem := o.mem.seg != nil && !o.mem.seg.live()
	deadDisk := false
	for _, d := range o.disk {
		if d.node.dead.Load() {
			deadDisk = true
			break
		}
	}
	if !deadMem && !deadDisk {
		return true
	}
	if o.leased(now) {
		return false
	}
	if deadMem {
		s.dropMem(o)
	}
	if deadDisk {
		kept := o.disk[:0]
		for _, d := range o.disk {
			if d.node.dead.Load() {
				s.countDisk(d.node, -1, -o.size)
				continue
			}
			kept = append(kept, d)
		}
		o.disk = kept
	}
	return true
}

// dropMem removes o's DRAM replica, freeing its range when the segment is
// still mounted (a dead segment's allocator is discarded with it). Caller
// holds the shard lock.
func (s *Service) dropMem(o *object) { s.forgetMem(o, true) }

// freeRange returns [off, off+n) to g's allocator when g is still mounted.
func freeRange(g *segment, off, n int64) {
	if g.live() {
		g.mu.Lock()
		g.alloc.Free(off, n)
		g.mu.Unlock()
	}
}

// forgetMem removes o's DRAM replica from the metadata and frees its range
// if free is set (otherwise the caller handed the range to an orphan).
// Caller holds the shard lock.
func (s *Service) forgetMem(o *object, free bool) {
	m := &o.mem
	if m.seg == nil {
		return
	}
	if !m.complete {
		s.processing.Add(-1)
	}
	if free {
		freeRange(m.seg, m.off, m.len)
	}
	s.countMem(m.seg.node, -1, -o.size)
	o.mem = memReplica{}
	o.reads = 0
}

// countMem adds delta Memory replicas of bytes bytes in all to the global
// counters and to node n's. Caller holds the object's shard lock.
func (s *Service) countMem(n *node, delta, bytes int64) {
	s.cnt.memReplicas.Add(delta)
	s.cnt.memBytes.Add(bytes)
	n.memReplicas.Add(delta)
	n.memBytes.Add(bytes)
}

// countDisk is countMem for LocalDisk replicas.
func (s *Service) countDisk(n *node, delta, bytes int64) {
	s.cnt.diskReplicas.Add(delta)
	s.cnt.diskBytes.Add(bytes)
	n.diskReplicas.Add(delta)
	n.diskBytes.Add(bytes)
}

// dropAllDisk forgets every LocalDisk replica of o. Caller holds the
// shard lock.
func (s *Service) dropAllDisk(o *object) {
	for _, d := range o.disk {
		s.countDisk(d.node, -1, -o.size)
	}
	o.disk = nil
}

// deleteObj removes o from its shard, dropping its replicas and its offload
// task (a fetched task's source range stays allocated until the node
// answers, see dropMemAndTask). Caller holds the shard lock.
func (s *Service) deleteObj(sh *shard, key string, o *object) {
	s.dropMemAndTask(key, o, codes.ObjectNotFound)
	s.dropAllDisk(o)
	delete(sh.objs, key)
	s.cnt.objects.Add(-1)
}
