package master

import (
	"fmt"
	"log/slog"
	"math"
	"time"

	"github.com/tierstore/tierstore/admission"
	"github.com/tierstore/tierstore/internal/grant"
)

// Config configures a Service (and the tierstore-master binary; the flag of
// each field is in its comment, units as in Mooncake). DefaultConfig returns
// the defaults; Validate checks a Config.
type Config struct {
	RPCAddress  string // rpc_address (binary only)
	RPCPort     int    // rpc_port (binary only)
	MetricsPort int    // metrics_port, 0 = off (binary only)

	DefaultKVLeaseTTL   time.Duration // default_kv_lease_ttl (ms), read lease granted by lookups
	DefaultKVSoftPinTTL time.Duration // default_kv_soft_pin_ttl (ms)
	ClientTTL           time.Duration // client_ttl (s): a node silent this long is expired

	EvictionHighWatermarkRatio float64 // eviction_high_watermark_ratio, (0,1]
	// AllowEvictSoftPinned (allow_evict_soft_pinned_objects): soft-pinned
	// objects may be evicted (after every unpinned candidate). When false
	// they are never evicted while the pin lasts.
	AllowEvictSoftPinned bool
	EvictionRatio        float64 // eviction_ratio, (0,1]

	EnableOffload                 bool          // enable_offload
	OffloadOnEvict                bool          // offload_on_evict
	OffloadReadAdmissionThreshold int64         // offload_read_admission_threshold, 0 = off
	OffloadingQueueLimit          int           // offloading_queue_limit: tasks per node (queued + in flight)
	OffloadTaskTimeout            time.Duration // offload_task_timeout (s): unanswered task is dropped, pin released

	PutStartDiscardTimeout time.Duration // put_start_discard_timeout_sec (s): abandoned PROCESSING replica reclaimed
	// PutStartMaxWait (put_start_max_wait, ms): how long a PutStart waits
	// for DRAM room when eviction cannot make room at once (leased objects
	// without another readable replica, offload tasks in flight), bounded
	// also by the caller's context. 0: fail at once with
	// NO_AVAILABLE_HANDLE.
	PutStartMaxWait time.Duration
	// StartupGrace (startup_grace, ms): for this long after the Service
	// starts (a master's start or restart, a new HA leader's term) a
	// PutStart that finds no segment mounted (the nodes have not mounted
	// again yet) waits for a mount instead of answering
	// NO_AVAILABLE_HANDLE ("no segment mounted") at once; bounded also by
	// put_start_max_wait and the caller's context, and off when
	// put_start_max_wait is 0. 0: answer at once.
	StartupGrace time.Duration
	// RebuildWindow (rebuild_window, ms): a Service that starts with
	// metadata to rebuild from the nodes (a new HA leader's term; a single
	// master restarted on the removal log of a predecessor, --state_dir)
	// answers the misses of clients' lookups and puts "ask again"
	// (UNAVAILABLE_IN_CURRENT_STATUS) for this long after its start, and
	// while a segment waits for its node's re-registration, instead of
	// reporting an object missing that a node has not re-registered yet
	// (rebuild.go). 0: only while a segment waits.
	RebuildWindow time.Duration
	// PrefetchBudget (prefetch_budget, MB/s of 10^6 bytes): the rate of
	// object bytes prefetch may queue for promotion (ExistKey and
	// BatchExistKey hits on SSD-only objects, Prefetch), in bursts of one
	// second's worth; beyond it a prefetch is refused (prefetch.go). 0
	// turns prefetch off.
	PrefetchBudget float64

	// MonitorInterval is the period of the background loop (liveness,
	// sweep, reclaim, watermark eviction). 0 disables the loop: tests call
	// Service.Tick themselves.
	MonitorInterval time.Duration
	// Shards is the number of metadata shards (rounded up to a power of 2).
	// A reconcile's ReconcileEnd scans the shards holding the slots where
	// the node lost keys (reconcile.go), so the shard is the unit of that
	// scan: at 50M objects 1024 shards hold ~48,800 objects each and 5,000
	// lost keys touch every one, 65536 (the most, the default) hold ~760.
	// The walks that run per eviction round or per tick visit only the
	// shards holding DRAM (or held) objects (shardSet), and a small SSD
	// re-registration chunk does not walk the shards (groupByShard), so
	// a put that evicts for room costs at 65536 shards about what it cost
	// at 1024 before those changes (12 against 11 us; 1.4-1.8x what 1024
	// shards cost with them: a round locks more shards of fewer DRAM
	// objects each) and 11-19x less than at 65536 before
	// (BenchmarkPutUnderEviction, BenchmarkShardWalks; docs/benchmarks.md,
	// "Shard indexes: 65536 shards by default"). An empty shard costs 64
	// bytes (4.8 MiB of RSS at 65536).
	Shards int

	// AdmissionFlags are the admission flags beyond Mooncake's three
	// (offload_admission_policy, ssd_write_budget, ...).
	AdmissionFlags admission.Options
	// Admission overrides the policy chosen by the offload flags.
	Admission admission.Policy
	Clock     Clock
	Logger    *slog.Logger
	// HA makes the Service one elected leader of highly available masters
	// (ha.go, docs/ha.md); zero: a single master.
	HA HAConfig

	// Removals keeps the removal log durably (docs/design.md, invariant
	// 10): a FileRemovalStore for a single master (--state_dir), etcd for
	// highly available masters. nil: in memory, so a restart loses it and
	// the nodes then drop every copy they hold (safe, and empty).
	Removals RemovalStore
	// RemovalLogRetention (removal_log_retention): entries are kept at
	// least this long; a node away longer comes back empty.
	RemovalLogRetention time.Duration
	// RemovalLogLimit (removal_log_limit): at most this many entries are
	// kept (the oldest are trimmed first).
	RemovalLogLimit int

	// Grants (grant_secret_file, binary: grant.LoadFile): when set, every
	// replica a lookup answers (GetReplicaList and its batch) carries a
	// read grant for that read, valid until the lookup's read lease ends,
	// and every DRAM range PutStart answers a write grant for that put,
	// valid until the put's discard deadline, signed with the file's
	// newest secret; nodes with the same file refuse reads and writes
	// without one (docs/security.md). nil: no grants.
	Grants *grant.Keys
}

// DefaultConfig returns the documented defaults.
func DefaultConfig() Config {
	return Config{
		RPCAddress:                 "127.0.0.1",
		RPCPort:                    50051,
		MetricsPort:                9003,
		DefaultKVLeaseTTL:          5 * time.Second,
		DefaultKVSoftPinTTL:        30 * time.Minute,
		ClientTTL:                  10 * time.Second,
		EvictionHighWatermarkRatio: 0.90,
		EvictionRatio:              0.05,
		AllowEvictSoftPinned:       true,
		OffloadingQueueLimit:       50000,
		OffloadTaskTimeout:         300 * time.Second,
		PutStartDiscardTimeout:     30 * time.Second,
		PutStartMaxWait:            5 * time.Second,
		StartupGrace:               10 * time.Second,
		RebuildWindow:              2 * time.Second,
		PrefetchBudget:             512,
		MonitorInterval:            time.Second,
		Shards:                     65536,
		AdmissionFlags:             admission.DefaultOptions(),
		RemovalLogRetention:        time.Hour,
		RemovalLogLimit:            1_000_000,
	}
}

// Validate checks c and returns an error wrapping ErrBadConfig that names the
// offending flag.
func (c Config) Validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{ErrBadConfig}, args...)...)
	}
	if c.RPCPort < 0 || c.RPCPort > 65535 {
		return bad("rpc_port must be in 0..65535, got %d", c.RPCPort)
	}
	if c.MetricsPort < 0 || c.MetricsPort > 65535 {
		return bad("metrics_port must be in 0..65535, got %d", c.MetricsPort)
	}
	if c.DefaultKVLeaseTTL <= 0 {
		return bad("default_kv_lease_ttl must be > 0, got %v", c.DefaultKVLeaseTTL)
	}
	if c.DefaultKVSoftPinTTL <= 0 {
		return bad("default_kv_soft_pin_ttl must be > 0, got %v", c.DefaultKVSoftPinTTL)
	}
	if c.ClientTTL <= 0 {
		return bad("client_ttl must be > 0, got %v", c.ClientTTL)
	}
	if !(c.EvictionHighWatermarkRatio > 0 && c.EvictionHighWatermarkRatio <= 1) {
		return bad("eviction_high_watermark_ratio must be in (0, 1], got %v", c.EvictionHighWatermarkRatio)
	}
	if !(c.EvictionRatio > 0 && c.EvictionRatio <= 1) {
		return bad("eviction_ratio must be in (0, 1], got %v", c.EvictionRatio)
	}
	if c.OffloadingQueueLimit <= 0 {
		return bad("offloading_queue_limit must be > 0, got %d", c.OffloadingQueueLimit)
	}
	if c.OffloadTaskTimeout <= 0 {
		return bad("offload_task_timeout must be > 0, got %v", c.OffloadTaskTimeout)
	}
	if c.PutStartDiscardTimeout <= 0 {
		return bad("put_start_discard_timeout_sec must be > 0, got %v", c.PutStartDiscardTimeout)
	}
	if c.PrefetchBudget < 0 || math.IsNaN(c.PrefetchBudget) || math.IsInf(c.PrefetchBudget, 0) {
		return bad("prefetch_budget must be a finite MB/s >= 0, got %v", c.PrefetchBudget)
	}
	if c.PutStartMaxWait < 0 {
		return bad("put_start_max_wait must be >= 0, got %v", c.PutStartMaxWait)
	}
	if c.StartupGrace < 0 {
		return bad("startup_grace must be >= 0, got %v", c.StartupGrace)
	}
	if c.MonitorInterval < 0 {
		return bad("Config.MonitorInterval (no flag) must be >= 0, got %v", c.MonitorInterval)
	}
	if c.Shards <= 0 || c.Shards > 1<<16 {
		return bad("metadata_shards must be in 1..65536, got %d", c.Shards)
	}
	if c.RemovalLogRetention <= 0 {
		return bad("removal_log_retention must be > 0, got %v", c.RemovalLogRetention)
	}
	if c.RemovalLogLimit <= 0 {
		return bad("removal_log_limit must be > 0, got %d", c.RemovalLogLimit)
	}
	if c.RebuildWindow < 0 {
		return bad("rebuild_window must be >= 0, got %v", c.RebuildWindow)
	}
	if c.Admission == nil {
		if _, err := admission.FromSettings(c.admissionSettings()); err != nil {
			return fmt.Errorf("%w: %w", ErrBadConfig, err)
		}
	}
	return nil
}

func (c Config) admissionSettings() admission.Settings {
	return admission.Settings{
		EnableOffload:  c.EnableOffload,
		OffloadOnEvict: c.OffloadOnEvict,
		ReadThreshold:  c.OffloadReadAdmissionThreshold,
		Options:        c.AdmissionFlags,
	}
}
