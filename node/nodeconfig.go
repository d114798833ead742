package node

import (
	"fmt"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/tierstore/tierstore/bucket"
	"github.com/tierstore/tierstore/eviction"
	"github.com/tierstore/tierstore/internal/grant"
	"github.com/tierstore/tierstore/internal/keyspec"
	"github.com/tierstore/tierstore/internal/peerlimit"
	"github.com/tierstore/tierstore/internal/tlsconf"
	"github.com/tierstore/tierstore/internal/units"
	"github.com/tierstore/tierstore/internal/wire"
	"golang.org/x/sys/unix"
)

// Defaults of Config (and of the tierstore-node flags).
const (
	DefaultListen            = "127.0.0.1:0"
	DefaultMemory            = 1 << 30
	DefaultBackend           = "uring"
	DefaultBucketKeysLimit   = 500
	DefaultBucketSizeLimit   = 256 << 20
	DefaultBucketEviction    = "lru"
	DefaultCompression       = "none"
	DefaultHeartbeatInterval = time.Second
	DefaultPingInterval      = time.Second
	DefaultReconcileInterval = time.Minute
	DefaultOffloadBatch      = 1024
	// DefaultOffloadTaskTimeout is the master's default
	// offload_task_timeout.
	DefaultOffloadTaskTimeout = 300 * time.Second
	// DefaultRequestsPerConn is the data plane's SSD reads served at once
	// per connection.
	DefaultRequestsPerConn = 8
	// DefaultDataFrameTimeout: wire.DefaultFrameTimeout.
	DefaultDataFrameTimeout = wire.DefaultFrameTimeout
)

// DerivedPeerBuffer is the --max_peer_buffer of a node that does not set
// one: peerlimit.DefaultPeerBuffer, or twice the largest SSD object when
// that is more (a verified read holds its whole value).
func DerivedPeerBuffer(bucketSizeLimit int64) int64 {
	return max(peerlimit.DefaultPeerBuffer, 2*bucketSizeLimit)
}

// Config configures a store node. Flag names of tierstore-node are given
// in brackets; Validate's errors name the flag.
type Config struct {
	// Listen is the peer gRPC address [--listen]. Ignored by embedded nodes.
	Listen string
	// TLS, when not nil, is the node's mutual TLS [--tls_cert, --tls_key,
	// --tls_ca]: the shared port takes the TLS handshake first, then the
	// data plane or gRPC inside; the data plane needs role client, NodeStats
	// any role (Roles). nil: plaintext.
	TLS *tlsconf.Source
	// Grants, when not nil, is the grant secret [--grant_secret_file] the
	// masters share: every data-plane read must carry the read grant of
	// its lookup, every data-plane write the write grant of its PutStart
	// (grants.go, docs/security.md). nil: reads and writes carry no grant,
	// or one that is ignored.
	Grants *grant.Keys
	// Limits are the bounds per peer of the shared port
	// [--max_conns_per_peer, --max_streams_per_conn (gRPC),
	// --tls_handshake_timeout, --max_peer_buffer]; zero fields take the
	// defaults, PeerBuffer DerivedPeerBuffer(BucketSizeLimit) (Validate
	// sets it). docs/security.md, Bounds per peer.
	Limits peerlimit.Limits
	// RequestsPerConn bounds the data-plane SSD reads served at once on
	// one connection; further requests wait in the socket (the client's
	// sends block), nothing is refused [--max_requests_per_conn].
	RequestsPerConn int
	// DataFrameTimeout bounds how long a data-plane request frame may take
	// to arrive once its first byte is in, plus its payload at 1 MiB/s; a
	// slower one ends its connection (PEER_LIMIT_EXCEEDED)
	// [--data_frame_timeout].
	DataFrameTimeout time.Duration
	// Memory is the DRAM segment size in bytes [--memory].
	Memory int64
	// EnableOffload turns on the SSD tier and the offload heartbeat
	// [--enable_offload]; it needs SSDDir.
	EnableOffload bool
	// SSDDir is the SSD tier directory: absolute, existing, writable
	// [--ssd_dir].
	SSDDir string
	// SSDCapacity bounds the SSD tier in bytes; 0 is unlimited
	// [--ssd_capacity].
	SSDCapacity int64
	// Backend is "uring" (falls back to pwrite when io_uring is not
	// available) or "pwrite" [--backend].
	Backend string
	// DirectIO opens bucket files with O_DIRECT [--direct_io].
	DirectIO bool
	// BucketKeysLimit bounds the objects of one bucket
	// [--bucket_keys_limit].
	BucketKeysLimit int
	// BucketSizeLimit is the largest object that goes to SSD, and the
	// object bytes of one bucket [--bucket_size_limit]: an object of
	// exactly BucketSizeLimit bytes (any key) fits in a bucket, whose file
	// is then up to BucketFileLimit(BucketSizeLimit) bytes (header,
	// alignment, trailer and footer added). A larger object stays in DRAM
	// only; its offload task is failed permanently. 0 (the default) takes
	// DerivedBucketSizeLimit(SSDCapacity); Validate sets it.
	BucketSizeLimit int64
	// BucketEviction is "lru", "fifo", "lru2" (scan resistant: a bucket
	// read twice is protected) or "worth" (of all the buckets, the one
	// whose live objects are worth least by the master's admission sketch
	// goes first; lru until a sketch arrives, so use it with
	// offload_admission_policy=tinylfu; it also evicts only what a write
	// needs, not down to the low watermark: EvictToFit)
	// [--bucket_eviction].
	BucketEviction string
	// Compression is "none" or "lz4" [--compression].
	Compression string
	// MetricsPort serves Prometheus metrics on 127.0.0.1:port; 0 turns it
	// off [--metrics_port].
	MetricsPort int
	// HeartbeatInterval is the offload heartbeat period
	// [--heartbeat_interval].
	HeartbeatInterval time.Duration
	// OffloadWake keeps a WaitOffload open at the master beside the
	// heartbeat ticks: the node runs a heartbeat as soon as the master says
	// its offload is pressing (a put waits for DRAM room, queued offload
	// bytes pass a quarter of its DRAM, promotions are queued), so a full
	// DRAM drains at the disk's pace whatever the interval; and the node
	// pulls the removal log as soon as a forced removal of a leased object
	// waits for it (master/removewait.go; without an SSD tier, for that
	// alone). false: ticks only, and such a removal waits for the next
	// pull (PingInterval) [--offload_wake].
	OffloadWake bool
	// PingInterval is the liveness ping period [--ping_interval].
	PingInterval time.Duration
	// ReconcileInterval is the period of the SSD key-list reconcile
	// [--reconcile_interval].
	ReconcileInterval time.Duration
	// AdmissionSketchInterval is the least time between two admission
	// sketches the node takes from the master (which sends one when the
	// node's copy has fallen 1/64 of the sketch's ageing period behind);
	// 0: no minimum [--admission_sketch_interval].
	AdmissionSketchInterval time.Duration
	// OffloadBatch is the most tasks drained per heartbeat.
	OffloadBatch int
	// OffloadTaskTimeout bounds one offload round; keep it equal to the
	// master's offload_task_timeout. A notify the master does not answer
	// (unreachable) is sent again with backoff until then; a bucket whose
	// notify was never answered is kept and re-registered, never rolled
	// back (docs/design.md invariant 9) [--offload_task_timeout].
	OffloadTaskTimeout time.Duration
	// Logger; default slog.Default().
	Logger *slog.Logger
}

// DefaultConfig returns a Config holding every default.
func DefaultConfig() Config {
	return Config{
		Listen:            DefaultListen,
		Memory:            DefaultMemory,
		Backend:           DefaultBackend,
		BucketKeysLimit:   DefaultBucketKeysLimit,
		BucketSizeLimit:   0, // DerivedBucketSizeLimit(SSDCapacity)
		BucketEviction:    DefaultBucketEviction,
		Compression:       DefaultCompression,
		HeartbeatInterval: DefaultHeartbeatInterval,
		OffloadWake:       true,
		PingInterval:      DefaultPingInterval,
		ReconcileInterval: DefaultReconcileInterval,
		OffloadBatch:      DefaultOffloadBatch,

		OffloadTaskTimeout: DefaultOffloadTaskTimeout,
		Limits: peerlimit.Limits{ConnsPerPeer: peerlimit.DefaultConnsPerPeer, StreamsPerConn: peerlimit.DefaultStreamsPerConn,
			HandshakeTimeout: peerlimit.DefaultHandshakeTimeout}, // PeerBuffer: derived
		RequestsPerConn:  DefaultRequestsPerConn,
		DataFrameTimeout: DefaultDataFrameTimeout,
	}
}

// BucketFileLimit is the largest bucket file of a node whose
// --bucket_size_limit is objectLimit: one object of objectLimit bytes with
// a key of the longest length, in the bucket format (docs/format/bucket.md:
// a 4 KiB header, the value padded to 4 KiB, the trailer entry and the
// footer, padded to 4 KiB). The tier's bucket limit is set to it, so an
// object of exactly objectLimit bytes always fits.
func BucketFileLimit(objectLimit int64) int64 {
	return bucket.Size(1, keyspec.MaxLen, bucket.AlignUp(objectLimit))
}

// DerivedBucketSizeLimit is the --bucket_size_limit of a node that does
// not set one: DefaultBucketSizeLimit, or an eighth of a smaller SSD
// capacity (4 KiB aligned, down), so that the tier has at least eight
// buckets to evict from and a lone --ssd_capacity=128MiB just works.
func DerivedBucketSizeLimit(capacity int64) int64 {
	if capacity <= 0 || capacity/8 >= DefaultBucketSizeLimit {
		return DefaultBucketSizeLimit
	}
	return capacity / 8 &^ (bucket.Align - 1)
}

func badFlag(flag, format string, args ...any) error {
	return fmt.Errorf("%w: --%s: %s", ErrBadConfig, flag, fmt.Sprintf(format, args...))
}

// Validate checks every field and every combination, returning an error
// wrapping ErrBadConfig that names the offending flag.
func (c *Config) Validate() error { return c.validate(true) }

func (c *Config) validate(checkDir bool) error {
	if c.Memory <= 0 {
		return badFlag("memory", "must be positive, got %d", c.Memory)
	}
	if limit, what, ok := MemoryLimit(); ok && c.Memory > limit {
		return badFlag("memory", "%s exceeds %s of %s (%d bytes)", units.Format(c.Memory), what, units.Human(limit), limit)
	}
	if c.SSDCapacity < 0 {
		return badFlag("ssd_capacity", "must not be negative, got %d", c.SSDCapacity)
	}
	switch c.Backend {
	case "uring", "pwrite":
	default:
		return badFlag("backend", "%q is not one of uring, pwrite", c.Backend)
	}
	if c.BucketKeysLimit <= 0 {
		return badFlag("bucket_keys_limit", "must be positive, got %d", c.BucketKeysLimit)
	}
	if c.BucketSizeLimit == 0 {
		c.BucketSizeLimit = DerivedBucketSizeLimit(c.SSDCapacity)
		if c.BucketSizeLimit <= 0 {
			return badFlag("ssd_capacity", "%s is too small: an eighth of it must hold a 4 KiB object", units.Format(c.SSDCapacity))
		}
	}
	if c.BucketSizeLimit < 0 {
		return badFlag("bucket_size_limit", "must be positive, got %d", c.BucketSizeLimit)
	}
	if c.BucketSizeLimit > bucket.MaxValueLen {
		return badFlag("bucket_size_limit", "%s exceeds the largest object a bucket can hold (%s)", units.Format(c.BucketSizeLimit), units.Format(bucket.MaxValueLen))
	}
	if f := BucketFileLimit(c.BucketSizeLimit); c.SSDCapacity > 0 && f > c.SSDCapacity {
		return badFlag("bucket_size_limit", "%s needs bucket files of up to %d bytes (header, trailer and footer added), more than --ssd_capacity %s",
			units.Format(c.BucketSizeLimit), f, units.Format(c.SSDCapacity))
	}
	if err := c.validateLimits(); err != nil {
		return err
	}
	if !slices.Contains(eviction.Names, c.BucketEviction) {
		return badFlag("bucket_eviction", "%q is not one of %s", c.BucketEviction, strings.Join(eviction.Names, ", "))
	}
	switch c.Compression {
	case "none", "lz4":
	default:
		return badFlag("compression", "%q is not one of none, lz4", c.Compression)
	}
	if c.MetricsPort < 0 || c.MetricsPort > 65535 {
		return badFlag("metrics_port", "%d is not a port (0 turns metrics off)", c.MetricsPort)
	}
	if c.HeartbeatInterval <= 0 {
		return badFlag("heartbeat_interval", "must be positive, got %v", c.HeartbeatInterval)
	}
	if c.AdmissionSketchInterval < 0 {
		return badFlag("admission_sketch_interval", "must be >= 0, got %v", c.AdmissionSketchInterval)
	}
	if c.PingInterval <= 0 {
		return badFlag("ping_interval", "must be positive, got %v", c.PingInterval)
	}
	if c.ReconcileInterval <= 0 {
		return badFlag("reconcile_interval", "must be positive, got %v", c.ReconcileInterval)
	}
	if c.OffloadTaskTimeout <= 0 {
		return badFlag("offload_task_timeout", "must be positive, got %v", c.OffloadTaskTimeout)
	}
	if c.OffloadBatch <= 0 {
		return badFlag("offload_batch", "must be positive, got %d", c.OffloadBatch)
	}
	if !checkDir {
		return nil
	}
	if c.EnableOffload && c.SSDDir == "" {
		return badFlag("enable_offload", "needs --ssd_dir")
	}
	if c.SSDDir != "" {
		if err := checkSSDDir(c.SSDDir); err != nil {
			return err
		}
		if !c.EnableOffload {
			return badFlag("ssd_dir", "given without --enable_offload")
		}
	}
	return nil
}

// validateLimits checks the bounds per peer (zero: the default) and
// derives PeerBuffer; BucketSizeLimit is set.
func (c *Config) validateLimits() error {
	l := &c.Limits
	switch {
	case l.ConnsPerPeer < 0:
		return badFlag("max_conns_per_peer", "must be positive, got %d", l.ConnsPerPeer)
	case l.StreamsPerConn < 0 || int64(l.StreamsPerConn) > math.MaxUint32:
		return badFlag("max_streams_per_conn", "must be positive, got %d", l.StreamsPerConn)
	case l.HandshakeTimeout < 0:
		return badFlag("tls_handshake_timeout", "must be positive, got %v", l.HandshakeTimeout)
	case l.PeerBuffer < 0:
		return badFlag("max_peer_buffer", "must be positive, got %d", l.PeerBuffer)
	case c.RequestsPerConn < 0:
		return badFlag("max_requests_per_conn", "must be positive, got %d", c.RequestsPerConn)
	case c.DataFrameTimeout < 0:
		return badFlag("data_frame_timeout", "must be positive, got %v", c.DataFrameTimeout)
	}
	if l.PeerBuffer == 0 {
		l.PeerBuffer = DerivedPeerBuffer(c.BucketSizeLimit)
	}
	if c.EnableOffload && l.PeerBuffer < c.BucketSizeLimit {
		return badFlag("max_peer_buffer", "%s is less than --bucket_size_limit %s: a verified read of the largest SSD object holds it whole",
			units.Format(l.PeerBuffer), units.Format(c.BucketSizeLimit))
	}
	return nil
}

// MemoryLimit returns the most DRAM a segment of this process may have: the
// smallest of the machine's physical memory (sysinfo totalram, as
// /proc/meminfo MemTotal) and the soft RLIMIT_AS and RLIMIT_DATA when they
// are set; what names the limit ("physical memory (MemTotal)", "RLIMIT_AS",
// "RLIMIT_DATA"). ok is false when no limit could be read. A segment is an
// anonymous private writable mapping, so it counts against all three.
func MemoryLimit() (limit int64, what string, ok bool) {
	var si unix.Sysinfo_t
	if err := unix.Sysinfo(&si); err == nil && si.Totalram > 0 {
		unit := uint64(si.Unit)
		if unit == 0 {
			unit = 1
		}
		if t := uint64(si.Totalram) * unit; t <= math.MaxInt64 {
			limit, what, ok = int64(t), "physical memory (MemTotal)", true
		}
	}
	for _, r := range []struct {
		res  int
		name string
	}{{unix.RLIMIT_AS, "RLIMIT_AS"}, {unix.RLIMIT_DATA, "RLIMIT_DATA"}} {
		var rl unix.Rlimit
		if err := unix.Getrlimit(r.res, &rl); err != nil || rl.Cur == unix.RLIM_INFINITY || rl.Cur > math.MaxInt64 {
			continue
		}
		if !ok || int64(rl.Cur) < limit {
			limit, what, ok = int64(rl.Cur), r.name, true
		}
	}
	return limit, what, ok
}

// checkSSDDir: absolute, an existing directory, writable by this process.
func checkSSDDir(dir string) error {
	if !filepath.IsAbs(dir) {
		return badFlag("ssd_dir", "%q is not an absolute path", dir)
	}
	st, err := os.Stat(dir)
	if err != nil {
		return badFlag("ssd_dir", "%q: %v", dir, err)
	}
	if !st.IsDir() {
		return badFlag("ssd_dir", "%q is not a directory", dir)
	}
	if err := unix.Access(dir, unix.W_OK|unix.X_OK); err != nil {
		return badFlag("ssd_dir", "%q is not writable: %v", dir, err)
	}
	// access(2) ignores read-only mounts for root in some setups; prove it
	// by creating and removing a probe file.
	f, err := os.CreateTemp(dir, ".tierstore-probe-*")
	if err != nil {
		return badFlag("ssd_dir", "%q is not writable: %v", dir, err)
	}
	name := f.Name()
	f.Close()
	if err := os.Remove(name); err != nil {
		return badFlag("ssd_dir", "%q: removing probe file: %v", dir, err)
	}
	return nil
}
