package master

import (
	"context"
	"fmt"
	"log/slog"
	"math/bits"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tierstore/tierstore/admission"
	"github.com/tierstore/tierstore/internal/errcode"
	"github.com/tierstore/tierstore/internal/keyspec"
	"github.com/tierstore/tierstore/masterapi"
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
	// graceEnd (unix ns, set by New, read-only after) ends the start-up
	// grace (Config.StartupGrace): until then a PutStart that finds no
	// segment mounted waits for a mount (room.go, mayWait).
	graceEnd int64
	// removeScans counts the RemoveAll and RemoveByRegex scans in
	// progress: no object is frozen meanwhile (freezable).
	removeScans atomic.Int64
	// leaseBase (unix ns, set by New, read-only after) is the time a
	// compact record's read lease counts from (crec.lease).
	leaseBase int64

	shards []shard
	mask   uint64
	// sets index the shards whose dram or held set may be non-empty
	// (shardSet): the walks over those sets visit only these shards.
	sets shardSets

	digestMu sync.Mutex            // protects digests
	digests  map[string]*ssdDigest // per node id: its SSD replicas' digest (reconcile.go)

	nodesMu sync.RWMutex // protects nodes, retired and every node.segments map
	// incs lists every node incarnation by its index (node.ix), which
	// compact records name (compact.go); appended under nodesMu, read
	// without a lock (a new slice each time). Never shrinks: an
	// incarnation is a few hundred bytes, and there are few.
	incs atomic.Pointer[[]*node]
	// cst holds the blocks of the shards' compact records (compact.go).
	cst   cstore
	nodes map[string]*node
	// retired holds expired or replaced incarnations while replicas still
	// point at them (kept for the lease); Stats lists them as not alive and
	// forgets them once they hold nothing.
	retired []*node

	evictMu sync.Mutex // serialises eviction rounds; protects evictKeep
	// evictKeep is the last eviction round's target: the next round's
	// first walk keeps twice as many victims (countAndPickVictims).
	evictKeep int
	evictGen  atomic.Uint64 // incremented after every eviction round
	// fruitless is 1 + the room broadcast's generation at the start of
	// the last eviction round that neither dropped nor queued anything (0:
	// none). Until the broadcast rings again nothing became evictable, so
	// evictAfter and the watermark loop skip their rounds (each a scan of
	// every object) instead of repeating it for every waiting put.
	fruitless atomic.Uint64

	// heldPending is set when an object was kept in a shard's held set
	// and cleared by a settleHeld that left none there.
	heldPending atomic.Bool
	// sweepDirty is set when replicas became unreadable (unmount, expiry,
	// lost SSD replica) and cleared by a sweep that left nothing behind.
	sweepDirty atomic.Bool
	// processing counts objects whose DRAM replica is not complete yet.
	processing atomic.Int64
	// lastReclaim is the time (unix ns) of the last sweep or reclaim of
	// abandoned puts.
	lastReclaim atomic.Int64
	// scanVisits counts the objects the scans over shards visited (sweep,
	// reclaim of abandoned puts, promotion victims): what they cost; tests
	// read it.
	scanVisits atomic.Int64
	// reRegisterTurn counts SSD re-registration chunks: each starts its
	// walk over the shards at another shard (reRegisterColumns).
	reRegisterTurn atomic.Uint64

	// room wakes PutStarts waiting for DRAM room (room.go).
	room broadcast
	// prefetch is the prefetch budget (prefetch.go).
	prefetch tokenBucket
	// hooks are test seams; nil in production.
	hooks struct {
		putWaiting func() // a PutStart is about to wait for room
		// victimsPicked runs in an eviction round between the scan that
		// picked the victims and their drop (no shard lock held).
		victimsPicked func()
		// admitted runs between an admission to SSD and the queuing of
		// its task (admitToSSD; the object's shard lock held).
		admitted func()
		// scanYielded runs while a walk over every object of a shard has
		// released its lock (shard.scanAll).
		scanYielded func()
	}

	// tokens issues put tokens (invariant 8).
	tokens tokenSource
	parkMu sync.Mutex // protects parked
	// parked holds, by token, the ranges of puts in progress that a forced
	// Remove deleted (one per DRAM replica of the put), until their writer
	// is done (see parkedPut).
	parked map[uint64][]parkedPut

	cnt     counters
	met     *metrics
	rebuild rebuildState // the rebuild window (rebuild.go)

	// rlog is the removal log (removals.go); cursors the SSD cursor each
	// node id reported with its last pull.
	rlog *removalLog
	// keyWaits holds the keys whose forced removal waits for their
	// holders: PutStart of such a key waits (removewait.go).
	keyWaits keyWaits
	cursorMu sync.Mutex // protects cursors; a leaf
	cursors  map[string]masterapi.RemovalCursor
	lastTrim atomic.Int64 // unix ns of the last trim of the removal log

	evictCh chan struct{}
	stop    chan struct{}
	done    chan struct{}
	closed  atomic.Bool
	once    sync.Once
}

// counters are the live totals reported by Stats and the metrics.
type counters struct {
	objects, dramReplicas, ssdReplicas atomic.Int64
	// compact counts the objects held as compact records, thawed the
	// records turned into *objects (compact.go).
	compact, thawed atomic.Int64
	// frozen counts the *objects turned into compact records (freeze).
	frozen                           atomic.Int64
	dramBytes, ssdBytes              atomic.Int64
	evictions                        atomic.Int64
	offloadQueued, offloadPersisted  atomic.Int64
	offloadFailed, expiredNodes      atomic.Int64
	offloadRetried, offloadAbandoned atomic.Int64
	badReplicas                      atomic.Int64
	putWaits, putWaitsFailed         atomic.Int64
	offloadWakes                     atomic.Int64 // WaitOffload calls answered pressed (wake.go)
	// removalWaits counts forced removals of leased objects that waited
	// until every holder applied them; removalWaitsTimedOut those that
	// answered at the lease's end instead (removewait.go).
	removalWaits, removalWaitsTimedOut atomic.Int64
	// prefetch (prefetch.go)
	prefetchQueued, prefetchOverBudget atomic.Int64
	// touched counts the keys of Touch calls counted as reads (touch.go).
	touched               atomic.Int64
	prefetchEvictions     atomic.Int64
	offloadDroppedVictims atomic.Int64
	// promotion (promote.go) and the admission sketch sent to nodes
	promotionsQueued, promotionsStarted atomic.Int64
	promotions, promotionsAbandoned     atomic.Int64
	promotionsNoRoom                    atomic.Int64
	// promotionEvictions: DRAM replicas of objects readable from SSD
	// dropped for a promotion's room; promotionsSpared: DRAM-only victims
	// a promotion left alone (neither admitted to SSD nor droppable).
	promotionEvictions, promotionsSpared atomic.Int64
	// sketch transfers (sketchForNode): chunks and bytes sent, and
	// transfers whose last chunk was sent.
	sketchChunksSent, sketchBytesSent, sketchesSent atomic.Int64
}

var _ masterapi.API = (*Service)(nil)

// New returns a Service for cfg. Zero-valued Clock and Logger take
// SystemClock and slog.Default(). With cfg.MonitorInterval > 0 a background
// loop runs Tick at that period and evicts when a segment passes the high
// watermark.
func New(cfg Config) (*Service, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	s := &Service{cfg: cfg, clock: cfg.Clock, log: cfg.Logger, policy: cfg.Admission}
	var err error
	if s.clock == nil {
		s.clock = SystemClock{}
	}
	if s.log == nil {
		s.log = slog.Default()
	}
	if s.policy == nil {
		if s.policy, err = admission.FromSettings(cfg.admissionSettings()); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrBadConfig, err)
		}
	}
	s.countLookups = s.policy.WantsLookups()
	s.graceEnd = s.now() + int64(cfg.StartupGrace)
	s.leaseBase = s.now()
	s.prefetch.init(cfg.PrefetchBudget*1e6, s.now())
	n := 1 << bits.Len(uint(cfg.Shards-1))
	s.shards = make([]shard, n) // maps made on first use (shard.putObj)
	s.sets = shardSets{dram: newShardSet(n), held: newShardSet(n)}
	for i := range s.shards {
		s.shards[i].i, s.shards[i].sets = int32(i), &s.sets
		s.shards[i].c.st = &s.cst
	}
	s.mask = uint64(n - 1)
	s.digests = map[string]*ssdDigest{}
	s.nodes = map[string]*node{}
	s.parked = map[uint64][]parkedPut{}
	s.cursors = map[string]masterapi.RemovalCursor{}
	store := cfg.Removals
	if store == nil {
		store = NewMemoryRemovalStore()
		s.cfg.Removals = store // Config() then names it: a test's "restart" shares it
	}
	lctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	s.rlog, err = openRemovalLog(lctx, store, &s.tokens, s.now())
	cancel()
	if err != nil {
		return nil, err
	}
	s.met = newMetrics(s)
	s.startAdmission()
	s.startRebuild(s.rlog.inherited)
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
	s.reclaimParked(now)
	// Replicas that became unreadable need the full sweep, at once.
	// Abandoned puts need only the objects with a DRAM replica (a put in
	// progress has one), at most every quarter of
	// put_start_discard_timeout: under steady puts there is always one in
	// progress, and a scan of every object would cost seconds of CPU at
	// tens of millions of objects, most of them on SSD only.
	reclaimDue := s.processing.Load() > 0 && now-s.lastReclaim.Load() >= s.cfg.PutStartDiscardTimeout.Nanoseconds()/4
	switch {
	case s.sweepDirty.Load():
		s.lastReclaim.Store(now)
		s.sweep(now)
	case reclaimDue:
		s.lastReclaim.Store(now)
		s.reclaimAbandoned(now)
	}
	// Objects kept for their lease without a replica, or with replicas
	// on a dead node: only they are visited, not every object (a full
	// sweep per tick for a lease's length would cost seconds of CPU each
	// at 50M objects).
	if s.heldPending.Load() {
		s.settleHeld(now)
	}
	s.room.signal() // leases and pins may have ended: waiting puts retry
	s.rebuildTick()
	s.trimRemovals(now)
}

func (s *Service) now() int64 { return s.clock.Now().UnixNano() }

func (s *Service) shardOf(key string) *shard {
	return &s.shards[s.shardIndex(key)]
}

// lockKey checks key and returns its shard locked; the caller unlocks it.
func (s *Service) lockKey(key string) (*shard, error) {
	if err := validKey(key); err != nil {
		return nil, err
	}
	sh := s.shardOf(key)
	sh.mu.Lock()
	return sh, nil
}

// shardIndex is the index in s.shards of key's shard: the low bits of the
// key's stable hash, the same bits as its reconcile slot (reconcile.go).
func (s *Service) shardIndex(key string) int {
	return int(masterapi.KeyHash(key) & s.mask)
}

// gate returns ErrClosed after Close, the context's error, and
// ErrNotLeader once an elected leader's fence is down (ha.go).
func (s *Service) gate(ctx context.Context) error {
	if s.closed.Load() {
		return ErrClosed
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("master: %w", err)
	}
	return s.fence()
}

func validKey(key string) error {
	if len(key) == 0 {
		return errcode.Errorf(errcode.InvalidKey, "master: empty key")
	}
	if len(key) > keyspec.MaxLen {
		return errcode.Errorf(errcode.InvalidKey, "master: key of %d bytes exceeds %d", len(key), keyspec.MaxLen)
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
