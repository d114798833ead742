package node

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"

	"github.com/tierstore/tierstore/internal/codes"
	"github.com/tierstore/tierstore/internal/rpcpb"
	"github.com/tierstore/tierstore/internal/wire"
	"github.com/tierstore/tierstore/masterapi"
	"github.com/tierstore/tierstore/tier"
)

// SSDTier is what a node needs of the SSD tier engine (*tier.Engine
// implements it). Tests of the node may substitute their own.
type SSDTier interface {
	Offload(ctx context.Context, tasks []tier.Task, notify tier.NotifyFunc) []tier.Outcome
	Load(ctx context.Context, keys [][]byte) []tier.LoadResult
	Exists(key []byte) (bool, error)
	Remove(key []byte) error
	Keys(fn func(key []byte, info tier.KeyInfo) bool) error
	Stats() tier.Stats
	Close() error
}

// Stats is a snapshot of a node's state and counters.
type Stats struct {
	Name, Endpoint, Segment string
	SegmentSize             int64
	OffloadEnabled          bool
	Backend                 string
	Tier                    tier.Stats
	OffloadRounds           int64 // heartbeats that returned tasks
	OffloadPersisted        int64 // tasks answered persisted (incl. already present)
	OffloadFailed           int64 // tasks answered failed
	PeerWrites              int64
	PeerReadsDRAM           int64
	PeerReadsSSD            int64
	Remounts                int64
	Reconciles              int64
	ReconcileRemoved        int64 // SSD objects deleted because a reconcile called them unwanted
	NotifyRetries           int64 // notifies sent again after a transport error
	// OffloadFailedBy counts offload failures by cause (the reason label of
	// tierstore_node_offload_failures_total): bad_task, source_bytes,
	// too_large, no_space, master_refused, notify_refused, stale_copy,
	// tier.
	OffloadFailedBy map[string]int64
}

type nodeMetrics struct {
	offloadRounds, offloadPersisted, offloadFailed atomic.Int64
	peerWrites, peerReadsDRAM, peerReadsSSD        atomic.Int64
	remounts, reconciles, reconcileRemoved         atomic.Int64
	notifyRetries                                  atomic.Int64
	failedBy                                       [numCauses]atomic.Int64 // offload failures by cause
}

// Node is a store node: a DRAM segment mounted at the master, a peer data
// service, and optionally an SSD tier fed by the offload heartbeat.
type Node struct {
	cfg  Config
	log  *slog.Logger
	m    masterapi.NodeAPI
	name string
	// incarnation is random per process, sent in every MountRequest: the
	// master retires a previous process's replicas under the same name.
	incarnation string
	segName     string
	endpoint    string
	seg         *Segment
	tier        SSDTier // nil without offload
	backend     string

	lis net.Listener
	srv *grpc.Server

	metrics nodeMetrics

	// ownMu protects owners: held exclusively to claim a range for a put,
	// shared for each copy into the segment (check, then copy), so a copy
	// of an older put never follows a newer put's claim of its range.
	ownMu  sync.RWMutex
	owners *claims // put ownership of segment ranges (invariant 8)

	// roundMu serialises the SSD-side conversations with the master that
	// must not interleave: offload rounds, re-registration and reconcile
	// (a reconcile key list taken before an offload commit must not reach
	// the master after that commit's notify).
	roundMu sync.Mutex
	// reregister is set by the ping loop before it remounts; the heartbeat
	// loop (or the next reconcile) re-registers the SSD objects under
	// roundMu.
	reregister atomic.Bool
	// mountGen is incremented before every remount's MountSegment is sent.
	// An offload round or reconcile that sees it change learns that the
	// master it talked to may be a new one that has not heard the SSD
	// objects yet: it then keeps keys the master called unknown (the
	// re-registration that follows announces them) instead of deleting
	// them.
	mountGen atomic.Uint64

	ctx    context.Context // cancelled by Close: stops the loops
	cancel context.CancelFunc
	wg     sync.WaitGroup // the loops

	closeOnce sync.Once
	closeErr  error

	unlockDir func() error // releases the --ssd_dir lock (nil without one)

	ha nodeHA // DRAM object records, leadership term (ha.go)
}

// Option adjusts Start (tests).
type Option func(*options)

type options struct {
	tier SSDTier
	name string
}

// WithTier makes the node use t as its SSD tier instead of opening one in
// Config.SSDDir. The node closes t.
func WithTier(t SSDTier) Option { return func(o *options) { o.tier = t } }

// WithName sets the node id. Default: with an SSD directory of its own, the
// id kept in SSDDir/NODE_ID (created at the first start), so a node
// restarted on the same directory is recognised by the master, which
// retires the previous process's DRAM replicas at once (every start sends a
// new random incarnation) while the SSD objects are re-registered; without
// one, host-pid-random, new at every start.
func WithName(name string) Option { return func(o *options) { o.name = name } }

func randomID() string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// Start creates the DRAM segment, opens the SSD tier when offload is
// enabled (taking the --ssd_dir lock first: a second node on the directory
// stops with ErrSSDDirInUse), starts the peer service on cfg.Listen (no
// socket when Listen is ""; embedded clients then reach the node
// in-process), mounts the segment at m, re-registers the objects already
// on SSD and starts the ping, offload and reconcile loops. A master that
// is not reachable yet is waited for, with backoff, until ctx ends (start
// order does not matter). Close drains and stops the node.
func Start(ctx context.Context, cfg Config, m masterapi.NodeAPI, opts ...Option) (_ *Node, err error) {
	var o options
	for _, f := range opts {
		f(&o)
	}
	if o.tier != nil {
		cfg.EnableOffload = true
	}
	// With an injected tier the SSD directory is not the node's business.
	if err := cfg.validate(o.tier == nil); err != nil {
		return nil, err
	}
	if m == nil {
		return nil, fmt.Errorf("%w: no master", ErrBadConfig)
	}
	n := &Node{cfg: cfg, m: m, log: cfg.Logger}
	if n.log == nil {
		n.log = slog.Default()
	}
	// The node's context exists before anything that may use it (a peer
	// read that drops a corrupt SSD replica notifies the master).
	n.ctx, n.cancel = context.WithCancel(context.Background())
	defer func() {
		if err != nil {
			n.cancel()
			n.release()
		}
	}()
	if err = n.openStorage(o); err != nil {
		return nil, err
	}
	if err = n.serve(); err != nil {
		return nil, err
	}
	if err = n.mountAtStart(ctx); err != nil {
		return nil, err
	}
	n.afterMount(ctx)
	n.roundMu.Lock()
	n.reRegister(ctx)
	n.roundMu.Unlock()

	n.every(cfg.PingInterval, n.pingLocked)
	n.followLeader()
	if n.tier != nil {
		n.every(cfg.HeartbeatInterval, n.heartbeat)
		n.every(cfg.ReconcileInterval, n.reconcileTick)
	}
	n.log.Info("node started", "endpoint", n.endpoint, "segment", n.segName,
		"memory", cfg.Memory, "offload", n.tier != nil, "backend", n.backend)
	return n, nil
}

// openStorage locks the SSD directory, names the node, and creates the
// segment and the SSD tier.
func (n *Node) openStorage(o options) (err error) {
	cfg := n.cfg
	ownDir := cfg.EnableOffload && o.tier == nil && cfg.SSDDir != ""
	if ownDir {
		if n.unlockDir, err = lockSSDDir(cfg.SSDDir); err != nil {
			return err
		}
	}
	n.name = o.name
	if n.name == "" {
		host, _ := os.Hostname()
		n.name = fmt.Sprintf("%s-%d-%s", host, os.Getpid(), randomID())
		if ownDir {
			// The id belongs to the SSD contents: the same --ssd_dir
			// comes back under the same id.
			if n.name, err = stableNodeID(cfg.SSDDir, n.name); err != nil {
				return err
			}
		}
	}
	n.incarnation = randomID() + randomID()
	n.segName = "seg-" + randomID()
	n.log = n.log.With("node", n.name)
	if n.seg, err = NewSegment(cfg.Memory); err != nil {
		return err
	}
	n.owners = newClaims(claimsLimit(cfg.Memory))
	switch {
	case o.tier != nil:
		n.tier, n.backend = o.tier, "injected"
	case cfg.EnableOffload:
		n.tier, n.backend, err = openTier(cfg, n.onEvict, n.log)
	}
	return err
}

// serve starts the peer service on cfg.Listen ("" : none, the node is
// reached in-process).
func (n *Node) serve() (err error) {
	if n.cfg.Listen == "" {
		n.endpoint = "inproc:" + n.name
		return nil
	}
	if n.lis, err = net.Listen("tcp", n.cfg.Listen); err != nil {
		return fmt.Errorf("%w: --listen %q: %v", ErrBadConfig, n.cfg.Listen, err)
	}
	n.endpoint = n.lis.Addr().String()
	n.srv = grpc.NewServer(wire.ServerOptions()...)
	rpcpb.RegisterNodePeerServer(n.srv, &peerServer{n: n})
	go func() { _ = n.srv.Serve(n.lis) }()
	return nil
}

// Start-up pacing: a master that does not answer the first mount is asked
// again after mountBackoff, doubled up to mountBackoffMax; the node says
// it is waiting at once and then every mountWaitLog.
const (
	mountBackoff    = 100 * time.Millisecond
	mountBackoffMax = 2 * time.Second
	mountWaitLog    = 10 * time.Second
)

// mountAtStart mounts the segment, waiting for a master that is not
// reachable yet (transport failures, a master shutting down) until ctx
// ends; an explicit refusal stops at once.
func (n *Node) mountAtStart(ctx context.Context) error {
	wait, start := mountBackoff, time.Now()
	var logged time.Time
	for {
		err := n.mount(ctx)
		if err == nil {
			if !logged.IsZero() {
				n.log.Info("master reached", "master_waited", time.Since(start).Round(time.Millisecond))
			}
			return nil
		}
		if !noAnswer(err) || ctx.Err() != nil {
			if ctx.Err() != nil {
				return fmt.Errorf("node: gave up waiting for the master after %v: %w", time.Since(start).Round(time.Millisecond), err)
			}
			return err
		}
		if time.Since(logged) >= mountWaitLog {
			n.log.Warn("waiting for the master", "waited", time.Since(start).Round(time.Millisecond), "err", err)
			logged = time.Now()
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
		case <-t.C:
		}
		t.Stop()
		wait = min(2*wait, mountBackoffMax)
	}
}

// Name is the node id registered at the masterapi.
func (n *Node) Name() string { return n.name }

// Endpoint is the peer service address ("inproc:<name>" without a socket).
func (n *Node) Endpoint() string { return n.endpoint }

// SegmentName is the name of the node's DRAM segment.
func (n *Node) SegmentName() string { return n.segName }

// Stats returns the node's counters and, with offload, the tier's.
func (n *Node) Stats() Stats {
	st := Stats{
		Name: n.name, Endpoint: n.endpoint, Segment: n.segName, SegmentSize: n.seg.Size(),
		OffloadEnabled: n.tier != nil, Backend: n.backend,
		OffloadRounds:    n.metrics.offloadRounds.Load(),
		OffloadPersisted: n.metrics.offloadPersisted.Load(),
		OffloadFailed:    n.metrics.offloadFailed.Load(),
		PeerWrites:       n.metrics.peerWrites.Load(),
		PeerReadsDRAM:    n.metrics.peerReadsDRAM.Load(),
		PeerReadsSSD:     n.metrics.peerReadsSSD.Load(),
		Remounts:         n.metrics.remounts.Load(),
		Reconciles:       n.metrics.reconciles.Load(),
		ReconcileRemoved: n.metrics.reconcileRemoved.Load(),
		NotifyRetries:    n.metrics.notifyRetries.Load(),
		OffloadFailedBy:  make(map[string]int64, numCauses),
	}
	for c := range numCauses {
		st.OffloadFailedBy[c.String()] = n.metrics.failedBy[c].Load()
	}
	if n.tier != nil {
		st.Tier = n.tier.Stats()
	}
	return st
}

func (n *Node) checkSegment(name string) error {
	if name != n.segName {
		return codes.Errorf(codes.SegmentNotFound, "node: node %s has no segment %q", n.name, name)
	}
	return nil
}

func (n *Node) readRange(segment string, off, length int64) ([]byte, error) {
	if err := n.checkSegment(segment); err != nil {
		return nil, err
	}
	if length < 0 || length > n.seg.Size() {
		return nil, toCode(fmt.Errorf("%w: length %d", ErrOutOfRange, length))
	}
	v, err := n.seg.Read(off, int(length))
	return v, toCode(err)
}

func (n *Node) readSSD(ctx context.Context, key []byte) ([]byte, error) {
	if n.tier == nil {
		return nil, codes.Errorf(codes.UnableOffload, "node: node %s has no SSD tier", n.name)
	}
	r := n.tier.Load(ctx, [][]byte{key})
	if len(r) != 1 {
		return nil, codes.Errorf(codes.InternalError, "node: tier answered %d results for 1 key", len(r))
	}
	if r[0].Err != nil {
		if errors.Is(r[0].Err, tier.ErrChecksum) {
			// The tier dropped the corrupt entry; the master must stop
			// listing this replica (invariant 5: a mismatch is a miss and
			// drops the replica).
			n.dropDiskReplica(ctx, key)
		}
		return nil, toCode(r[0].Err)
	}
	return r[0].Value, nil
}

// dropDiskReplica tells the master that this node no longer holds key on
// SSD, as an offload failure for key: the master drops this node's
// LocalDisk replica whatever the lease (the bytes are gone; an
// EvictDiskReplica would be refused inside a lease). A failure is left to
// the next reconcile.
func (n *Node) dropDiskReplica(ctx context.Context, key []byte) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	req := masterapi.NotifyRequest{Node: n.name, Failed: []masterapi.OffloadFailure{{Key: string(key), Reason: "SSD entry failed its checksum and was dropped"}}}
	if _, err := n.notify(ctx, req); err != nil {
		n.log.Warn("dropping a corrupt SSD replica at the master failed; reconcile will", "key", string(key), "err", err)
	}
}

// newMountGen starts a new mount generation, before a remount is sent: the
// master may be a new one, whose put tokens the claims of the previous one
// say nothing about (invariant 8), so they are forgotten.
func (n *Node) newMountGen() {
	n.mountGen.Add(1)
	n.ownMu.Lock()
	n.owners.reset()
	n.ownMu.Unlock()
}

// mount announces the segment to the master.
func (n *Node) mount(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	err := n.m.MountSegment(ctx, masterapi.MountRequest{Node: n.name, Endpoint: n.endpoint, Segment: n.segName, Size: n.seg.Size(),
		Incarnation: n.incarnation, HoldAllocation: true})
	if err != nil {
		return fmt.Errorf("node: mount segment %s at the master: %w", n.segName, err)
	}
	return nil
}

// diskObjects lists what the SSD tier holds.
func (n *Node) diskObjects() ([]masterapi.DiskObject, error) {
	var objs []masterapi.DiskObject
	err := n.tier.Keys(func(key []byte, info tier.KeyInfo) bool {
		objs = append(objs, masterapi.DiskObject{Key: string(key), Size: info.Size, CRC: info.CRC})
		return true
	})
	return objs, err
}

// reRegister tells the master every object the SSD tier holds. Objects the
// master refuses as conflicting (the key was re-put with other bytes) are
// stale and removed from SSD. Caller holds roundMu.
func (n *Node) reRegister(ctx context.Context) {
	if n.tier == nil {
		return
	}
	objs, err := n.diskObjects()
	if err != nil {
		n.log.Error("re-register: listing SSD keys", "err", err)
		n.reregister.Store(true)
		return
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	const batch = 4096
	gen := n.mountGen.Load()
	for len(objs) > 0 {
		part := objs[:min(batch, len(objs))]
		objs = objs[len(part):]
		errs, err := n.m.ReRegisterDiskObjects(ctx, n.name, part)
		if err != nil {
			n.log.Warn("re-register SSD objects failed; will retry", "err", err)
			n.reregister.Store(true)
			return
		}
		n.dropConflicts(part, errs, gen)
	}
	n.log.Info("re-registered SSD objects", "objects", n.tier.Stats().Objects)
}

// dropConflicts removes from SSD the objects the master refused: their
// size or CRC differ from the object's current metadata, or the master does
// not know the key (it was removed; only re-registration creates objects).
// A key refused as unknown is kept, and a re-registration flagged, when the
// node remounted since gen (the master may have restarted and not heard the
// SSD objects yet).
func (n *Node) dropConflicts(objs []masterapi.DiskObject, errs []error, gen uint64) {
	for i, e := range errs {
		if i >= len(objs) || e == nil {
			continue
		}
		if n.refusedKeepsCopy(e, gen) {
			continue
		}
		if errors.Is(e, codes.ErrChecksumConflict) || errors.Is(e, codes.ErrObjectNotFound) || errors.Is(e, codes.ErrReplicaNotFound) {
			if err := n.tier.Remove([]byte(objs[i].Key)); err != nil && !errors.Is(err, tier.ErrNotFound) {
				n.log.Warn("removing an SSD object the master refused", "key", objs[i].Key, "err", err)
			}
		}
	}
}

// refusedKeepsCopy reports whether an SSD copy the master refused with err
// must be kept: the master called the key unknown, but the node remounted
// since gen, so that master may be a restarted one; a re-registration is
// flagged to announce it.
func (n *Node) refusedKeepsCopy(err error, gen uint64) bool {
	if errors.Is(err, codes.ErrObjectNotFound) && n.mountGen.Load() != gen {
		n.reregister.Store(true)
		return true
	}
	return false
}

// onEvict is the tier's EvictFunc: it tells the master, once per victim
// bucket, that the bucket's keys are about to leave the SSD (invariant 7),
// and hands the master's answer back to the tier.
//
// The master's answer is moving from all-or-nothing (an error,
// OBJECT_HAS_LEASE: a key of the bucket is leased and this SSD holds its
// only readable copy) to key by key (masterapi.EvictResult.Keep: the keys
// to keep readable, which the tier re-inserts before the bucket goes;
// invariant 4 and "SSD keeps admitting under reads", issue 9 item 3).
// evictAnswerOf and keepForTier are the two seams:
//
//   - when EvictDiskReplica returns masterapi.EvictResult, evictAnswerOf
//     takes it and returns evictAnswer{keep: r.Keep};
//   - when the tier's EvictFunc returns the keys to keep, onEvict returns
//     (ans.keep as [][]byte, nil) instead of keepForTier's error.
//
// Until both land, a non-empty keep list keeps the whole bucket (the error
// makes the tier try another victim), which is safe: nothing leased is
// deleted.
func (n *Node) onEvict(ctx context.Context, keys [][]byte) error {
	ks := make([]string, len(keys))
	for i, k := range keys {
		ks[i] = string(k)
	}
	res, err := n.m.EvictDiskReplica(ctx, n.name, ks)
	if err != nil {
		// OBJECT_HAS_LEASE goes back to the tier unchanged: "not now",
		// the tier keeps the bucket.
		return err
	}
	return keepForTier(evictAnswerOf(res))
}

// evictAnswer is what the node uses of the master's EvictDiskReplica
// answer: the keys of the victim bucket the SSD must keep readable.
type evictAnswer struct {
	keep []string
}

// evictAnswerOf adapts the master's EvictDiskReplica answer.
func evictAnswerOf(r masterapi.EvictResult) evictAnswer { return evictAnswer{keep: r.Keep} }

// keepForTier answers the tier's EvictFunc for a master answer: the tier
// of today can only keep a whole bucket (an error), so a bucket with keys
// to keep is kept whole.
func keepForTier(a evictAnswer) error {
	if len(a.keep) > 0 {
		return codes.Errorf(codes.ObjectHasLease, "node: the master keeps %d key(s) of the victim bucket (leased, only readable copy)", len(a.keep))
	}
	return nil
}

// every runs fn every d on its own goroutine until Close (n.ctx). It is
// the one loop of the ping, offload heartbeat and reconcile loops; fn runs
// to completion before the next tick is taken (ticks that pass meanwhile
// are dropped).
func (n *Node) every(d time.Duration, fn func()) {
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		t := time.NewTicker(d)
		defer t.Stop()
		for {
			select {
			case <-n.ctx.Done():
				return
			case <-t.C:
			}
			fn()
		}
	}()
}

// pingOnce keeps the node alive at the master and, when the master asks
// for it (the node expired, or the master restarted), remounts and flags a
// re-registration for the heartbeat loop. It never waits for roundMu: a
// long offload round must not make the node miss its TTL.
func (n *Node) pingOnce() {
	ctx, cancel := context.WithTimeout(n.ctx, max(n.cfg.PingInterval, time.Second))
	rep, err := n.m.Ping(ctx, n.name)
	cancel()
	if err != nil && !errors.Is(err, codes.ErrNeedRemount) && !errors.Is(err, codes.ErrClientNotFound) {
		n.log.Debug("ping failed", "err", err)
		return
	}
	if err == nil && (n.staleTerm(rep.Term) || rep.Status != masterapi.NeedRemount) {
		return
	}
	n.log.Warn("master asks for a remount (node expired or master restarted)")
	if err := n.remount(n.ctx); err != nil {
		n.log.Warn("remount failed; will retry", "err", err)
	}
}

// remount mounts the segment again at a master that does not know this
// node (it restarted, or expired the node) and flags a re-registration of
// the SSD objects, which the heartbeat loop (or the next reconcile) runs
// under roundMu. The flag and the new mount generation are set before the
// mount is sent: a reconcile or notify that reaches the new master after
// the mount must find them already changed.
func (n *Node) remount(ctx context.Context) error {
	n.reregister.Store(true)
	n.newMountGen()
	if err := n.mount(ctx); err != nil {
		return err
	}
	n.metrics.remounts.Add(1)
	n.afterMount(ctx)
	return nil
}

// heartbeat runs a pending re-registration, then offload rounds while the
// master hands out full batches.
func (n *Node) heartbeat() {
	n.roundMu.Lock()
	defer n.roundMu.Unlock()
	if n.reregister.Swap(false) {
		n.reRegister(n.ctx)
	}
	for n.ctx.Err() == nil {
		if got := n.offloadRound(); got < n.cfg.OffloadBatch {
			break
		}
	}
}

func (n *Node) reconcileTick() {
	if err := n.Reconcile(n.ctx); err != nil {
		n.log.Warn("reconcile failed", "err", err)
	}
}

// Reconcile sends the master the full list of keys on SSD, so that it drops
// LocalDisk replicas of this node the SSD no longer holds, and deletes from
// the SSD the keys the master answers as unwanted (removed objects, dropped
// replicas). It runs periodically; tests and operators may call it
// directly.
//
// It holds roundMu, so no notify or re-registration of this node is in
// flight while the master compares the list (invariant: a list taken before
// a commit must not reach the master after that commit's notify). A pending
// re-registration runs first; if the node remounted while the reconcile was
// in flight the unwanted list is ignored (a restarted master knows no keys
// until the node re-registers).
func (n *Node) Reconcile(ctx context.Context) error {
	if n.tier == nil {
		return nil
	}
	n.roundMu.Lock()
	defer n.roundMu.Unlock()
	if n.reregister.Swap(false) {
		n.reRegister(ctx)
		if n.reregister.Load() {
			return fmt.Errorf("node: reconcile: %w: re-registration pending", codes.ErrNeedRemount)
		}
	}
	gen := n.mountGen.Load()
	var keys []string
	if err := n.tier.Keys(func(k []byte, _ tier.KeyInfo) bool {
		keys = append(keys, string(k))
		return true
	}); err != nil {
		return fmt.Errorf("node: reconcile: listing SSD keys: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	res, err := n.m.ReconcileDiskObjects(ctx, n.name, keys)
	if errors.Is(err, codes.ErrNeedRemount) {
		n.reregister.Store(true) // the ping loop remounts; re-register before the next try
	}
	if err != nil {
		return fmt.Errorf("node: reconcile: %w", err)
	}
	n.metrics.reconciles.Add(1)
	if res.Dropped > 0 {
		n.log.Info("reconcile dropped replicas the SSD no longer holds", "dropped", res.Dropped)
	}
	if len(res.Unwanted) == 0 {
		return nil
	}
	if n.mountGen.Load() != gen || n.reregister.Load() {
		n.log.Warn("reconcile answer ignored: the node remounted meanwhile", "unwanted", len(res.Unwanted))
		return nil
	}
	removed := 0
	for _, k := range res.Unwanted {
		if err := n.tier.Remove([]byte(k)); err != nil {
			if !errors.Is(err, tier.ErrNotFound) {
				n.log.Warn("reconcile: removing an unwanted SSD object", "key", k, "err", err)
			}
			continue
		}
		removed++
	}
	n.metrics.reconcileRemoved.Add(int64(removed))
	n.log.Info("reconcile removed SSD objects the master no longer wants", "removed", removed, "unwanted", len(res.Unwanted))
	return nil
}

// OffloadNow runs one offload round at once (fetch tasks, offload, answer
// them) and returns how many tasks it handled. The heartbeat loop does the
// same every HeartbeatInterval; the embedded demo and tests use this to
// avoid waiting for the next tick.
func (n *Node) OffloadNow() int {
	if n.tier == nil {
		return 0
	}
	n.roundMu.Lock()
	defer n.roundMu.Unlock()
	return n.offloadRound()
}
