package client

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"

	"github.com/tierstore/tierstore/internal/errcode"
	"github.com/tierstore/tierstore/internal/grant"
	"github.com/tierstore/tierstore/internal/keyspec"
	"github.com/tierstore/tierstore/internal/tlsconf"
	"github.com/tierstore/tierstore/internal/wire"
	"github.com/tierstore/tierstore/masterapi"
	"github.com/tierstore/tierstore/mastergrpc"
)

// Config configures a Client.
type Config struct {
	// MasterAddr is the master's gRPC address (host:port), or
	// etcd://h1:2379,h2:2379[/prefix] when the program imports package ha
	// (mastergrpc.Dial). Ignored when Master is set.
	MasterAddr string
	// Master is an in-process master (embedded mode, tests).
	Master masterapi.ClientAPI
	// LocalNode is a node in this process: puts prefer its segment, and its
	// replicas are read without a socket and ranked first.
	LocalNode LocalNode
	// PreferredNode asks the master to place puts on this node's segment
	// when it has room (default: LocalNode's name, if any).
	PreferredNode string
	// Timeout bounds each operation when the caller's context has no
	// deadline. Default 30s.
	Timeout time.Duration
	// ReplicaTimeout bounds the read of one replica, so that a stalled node
	// (stopped process, partition) leaves time to fall back to the next
	// replica. Default 5s.
	ReplicaTimeout time.Duration
	// SoftPin / HardPin are passed with every Put.
	SoftPin, HardPin bool
	// Observer, when set, is told the latency of every successful Put and
	// Get and the tier that served it (client/clientmetrics: Prometheus).
	Observer Observer
	// ConnsPerNode is the number of data connections kept to each node
	// (default wire.DefaultConnsPerNode); each carries several transfers
	// at once.
	ConnsPerNode int
	// Logger; default slog.Default().
	Logger *slog.Logger
	// TLS, when its three paths are set, is the client's mutual TLS
	// [--tls_cert, --tls_key, --tls_ca]: the connection to the master and
	// every data connection use it, re-reading the files when they change.
	// The certificate must name role client (docs/security.md). Zero:
	// plaintext.
	TLS TLSFiles
	// LocationCacheEntries bounds the replica-location cache: the answers
	// of lookups (an object's replicas and read grants), kept per key
	// until shortly before the read lease they granted ends, so that a
	// Get, GetInto, GetIntoParts or GetAlloc of a key read lately goes
	// straight to the node, without the master's round trip (loccache.go,
	// docs/design.md, "Replica-location cache"). 0: 65536
	// (DefaultLocationCacheEntries); negative: no cache (every get looks
	// the key up, as before).
	LocationCacheEntries int
	// LocationCacheBytes bounds the cache's memory (an estimate of its
	// entries'); 0: 32 MiB (DefaultLocationCacheBytes); negative: no
	// cache.
	LocationCacheBytes int64
}

// TLSFiles are the paths of a certificate, its key and the CA that signed
// the cluster's certificates (PEM).
type TLSFiles = tlsconf.Files

// ReadStats counts Get results by the tier that served them.
type ReadStats struct {
	LocalDRAM, RemoteDRAM, LocalSSD, RemoteSSD int64
	// Fallbacks counts replicas that failed (transport, missing, checksum)
	// before another one served the read.
	Fallbacks int64
	// ChecksumFailures counts replicas whose bytes failed the CRC32C.
	ChecksumFailures int64
	// BadReplicasReported counts checksum failures the master accepted as
	// a report (ReportBadReplica) and dropped the replica for.
	BadReplicasReported int64
	// MissingReplicasReported counts SSD replicas whose node answered that
	// it does not hold the object, and DRAM replicas whose node answered
	// that the range holds no such object (REPLICA_IS_GONE), reported to
	// the master
	// (ReportBadReplica), which dropped them. Transport failures (node
	// unreachable) are never reported.
	MissingReplicasReported int64
	// RemovedUnderRead counts replicas whose bytes failed the checksum, or
	// whose node did not hold them, because they were removed, evicted or
	// replaced while the read was in flight (the master no longer lists
	// them as the object's): not corruption, and not in ChecksumFailures.
	RemovedUnderRead int64
	// CacheHits counts gets served from the replica-location cache
	// without a lookup; CacheMisses gets that found no live entry;
	// CacheStale cached reads that failed (the replica was refused,
	// missing, unreadable) and fell back to a lookup. CacheEntries and
	// CacheBytes are the cache's size now.
	CacheHits, CacheMisses, CacheStale int64
	CacheEntries                       int
	CacheBytes                         int64
	// Touched counts the keys of cached gets reported to the master
	// (Touch, in calls gathering them for 100 ms: touch.go); TouchFailures
	// the Touch calls that failed; TouchesDropped the cached gets not
	// reported because 4096 distinct keys were waiting already.
	Touched, TouchFailures, TouchesDropped int64
	// OwnConns counts the data connections dialled for calls that read
	// their own replies: made on their caller's thread
	// (wire.WithCallerThread: the Python package's calls that run
	// directly), and the single gets' and single puts' transfers of Go
	// callers (wire.WithCallerReads, at most wire.OwnBusy at once), each
	// used by one call at a time and kept for the next (wire.OwnIdle per
	// node).
	OwnConns int64
}

// Client reads and writes objects of a tierstore cluster. It is safe for
// concurrent use.
type Client struct {
	cfg    Config
	log    *slog.Logger
	m      masterapi.ClientAPI
	closeM func() error // closes a master connection this client opened
	local  LocalNode
	data   wire.DataPool
	closed atomic.Bool
	// bgMu orders the start of a background follow-up (afterCall) with
	// Close; bg counts those running, which Close waits for.
	bgMu sync.Mutex
	bg   sync.WaitGroup

	localDRAM, remoteDRAM, localSSD, remoteSSD atomic.Int64
	fallbacks, checksumFailures, badReported   atomic.Int64
	missingReported, removedUnderRead          atomic.Int64
	// spread turns the remote DRAM replica a read starts with
	// (spreadRemoteDRAM); random at New, so clients start apart.
	spread atomic.Uint32
	// cache is the replica-location cache (loccache.go); nil when
	// disabled.
	cache *locCache
	// touch gathers the keys of gets the cache served, for the master
	// (touch.go).
	touch toucher
	// putEnds merges the PutEnd calls of concurrent single puts
	// (coalesce.go).
	putEnds *coalescer[masterapi.PutRef]
}

// New connects to the master (cfg.Master, or dials cfg.MasterAddr).
func New(ctx context.Context, cfg Config) (*Client, error) {
	c := &Client{cfg: cfg, log: cfg.Logger, local: cfg.LocalNode}
	c.spread.Store(rand.Uint32())
	c.cache = newLocCache(cfg.LocationCacheEntries, cfg.LocationCacheBytes)
	c.data.ConnsPerNode = cfg.ConnsPerNode
	if c.log == nil {
		c.log = slog.Default()
	}
	if c.cfg.Timeout <= 0 {
		c.cfg.Timeout = 30 * time.Second
	}
	if c.cfg.ReplicaTimeout <= 0 {
		c.cfg.ReplicaTimeout = 5 * time.Second
	}
	var opts []grpc.DialOption
	if cfg.TLS.Enabled() {
		src, err := tlsconf.Load(cfg.TLS)
		if err == nil {
			err = src.NeedRole(tlsconf.Client)
		}
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrBadConfig, err)
		}
		opts = append(opts, grpc.WithTransportCredentials(src.ClientCredentials(tlsconf.Master)))
		c.data.TLS = src.ClientConfig(tlsconf.Node)
	}
	switch {
	case cfg.Master != nil:
		c.m = cfg.Master
	case cfg.MasterAddr != "":
		r, err := mastergrpc.Dial(ctx, cfg.MasterAddr, opts...)
		if err != nil {
			return nil, fmt.Errorf("client: connecting to master %s: %w", cfg.MasterAddr, err)
		}
		c.m, c.closeM = r, r.Close
	default:
		return nil, fmt.Errorf("%w: Config needs Master or MasterAddr", ErrBadConfig)
	}
	c.touch.master, _ = c.m.(masterapi.Toucher)
	c.putEnds = putEnds(c.m)
	return c, nil
}

func (c *Client) preferred() string {
	if c.cfg.PreferredNode != "" {
		return c.cfg.PreferredNode
	}
	if c.local != nil {
		return c.local.Name()
	}
	return ""
}

// Master is the master API this client talks to.
func (c *Client) Master() masterapi.ClientAPI { return c.m }

// Close releases the client's connections. It does not close LocalNode or
// an in-process Master.
func (c *Client) Close() error {
	if c.closed.Swap(true) {
		return nil
	}
	// A barrier, not a critical section: every afterCall that saw the client
	// open has counted itself in c.bg once this lock was free.
	c.bgMu.Lock()
	//lint:ignore SA2001 the empty critical section is the barrier.
	c.bgMu.Unlock()
	// The cached gets not reported yet, while the master connection is
	// open (a background send that started has its keys already).
	c.sendTouches()
	c.data.Close()
	var err error
	if c.closeM != nil {
		err = c.closeM() // background follow-ups now fail at once
	}
	c.bg.Wait()
	return err
}

// afterCall makes a best-effort follow-up call f of an operation whose
// context is ctx (a put's revoke, a read's report of a bad replica) such
// that the operation still returns by its deadline: f gets ctx's remaining
// time, at most bound; when ctx has ended (before f or during it), f runs
// again in the background with bound, so that what it tells the master is
// not lost to the deadline (Close waits for it).
func (c *Client) afterCall(ctx context.Context, bound time.Duration, f func(ctx context.Context) error) {
	if ctx.Err() == nil {
		fctx, cancel := context.WithTimeout(ctx, bound)
		err := f(fctx)
		cancel()
		if err == nil || ctx.Err() == nil {
			return // done, or failed for a reason of its own
		}
	}
	c.bgMu.Lock()
	defer c.bgMu.Unlock()
	if c.closed.Load() {
		return
	}
	c.bg.Go(func() {
		fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), bound)
		defer cancel()
		_ = f(fctx)
	})
}

func (c *Client) opCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, c.cfg.Timeout)
}

func (c *Client) check(key string) error {
	if c.closed.Load() {
		return ErrClosed
	}
	if len(key) == 0 || len(key) > keyspec.MaxLen {
		return errcode.Errorf(errcode.InvalidKey, "client: key of %d bytes (1..%d allowed)", len(key), keyspec.MaxLen)
	}
	return nil
}

// peerFor is the way to replica r's node for one call; the caller
// releases it once that call returned.
func (c *Client) peerFor(ctx context.Context, r masterapi.Replica) (peer, error) {
	if c.local != nil && r.Node == c.local.Name() {
		return localPeer{c.local}, nil
	}
	if len(r.Endpoint) > 7 && r.Endpoint[:7] == "inproc:" {
		return nil, errcode.Errorf(errcode.TransferFail, "client: node %s is in another process's embedded mode", r.Node)
	}
	dc, err := c.data.Acquire(ctx, r.Endpoint)
	if errors.Is(err, wire.ErrClosed) {
		return nil, ErrClosed
	} else if err != nil {
		return nil, err
	}
	return remotePeer{dc}, nil
}

// PutOptions are the options of one put (Put uses the zero value).
type PutOptions struct {
	// Replicas is the number of DRAM replicas to keep, each on a different
	// node (Mooncake's replica_num); 0 means 1, at most
	// masterapi.MaxReplicas. The replicas are written in parallel and the
	// put is published only once every one of them is written: readers see
	// all of them or none. A Get reads the nearest (this process's node
	// first) and falls back on the others; the loss of a node leaves the
	// others readable. With fewer live nodes than Replicas the put fails
	// with ErrNoAvailableHandle, unless AllowFewer.
	Replicas int
	// AllowFewer places as many of the Replicas as live nodes with room
	// allow now (at least one) instead of failing (Mooncake's best effort).
	AllowFewer bool
	// PreferredNode places the first replica on this node's segment when
	// it has room; "" = Config.PreferredNode (or the local node).
	PreferredNode string
	// SoftPin / HardPin pin this put's object (or'ed with Config's).
	SoftPin, HardPin bool
}

// Put stores value under key: the master allocates a DRAM range (on the
// local node when it has room), the bytes are written there and the put is
// completed. On a write failure the put is revoked. ErrObjectExists when
// the key already exists. PutWith takes per-put options (replicas).
func (c *Client) Put(ctx context.Context, key string, value []byte) error {
	return c.PutWith(ctx, key, value, PutOptions{})
}

// PutWith is Put with options: opts.Replicas DRAM replicas on as many
// nodes, written in parallel, published together (see PutOptions).
func (c *Client) PutWith(ctx context.Context, key string, value []byte, opts PutOptions) error {
	return c.putParts(ctx, key, [][]byte{value}, opts)
}

// putParts is PutWith of the concatenation of parts.
func (c *Client) putParts(ctx context.Context, key string, value [][]byte, opts PutOptions) error {
	if err := c.check(key); err != nil {
		return err
	}
	size := partsLen(value)
	if size == 0 {
		return errcode.Errorf(errcode.InvalidParams, "client: empty value for key %s", keyspec.Show(key))
	}
	start := time.Now()
	ctx, cancel := c.opCtx(ctx)
	defer cancel()
	crc := crcParts(value)
	r, err := c.m.PutStart(ctx, c.putRequest(key, size, crc, opts))
	if err != nil {
		return fmt.Errorf("client: put %s: %w", keyspec.Show(key), err)
	}
	// A single put's writes: each writing goroutine reads its reply itself,
	// on a connection of its own (wire.WithCallerReads).
	wctx := wire.WithCallerReads(wire.WithObject(ctx, c.object(key, opts)))
	if err := c.writeReplicas(wctx, r, value, crc); err != nil {
		c.revoke(ctx, key, r.PutToken)
		return fmt.Errorf("client: put %s: %w", keyspec.Show(key), err)
	}
	if err := c.putEnds.do(ctx, masterapi.PutRef{Key: key, Token: r.PutToken}); err != nil {
		c.revoke(ctx, key, r.PutToken)
		return fmt.Errorf("client: put %s: %w", keyspec.Show(key), err)
	}
	c.cache.drop(key) // an answer about an earlier object of the key
	c.observePut(r.Replica, start)
	return nil
}

// object is what the data plane records of a put of key with opts.
func (c *Client) object(key string, opts PutOptions) wire.Object {
	return wire.Object{Key: key, SoftPin: c.cfg.SoftPin || opts.SoftPin, HardPin: c.cfg.HardPin || opts.HardPin}
}

// revokeTimeout bounds a put's PutRevoke (within the put's deadline, or
// after it in the background: afterCall).
const revokeTimeout = 5 * time.Second

// putRequest is the PutStart request of a put of key.
func (c *Client) putRequest(key string, size int64, crc uint32, opts PutOptions) masterapi.PutStartRequest {
	req := masterapi.PutStartRequest{Key: key, Size: size, CRC: crc, SoftPin: c.cfg.SoftPin || opts.SoftPin, HardPin: c.cfg.HardPin || opts.HardPin,
		Replicas: opts.Replicas, AllowFewer: opts.AllowFewer, PreferredNode: opts.PreferredNode}
	if req.PreferredNode == "" {
		req.PreferredNode = c.preferred()
	}
	return req
}

// revoke abandons the put token of key (best effort: a put the master no
// longer knows as current, or that ended after all, is answered an error
// and changes nothing), without holding the put past its deadline ctx.
func (c *Client) revoke(ctx context.Context, key string, token uint64) {
	c.afterCall(ctx, revokeTimeout, func(ctx context.Context) error {
		err := c.m.PutRevoke(ctx, key, token)
		if err != nil {
			c.log.Debug("put revoke failed", "key", key, "err", err)
		}
		return err
	})
}

// writeReplicas writes value to every replica of the put p, in parallel
// when there are several; the first failure cancels the others' writes
// and is the error (naming the replica's node).
func (c *Client) writeReplicas(ctx context.Context, p masterapi.PutStartReply, value [][]byte, crc uint32) error {
	if len(p.More) == 0 {
		return c.writeReplica(ctx, p.Replica, value, crc)
	}
	reps := p.Replicas()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errs := make([]error, len(reps))
	var first atomic.Int32 // index of the first write that failed
	first.Store(-1)
	var wg sync.WaitGroup
	for i, r := range reps {
		wg.Go(func() {
			if errs[i] = c.writeReplica(ctx, r, value, crc); errs[i] != nil {
				first.CompareAndSwap(-1, int32(i))
				cancel()
			}
		})
	}
	wg.Wait()
	if f := first.Load(); f >= 0 {
		return fmt.Errorf("replica %d of %d: %w", f+1, len(reps), errs[f])
	}
	return nil
}

// writeReplica writes value to the put's replica r.
func (c *Client) writeReplica(ctx context.Context, r masterapi.Replica, value [][]byte, crc uint32) error {
	if size := partsLen(value); r.Kind != masterapi.DRAM || r.Length != size {
		return errcode.Errorf(errcode.InternalError, "client: master allocated a %v replica of %d bytes for %d", r.Kind, r.Length, size)
	}
	p, err := c.peerFor(ctx, r)
	if err == nil {
		// The range's write grant (a node with a grant secret refuses the
		// write without it; the refusal keeps the grant's sentinel).
		err = grantRefusal(p.writeRange(ctx, r.Segment, r.Offset, value, crc, r.PutToken, grantOf(r.Grant)))
		p.release()
	}
	if err != nil {
		return fmt.Errorf("writing to node %s: %w", r.Node, err)
	}
	return nil
}

// rank orders replicas best first: local DRAM, remote DRAM, local SSD,
// remote SSD.
func (c *Client) rank(r masterapi.Replica) int {
	local := c.local != nil && r.Node == c.local.Name()
	switch {
	case r.Kind == masterapi.DRAM && local:
		return 0
	case r.Kind == masterapi.DRAM:
		return 1
	case local:
		return 2
	}
	return 3
}

// Get returns the value of key, read from the best replica that answers
// with bytes matching the object's CRC32C; on any failure it falls back to
// the next replica. Errors: ErrObjectNotFound (never existed, removed or
// expired), ErrReplicaGone (it existed but every node holding it died),
// ErrReplicaNotReady (put in progress), ErrTransferFail or
// ErrChecksumMismatch (every replica failed). GetInto reads into the
// caller's buffer instead.
func (c *Client) Get(ctx context.Context, key string) ([]byte, error) {
	start := time.Now()
	if err := c.check(key); err != nil {
		return nil, err
	}
	ctx, cancel := c.opCtx(ctx)
	defer cancel()
	var buf []byte
	err := c.lookupAndRead(ctx, key, start, func(info masterapi.ObjectInfo) ([][]byte, error) {
		buf = make([]byte, info.Size)
		return [][]byte{buf}, nil
	})
	if err != nil {
		return nil, err
	}
	return buf, nil
}

// lookupAndRead looks key up and reads it (readBest) into the buffer
// bufFor gives for what the lookup answered, then readAgain.
// A key in the replica-location cache is read from its cached answer
// first (readCached); if that fails, it is looked up as if it were not.
func (c *Client) lookupAndRead(ctx context.Context, key string, start time.Time, bufFor func(masterapi.ObjectInfo) ([][]byte, error)) error {
	if done, err := c.readCached(ctx, key, start, bufFor); done {
		return err
	}
	gen, sent := c.cache.generation(), time.Now()
	info, err := c.m.GetReplicaList(ctx, key)
	if err != nil {
		return fmt.Errorf("client: get %s: %w", keyspec.Show(key), err)
	}
	c.remember(key, info, sent, gen)
	buf, err := bufFor(info)
	if err == nil {
		err = c.readAgain(ctx, info, c.readBest(ctx, info, buf, start), start, bufFor)
	}
	if err != nil {
		c.cache.drop(key)
	}
	return err
}

// readAgain is what a read of info that ended with err does next. When
// every replica failed its checksum, or went away under the read
// (errGoneUnderRead), the key may have been removed or replaced while it
// was read: a forced remove freed the range the lookup named and the next
// put wrote it, or an SSD key was removed and offloaded again. It is then
// looked up once more: gone, it is that lookup's answer (OBJECT_NOT_FOUND,
// or REPLICA_IS_GONE inside a lease); another object (another CRC32C,
// size or put), or replicas that went away, it is read again into the
// buffer bufFor gives; the same object whose bytes failed, the checksum
// error stands (issue 21 item 5).
func (c *Client) readAgain(ctx context.Context, info masterapi.ObjectInfo, err error, start time.Time, bufFor func(masterapi.ObjectInfo) ([][]byte, error)) error {
	gone := errors.Is(err, errGoneUnderRead)
	// A grant past its expiry (a read that outlived its lookup's lease):
	// the next lookup gives fresh grants.
	expired := errors.Is(err, grant.ErrExpired)
	if !gone && !expired && !errors.Is(err, errcode.ErrChecksumMismatch) || ctx.Err() != nil {
		return err
	}
	again, lerr := c.m.GetReplicaList(ctx, info.Key)
	switch {
	case errors.Is(lerr, errcode.ErrObjectNotFound), gone && lerr != nil:
		return fmt.Errorf("client: get %s: removed while it was read: %w", keyspec.Show(info.Key), lerr)
	case lerr != nil || (!gone && !expired && sameObject(info, again)):
		return err
	}
	buf, err := bufFor(again)
	if err != nil {
		return err
	}
	return c.readBest(ctx, again, buf, start)
}

// sameObject reports whether two lookups of a key answered the same
// object: size and CRC32C, and the put of the DRAM replica when both list
// one (a DRAM replica dropped as bad in between leaves the same object).
func sameObject(a, b masterapi.ObjectInfo) bool {
	token := func(in masterapi.ObjectInfo) uint64 {
		for _, r := range in.Replicas {
			if r.Kind == masterapi.DRAM {
				return r.PutToken
			}
		}
		return 0
	}
	ta, tb := token(a), token(b)
	return a.Size == b.Size && a.CRC == b.CRC && (ta == 0 || tb == 0 || ta == tb)
}

// reportBadReplicaTimeout bounds the ReportBadReplica call of a read.
const reportBadReplicaTimeout = 2 * time.Second

// reportBad tells the master that replica r of info failed its size/CRC
// check, or (missing) that its node answered it does not hold the object on
// SSD, so that it stops listing it (the master drops it; the next reconcile
// deletes an SSD copy). It reports whether the master answered that r is
// not, or no longer, the object's (removed, evicted or put again since the
// lookup: the replica went away under the read, which is not corruption;
// docs/design.md, "Reads racing a removal"). Best effort: a failure is
// logged; the read goes on with the next replica either way, and is not
// held past its deadline (afterCall; an answer that comes after is not
// waited for, and counts as not gone).
func (c *Client) reportBad(ctx context.Context, info masterapi.ObjectInfo, r masterapi.Replica, missing bool) (gone bool) {
	var g atomic.Bool
	c.afterCall(ctx, reportBadReplicaTimeout, func(ctx context.Context) error {
		gone, err := c.report(ctx, info, r, missing)
		g.Store(gone)
		return err
	})
	return g.Load()
}

func (c *Client) report(ctx context.Context, info masterapi.ObjectInfo, r masterapi.Replica, missing bool) (gone bool, err error) {
	what := "fails its checksum"
	if missing {
		what = "is missing on its node"
	}
	err = c.m.ReportBadReplica(ctx, info.Key, info.CRC, r)
	switch {
	case err == nil && missing:
		c.missingReported.Add(1)
		c.log.Warn("reported a replica that "+what, "key", info.Key, "node", r.Node, "kind", r.Kind)
	case err == nil:
		c.badReported.Add(1)
		c.log.Warn("reported a replica that "+what, "key", info.Key, "node", r.Node, "kind", r.Kind)
	case errors.Is(err, errcode.ErrReplicaNotFound), errors.Is(err, errcode.ErrObjectNotFound):
		// Not (or no longer) the object's replica: removed, evicted or
		// put again since the lookup (or already dropped: a node that
		// detects a corrupt SSD entry drops it itself).
		return true, nil
	default:
		c.log.Warn("reporting a replica that "+what+" failed", "key", info.Key, "node", r.Node, "kind", r.Kind, "err", err)
	}
	return false, err
}

func (c *Client) countRead(r masterapi.Replica) {
	switch c.rank(r) {
	case 0:
		c.localDRAM.Add(1)
	case 1:
		c.remoteDRAM.Add(1)
	case 2:
		c.localSSD.Add(1)
	default:
		c.remoteSSD.Add(1)
	}
}

// ReadStats returns the per-tier read counters of this client.
func (c *Client) ReadStats() ReadStats {
	st := ReadStats{
		LocalDRAM: c.localDRAM.Load(), RemoteDRAM: c.remoteDRAM.Load(),
		LocalSSD: c.localSSD.Load(), RemoteSSD: c.remoteSSD.Load(),
		Fallbacks: c.fallbacks.Load(), ChecksumFailures: c.checksumFailures.Load(),
		BadReplicasReported:     c.badReported.Load(),
		MissingReplicasReported: c.missingReported.Load(),
		RemovedUnderRead:        c.removedUnderRead.Load(),
		OwnConns:                c.data.OwnDials(),
		Touched:                 c.touch.sent.Load(),
		TouchFailures:           c.touch.failed.Load(),
		TouchesDropped:          c.touch.dropped.Load(),
	}
	if lc := c.cache; lc != nil {
		st.CacheHits, st.CacheMisses, st.CacheStale = lc.hits.Load(), lc.misses.Load(), lc.stale.Load()
		st.CacheEntries, st.CacheBytes = lc.len()
	}
	return st
}

// Exists reports whether key has a readable replica (and grants a read
// lease, so a Get inside the lease finds it). It agrees with Get: false
// where Get answers ErrObjectNotFound or ErrReplicaNotReady (a put in
// progress), and ErrReplicaGone, as Get, for an object whose every replica
// was lost inside a read lease.
func (c *Client) Exists(ctx context.Context, key string) (bool, error) {
	if err := c.check(key); err != nil {
		return false, err
	}
	ctx, cancel := c.opCtx(ctx)
	defer cancel()
	ok, err := c.m.ExistKey(ctx, key)
	if err != nil {
		return false, fmt.Errorf("client: exists %s: %w", keyspec.Show(key), err)
	}
	return ok, nil
}

// Remove deletes key. ErrObjectHasLease while a read lease is active,
// unless force.
func (c *Client) Remove(ctx context.Context, key string, force bool) error {
	if err := c.check(key); err != nil {
		return err
	}
	ctx, cancel := c.opCtx(ctx)
	defer cancel()
	c.cache.removed(key, false)
	defer c.cache.removed(key, false) // and lookups that overlapped it
	if err := c.m.Remove(ctx, key, force); err != nil {
		return fmt.Errorf("client: remove %s: %w", keyspec.Show(key), err)
	}
	return nil
}

// RemoveAll removes every object and returns how many it removed. Unless
// force it skips the objects Remove would refuse (leased, pinned by an
// offload task, a put in progress), as Mooncake's remove_all does.
func (c *Client) RemoveAll(ctx context.Context, force bool) (int64, error) {
	if c.closed.Load() {
		return 0, ErrClosed
	}
	ctx, cancel := c.opCtx(ctx)
	defer cancel()
	defer c.cache.removed("", true)
	n, err := c.m.RemoveAll(ctx, force)
	if err != nil {
		return n, fmt.Errorf("client: remove all: %w", err)
	}
	return n, nil
}

// RemoveByRegex is RemoveAll for the objects whose key matches pattern
// anywhere (Go regexp syntax, RE2). A pattern that does not compile is
// ErrInvalidParams naming it, and nothing is removed.
func (c *Client) RemoveByRegex(ctx context.Context, pattern string, force bool) (int64, error) {
	if c.closed.Load() {
		return 0, ErrClosed
	}
	ctx, cancel := c.opCtx(ctx)
	defer cancel()
	defer c.cache.removed("", true)
	n, err := c.m.RemoveByRegex(ctx, pattern, force)
	if err != nil {
		return n, fmt.Errorf("client: remove by regex: %w", err)
	}
	return n, nil
}

// EvictDRAM drops the DRAM replicas of keys (or of every object when all)
// that also have an SSD replica. It answers how many were dropped and how
// many were left in place, by reason (res.Skipped(), res.SkipReasons()):
// no SSD copy yet, pinned by an offload task, leased by a reader that has
// only the DRAM copy, hard-pinned, put in progress; for named keys also not
// found and not in DRAM.
func (c *Client) EvictDRAM(ctx context.Context, keys []string, all bool) (masterapi.EvictDRAMResult, error) {
	ctx, cancel := c.opCtx(ctx)
	defer cancel()
	res, err := c.m.EvictDRAM(ctx, keys, all)
	if err != nil {
		return res, fmt.Errorf("client: evict memory: %w", err)
	}
	return res, nil
}

// Stats returns the master's counters.
func (c *Client) Stats(ctx context.Context) (masterapi.Stats, error) {
	ctx, cancel := c.opCtx(ctx)
	defer cancel()
	return c.m.Stats(ctx)
}
