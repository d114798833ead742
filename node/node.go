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
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"

	"github.com/tierstore/tierstore/internal/errcode"
	"github.com/tierstore/tierstore/internal/peerlimit"
	"github.com/tierstore/tierstore/internal/rpcpb"
	"github.com/tierstore/tierstore/internal/tlsconf"
	"github.com/tierstore/tierstore/masterapi"
	"github.com/tierstore/tierstore/tier"
)

// SSDTier is what a node needs of the SSD tier engine (*tier.Engine
// implements it). Tests of the node may substitute their own. Two
// capabilities are optional, used when the tier has them: WorthTier (worth
// eviction and the SSD report of admission) and StreamTier (streamed SSD
// reads); each type's doc says what a tier without it loses.
type SSDTier interface {
	Offload(ctx context.Context, tasks []tier.Task, notify tier.NotifyFunc) []tier.Outcome
	Load(ctx context.Context, keys [][]byte) []tier.LoadResult
	Exists(key []byte) (bool, error)
	Remove(key []byte) error
	// RemoveKeys deletes keys in one durable step and returns how many
	// it held (the removal log, removals.go).
	RemoveKeys(keys [][]byte) (int, error)
	Keys(fn func(key []byte, info tier.KeyInfo) bool) error
	// Mark and SetMark keep an opaque mark durably with the tier's
	// contents: the node's removal log cursor (nil: never set).
	Mark() ([]byte, error)
	SetMark(mark []byte) error
	Stats() tier.Stats
	Close() error
}

// The engine has every capability: a change of its methods that dropped
// one would otherwise turn it off silently.
var (
	_ SSDTier    = (*tier.Engine)(nil)
	_ WorthTier  = (*tier.Engine)(nil)
	_ StreamTier = (*tier.Engine)(nil)
)

// Stats is a snapshot of a node's state and counters.
type Stats struct {
	Name, Endpoint, Segment string
	SegmentSize             int64
	OffloadEnabled          bool
	Backend                 string
	Tier                    tier.Stats
	OffloadRounds           int64 // heartbeats that returned tasks
	OffloadWakes            int64 // heartbeats run because the master woke the node (WaitOffload)
	OffloadPersisted        int64 // tasks answered persisted (incl. already present)
	OffloadFailed           int64 // tasks answered failed
	PeerWrites              int64
	PeerReadsDRAM           int64
	PeerReadsSSD            int64
	// GrantsMissing, GrantsForged and GrantsExpired count the data-plane
	// reads refused for their read grant (grants.go): none, one made for
	// another read or with another secret, one past its expiry.
	GrantsMissing, GrantsForged, GrantsExpired int64
	// WriteGrantsMissing, WriteGrantsForged and WriteGrantsExpired count
	// the data-plane writes refused for their write grant (grants.go), in
	// the same three ways.
	WriteGrantsMissing, WriteGrantsForged, WriteGrantsExpired int64
	Remounts                                                  int64
	Reconciles                                                int64
	ReconcileRemoved                                          int64 // SSD objects deleted because a reconcile called them unwanted
	ReconcileKeysSent                                         int64 // SSD keys sent to the master by reconciles (only those of differing ranges)
	NotifyRetries                                             int64 // notifies sent again after a transport error
	RemovalLogRemoved                                         int64 // SSD objects deleted by the master's removal log
	// DRAMRecords are the DRAM objects recorded for re-registration;
	// RemovalDRAM and RemovalSSD the node's removal log cursors.
	DRAMRecords             int64
	RemovalDRAM, RemovalSSD masterapi.RemovalCursor
	// SSDReports counts the SSD reports sent to the master's admission
	// policy, SketchesReceived the admission sketches taken from it (whole:
	// transfers completed), SketchChunksReceived their chunks and
	// SketchRestarts the transfers started again because the master's
	// sketch halved or was resized meanwhile.
	SSDReports, SketchesReceived         int64
	SketchChunksReceived, SketchRestarts int64
	// Promotions counts objects copied from SSD into DRAM and published;
	// PromotionsFailed those not loaded (not on SSD any more, other
	// bytes, range refused); PromotionsRefused those loaded but refused by
	// the master (removed, put again or abandoned meanwhile).
	Promotions, PromotionsFailed, PromotionsRefused int64
	// PromotionReadsJoined counts SSD reads served from a promotion's load
	// under way instead of a second read of the SSD (promote.go).
	PromotionReadsJoined int64
	// OffloadFailedBy counts offload failures by cause (the reason label of
	// tierstore_node_offload_failures_total): bad_task, source_bytes,
	// too_large, no_space, master_refused, notify_refused, stale_copy,
	// tier.
	OffloadFailedBy map[string]int64
}

type nodeMetrics struct {
	offloadRounds, offloadPersisted, offloadFailed  atomic.Int64
	offloadWakes                                    atomic.Int64 // heartbeats run because the master woke the node
	peerWrites, peerReadsDRAM, peerReadsSSD         atomic.Int64
	grantsMissing, grantsForged, grantsExpired      atomic.Int64
	wgrantsMissing, wgrantsForged, wgrantsExpired   atomic.Int64 // write grants
	remounts, reconciles, reconcileRemoved          atomic.Int64
	reconcileKeysSent                               atomic.Int64
	notifyRetries                                   atomic.Int64
	removalsApplied                                 atomic.Int64
	ssdReports, sketchesReceived                    atomic.Int64
	sketchChunksReceived, sketchRestarts            atomic.Int64
	promotions, promotionsFailed, promotionsRefused atomic.Int64
	promotionReadsJoined                            atomic.Int64
	failedBy                                        [numCauses]atomic.Int64 // offload failures by cause
}

// Node is a store node: a DRAM segment mounted at the master, a peer data
// service, and optionally an SSD tier fed by the offload heartbeat.
type Node struct {
	cfg  Config
	log  *slog.Logger
	m    masterapi.NodeAPI
	name string
	// contact is when (unix ns) the last Ping the master answered OK was
	// sent, clientTTL the master's client_ttl it answered: reads of cached
	// replica locations stop before the master may expire the node
	// (readcheck.go, outOfTouch).
	contact, clientTTL atomic.Int64
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
	dp  dataPlane // the bulk data protocol on lis, and Put/Get latencies
	// guard bounds what one peer may make the node spend on lis (nil
	// without a listener); set by serve before lis is served.
	guard *peerlimit.Guard

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
	// offloadBuf is the offload round's copy buffer, kept from one round to
	// the next (up to offloadBufKeep bytes) so that the copies out of the
	// segment land in memory already faulted in. Guarded by roundMu.
	offloadBuf []byte
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

	rem nodeRemovals // the removal log's cursors (removals.go)

	adm nodeAdmission // sketch, SSD reports (admission.go)

	promoting promoLoads // promotion loads under way, for SSD reads to join (promote.go)
}

// Option adjusts Start (tests).
type Option func(*options)

type options struct {
	tier SSDTier
	name string
}

// WithTier makes the node use t as its SSD tier instead of opening one in
// Config.SSDDir. The node closes t. The node uses WorthTier and StreamTier
// when t has them.
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
	if err = n.loadRemovalCursor(); err != nil {
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
	n.every(cfg.PingInterval, n.removalTick)
	n.followLeader()
	n.wakeLoop()
	if n.tier != nil {
		n.every(cfg.HeartbeatInterval, func() { n.heartbeat() })
		n.every(cfg.ReconcileInterval, n.reconcileTick)
	}
	n.log.Info("node started", "endpoint", n.endpoint, "segment", n.segName,
		"memory", cfg.Memory, "offload", n.tier != nil, "backend", n.backend)
	return n, nil
}

// nameSource says where a node's name came from, for messages.
func nameSource(given, ownDir bool) string {
	switch {
	case given:
		return "the name it was given"
	case ownDir:
		return "the id in --ssd_dir's " + nodeIDFile
	}
	return "a fresh name"
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
	var bound []string // the node names the TLS certificate allows (none: any)
	if cfg.TLS != nil {
		bound = tlsconf.NodesOf(cfg.TLS.Leaf())
	}
	if n.name == "" {
		host, _ := os.Hostname()
		n.name = fmt.Sprintf("%s-%d-%s", host, os.Getpid(), randomID())
		if len(bound) == 1 {
			n.name = bound[0] // the certificate names the node
		}
		if ownDir {
			// The id belongs to the SSD contents: the same --ssd_dir
			// comes back under the same id.
			if n.name, err = stableNodeID(cfg.SSDDir, n.name); err != nil {
				return err
			}
		}
	}
	if len(bound) > 0 && !slices.Contains(bound, n.name) {
		return fmt.Errorf("%w: the node is %q (%s), but its --tls_cert is bound to node %s (SAN URI %s): the master would refuse its calls",
			ErrBadNodeID, n.name, nameSource(o.name != "", ownDir), strings.Join(bound, ", "), tlsconf.NodeURI(bound[0]))
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

// peerMaxMessage bounds a gRPC message a peer may send the node (NodeStats
// requests are empty; values travel on the data plane).
const peerMaxMessage = 64 << 10

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
	n.guard = peerlimit.New(n.cfg.Limits, n.log)
	n.lis = n.guard.Listener(n.lis)
	opts := append([]grpc.ServerOption{grpc.ChainUnaryInterceptor(rpcpb.VersionCheck("node", rpcpb.NodeProtocol)),
		grpc.MaxRecvMsgSize(peerMaxMessage)}, n.guard.GRPCOptions()...)
	if n.cfg.TLS != nil {
		u, s := Roles.Interceptors(n.log)
		opts = append(opts, grpc.Creds(tlsconf.Handshaken()), grpc.ChainUnaryInterceptor(u), grpc.ChainStreamInterceptor(s))
	}
	srv := grpc.NewServer(opts...)
	n.srv = srv
	rpcpb.RegisterNodePeerServer(srv, &peerServer{n: n})
	glis := n.startDataPlane(n.lis) // data connections split off; the rest is gRPC
	// srv, not n.srv: a Close that runs before this goroutine does sets
	// n.srv to nil (seen as a nil-pointer panic in the node tests).
	go func() { _ = srv.Serve(glis) }()
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
		OffloadRounds:        n.metrics.offloadRounds.Load(),
		OffloadWakes:         n.metrics.offloadWakes.Load(),
		OffloadPersisted:     n.metrics.offloadPersisted.Load(),
		OffloadFailed:        n.metrics.offloadFailed.Load(),
		PeerWrites:           n.metrics.peerWrites.Load(),
		PeerReadsDRAM:        n.metrics.peerReadsDRAM.Load(),
		PeerReadsSSD:         n.metrics.peerReadsSSD.Load(),
		GrantsMissing:        n.metrics.grantsMissing.Load(),
		GrantsForged:         n.metrics.grantsForged.Load(),
		GrantsExpired:        n.metrics.grantsExpired.Load(),
		WriteGrantsMissing:   n.metrics.wgrantsMissing.Load(),
		WriteGrantsForged:    n.metrics.wgrantsForged.Load(),
		WriteGrantsExpired:   n.metrics.wgrantsExpired.Load(),
		Remounts:             n.metrics.remounts.Load(),
		Reconciles:           n.metrics.reconciles.Load(),
		ReconcileRemoved:     n.metrics.reconcileRemoved.Load(),
		ReconcileKeysSent:    n.metrics.reconcileKeysSent.Load(),
		NotifyRetries:        n.metrics.notifyRetries.Load(),
		RemovalLogRemoved:    n.metrics.removalsApplied.Load(),
		SSDReports:           n.metrics.ssdReports.Load(),
		SketchesReceived:     n.metrics.sketchesReceived.Load(),
		SketchChunksReceived: n.metrics.sketchChunksReceived.Load(),
		SketchRestarts:       n.metrics.sketchRestarts.Load(),
		Promotions:           n.metrics.promotions.Load(),
		PromotionsFailed:     n.metrics.promotionsFailed.Load(),
		PromotionsRefused:    n.metrics.promotionsRefused.Load(),
		PromotionReadsJoined: n.metrics.promotionReadsJoined.Load(),
		OffloadFailedBy:      make(map[string]int64, numCauses),
	}
	for c := range numCauses {
		st.OffloadFailedBy[c.String()] = n.metrics.failedBy[c].Load()
	}
	st.DRAMRecords = n.ha.recordCount()
	st.RemovalDRAM, st.RemovalSSD = n.RemovalCursors()
	if n.tier != nil {
		st.Tier = n.tier.Stats()
	}
	return st
}

func (n *Node) checkSegment(name string) error {
	if name != n.segName {
		return errcode.Errorf(errcode.SegmentNotFound, "node: node %s has no segment %q", n.name, name)
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
		return nil, errcode.Errorf(errcode.UnableOffload, "node: node %s has no SSD tier", n.name)
	}
	r := n.tier.Load(ctx, [][]byte{key})
	if len(r) != 1 {
		return nil, errcode.Errorf(errcode.InternalError, "node: tier answered %d results for 1 key", len(r))
	}
	if r[0].Err != nil {
		if errors.Is(r[0].Err, tier.ErrChecksum) {
			// The tier dropped the corrupt entry; the master must stop
			// listing this replica (invariant 5: a mismatch is a miss and
			// drops the replica).
			n.dropSSDReplica(ctx, key)
		}
		return nil, toCode(r[0].Err)
	}
	return r[0].Value, nil
}

// dropSSDReplica tells the master that this node no longer holds key on
// SSD, as an offload failure for key: the master drops this node's
// SSD replica whatever the lease (the bytes are gone; an
// EvictSSDReplica would be refused inside a lease). A failure is left to
// the next reconcile.
func (n *Node) dropSSDReplica(ctx context.Context, key []byte) {
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
	// A record whose range a newer put has claimed is not re-registered:
	// that put's bytes are landing there (docs/design.md, invariant 10).
	n.forgetOverlapped()
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

// onEvict is the tier's EvictFunc of this node (EvictFunc).
func (n *Node) onEvict(ctx context.Context, keys [][]byte) ([][]byte, error) {
	return EvictFunc(n.m, n.name)(ctx, keys)
}

// EvictFunc is a node's tier.EvictFunc: it tells the master, once per
// victim bucket, that the bucket's keys are about to leave node's SSD
// (invariant 7), and answers the tier with the keys the master wants kept
// readable (masterapi.EvictResult.Keep: leased objects whose only readable
// replica is in this bucket; invariant 4). The tier re-inserts those into
// another bucket before the victim file goes, so a lease never stops the
// SSD from admitting (issue 9 item 3). An error (master unreachable) keeps
// the whole bucket for now.
func EvictFunc(m masterapi.NodeAPI, node string) tier.EvictFunc {
	return func(ctx context.Context, keys [][]byte) ([][]byte, error) {
		ks := make([]string, len(keys))
		for i, k := range keys {
			ks[i] = string(k)
		}
		res, err := m.EvictSSDReplica(ctx, node, ks)
		if err != nil || len(res.Keep) == 0 {
			return nil, err
		}
		keep := make([][]byte, len(res.Keep))
		for i, k := range res.Keep {
			keep[i] = []byte(k)
		}
		return keep, nil
	}
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
	sent := time.Now()
	rep, err := n.m.Ping(ctx, n.name)
	cancel()
	if err == nil && rep.Status == masterapi.NodeOK && !n.staleTerm(rep.Term) {
		n.contact.Store(sent.UnixNano())
		n.clientTTL.Store(int64(rep.ClientTTL))
	}
	if err != nil && !errors.Is(err, errcode.ErrNeedRemount) && !errors.Is(err, errcode.ErrClientNotFound) {
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
// master hands out full batches. It returns how many tasks (offload and
// promotion) the master handed out.
func (n *Node) heartbeat() int {
	n.roundMu.Lock()
	defer n.roundMu.Unlock()
	if n.reregister.Swap(false) {
		n.reRegister(n.ctx)
	}
	total := 0
	for n.ctx.Err() == nil {
		before := n.adm.sketchMark()
		got, promos := n.offloadRound()
		total += got + promos
		if got < n.cfg.OffloadBatch && !n.adm.sketchMoved(before) {
			break
		}
	}
	return total
}

// Waking (master/wake.go): wakeWait is the timeout of one WaitOffload,
// wakeRetry the pause after a failed one (a master without WaitOffload, a
// master that does not know the node yet: the ping loop remounts), wakeIdle
// the pause after a wake that handed out no task (tasks held back by an
// orphan of a removal), so that the loop never spins.
const (
	wakeWait  = 10 * time.Second
	wakeRetry = time.Second
	wakeIdle  = 20 * time.Millisecond
)

// wakeLoop keeps a WaitOffload open at the master when it implements
// masterapi.OffloadWaiter, and runs a heartbeat as soon as the master says
// that this node's offload is pressing (a put waits for DRAM room, queued
// offload bytes pass a quarter of the DRAM, promotions are queued): a full
// DRAM drains at the disk's pace, not one batch per tick. The ticks go on
// as before; both run heartbeat, which serialises on roundMu. The master
// also answers pressed while a forced removal of a leased object waits for
// this node (master/removewait.go): the node then pulls the removal log
// for its DRAM records first. A node without an SSD tier keeps the wait
// open for that alone.
func (n *Node) wakeLoop() {
	w, ok := n.m.(masterapi.OffloadWaiter)
	if !ok || !n.cfg.OffloadWake {
		return
	}
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		for n.ctx.Err() == nil {
			ctx, cancel := context.WithTimeout(n.ctx, wakeWait+wakeRetry)
			pressed, err := w.WaitOffload(ctx, n.name, wakeWait)
			cancel()
			switch {
			case err != nil:
				n.log.Debug("wait_offload failed; offloading on the heartbeat tick meanwhile", "err", err)
				n.pause(wakeRetry)
			case pressed:
				n.metrics.offloadWakes.Add(1)
				// A forced removal of a leased object may be waiting for
				// this node to apply it (master/removewait.go): the DRAM
				// records first, without waiting for an offload round.
				if err := n.syncRemovals(n.ctx, false); err != nil {
					n.log.Debug("removal log pull failed; will retry", "err", err)
				}
				if n.tier == nil || n.heartbeat() == 0 {
					n.pause(wakeIdle)
				}
			}
		}
	}()
}

// pause waits d or until Close.
func (n *Node) pause(d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-n.ctx.Done():
	case <-t.C:
	}
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
	before := n.adm.sketchMark()
	got, _ := n.offloadRound()
	for n.adm.sketchMoved(before) && n.ctx.Err() == nil { // the rest of a sketch transfer
		before = n.adm.sketchMark()
		more, _ := n.offloadRound()
		got += more
	}
	return got
}
