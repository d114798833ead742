package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/tierstore/tierstore/internal/peerlimit"
	"github.com/tierstore/tierstore/internal/tlsconf"
	"github.com/tierstore/tierstore/master"
)

// durationFlag accepts a plain number in the flag's Mooncake unit
// (milliseconds or seconds) or a Go duration string ("11s", "1500ms").
type durationFlag struct {
	d    *time.Duration
	unit time.Duration
}

func (f durationFlag) String() string {
	if f.d == nil {
		return ""
	}
	return strconv.FormatInt(int64(*f.d/f.unit), 10)
}

func (f durationFlag) Set(s string) error {
	s = strings.TrimSpace(s)
	if n, err := strconv.ParseInt(s, 10, 64); err == nil {
		if n < 0 || n > int64(1<<62)/int64(f.unit) {
			return fmt.Errorf("%q out of range", s)
		}
		*f.d = time.Duration(n) * f.unit
		return nil
	}
	if n, err := strconv.ParseFloat(s, 64); err == nil {
		if n < 0 || n*float64(f.unit) > float64(1<<62) {
			return fmt.Errorf("%q out of range", s)
		}
		*f.d = time.Duration(n * float64(f.unit))
		return nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		unit := "milliseconds"
		if f.unit == time.Second {
			unit = "seconds"
		}
		return fmt.Errorf("%q is neither a number of %s nor a duration like 11s", s, unit)
	}
	*f.d = d
	return nil
}

// options are the settings of the binary that are not master.Config fields.
type options struct {
	logLevel slog.Level
	// ignored lists Mooncake flags that were given but have no effect here
	// (logged at start-up).
	ignored []string
	// ha: high availability (ha.go).
	ha haOptions
	// stateDir (state_dir): where a single master keeps its removal log.
	stateDir string
	// tls: tls_cert, tls_key, tls_ca (empty: plaintext).
	tls tlsconf.Files
	// limits: the bounds per peer of the rpc port (max_conns_per_peer,
	// max_streams_per_conn, tls_handshake_timeout).
	limits peerlimit.Limits
	// cpuProfile (cpuprofile): file of the CPU profile from start-up to
	// shutdown (empty: none).
	cpuProfile string
	// grantSecretFile (grant_secret_file): the grant secret (empty:
	// lookups and PutStart answers carry no grants).
	grantSecretFile string
}

// parseFlags parses the command line (without the program name) into a
// master.Config, with Mooncake's flag names and units. Every error is one
// line that names the flag.
func parseFlags(args []string) (master.Config, error) {
	cfg, _, err := parseAll(args, io.Discard)
	return cfg, err
}

const usageHeader = `usage: tierstore-master [--name=value ...]

Runs the tierstore master (gRPC metadata service). Flag names and units are
Mooncake's; a duration flag takes a number in its unit or a Go duration
(11s, 1500ms). Flags:
`

// parseAll parses args. On -h/--help it writes the usage with every default
// to helpOut and returns an error wrapping flag.ErrHelp; every other error
// wraps errUsage and is one line naming the flag.
func parseAll(args []string, helpOut io.Writer) (master.Config, options, error) {
	cfg := master.DefaultConfig()
	opt := options{logLevel: slog.LevelInfo, limits: peerlimit.Defaults()}
	fs := flag.NewFlagSet("tierstore-master", flag.ContinueOnError)
	// Parse errors are reported by the caller as one line; the flag
	// package's own usage dump is suppressed.
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}

	fs.StringVar(&cfg.RPCAddress, "rpc_address", cfg.RPCAddress, "address the gRPC service binds")
	fs.IntVar(&cfg.RPCPort, "rpc_port", cfg.RPCPort, "gRPC port (0: any free port)")
	fs.IntVar(&cfg.MetricsPort, "metrics_port", cfg.MetricsPort, "Prometheus /metrics port on rpc_address (0: off)")
	fs.Var(durationFlag{&cfg.DefaultKVLeaseTTL, time.Millisecond}, "default_kv_lease_ttl", "read lease granted by lookups, in ms or as a duration")
	fs.Var(durationFlag{&cfg.DefaultKVSoftPinTTL, time.Millisecond}, "default_kv_soft_pin_ttl", "soft pin TTL, in ms or as a duration")
	fs.Var(durationFlag{&cfg.ClientTTL, time.Second}, "client_ttl", "a node silent this long is expired, in s or as a duration")
	fs.Float64Var(&cfg.EvictionHighWatermarkRatio, "eviction_high_watermark_ratio", cfg.EvictionHighWatermarkRatio, "segment use that starts DRAM eviction, (0,1]")
	fs.Float64Var(&cfg.EvictionRatio, "eviction_ratio", cfg.EvictionRatio, "fraction of evictable objects dropped per round, (0,1]")
	fs.BoolVar(&cfg.EnableOffload, "enable_offload", cfg.EnableOffload, "queue offload tasks to nodes' SSD tier")
	fs.BoolVar(&cfg.OffloadOnEvict, "offload_on_evict", cfg.OffloadOnEvict, "offload objects when DRAM eviction picks them instead of at put")
	fs.Int64Var(&cfg.OffloadReadAdmissionThreshold, "offload_read_admission_threshold", cfg.OffloadReadAdmissionThreshold, "offload after N demand lookups (0: off)")
	fs.IntVar(&cfg.OffloadingQueueLimit, "offloading_queue_limit", cfg.OffloadingQueueLimit, "offload tasks per node, queued plus in flight")
	fs.Var(durationFlag{&cfg.OffloadTaskTimeout, time.Second}, "offload_task_timeout", "unanswered offload task is dropped after this, in s or as a duration")
	fs.Var(durationFlag{&cfg.PutStartDiscardTimeout, time.Second}, "put_start_discard_timeout_sec", "abandoned put is reclaimed after this, in s or as a duration")
	fs.Var(durationFlag{&cfg.PutStartMaxWait, time.Millisecond}, "put_start_max_wait", "how long a put waits for DRAM room eviction cannot make at once, in ms or as a duration (0: fail at once)")
	fs.Var(durationFlag{&cfg.StartupGrace, time.Millisecond}, "startup_grace", "how long after the master starts (or becomes the HA leader) a put that finds no segment mounted waits for the nodes to mount again, within put_start_max_wait, in ms or as a duration (0: fail at once)")
	fs.Var(durationFlag{&cfg.RebuildWindow, time.Millisecond}, "rebuild_window", "after a start with objects to rebuild from the nodes (an HA leader's term, a restart on a state_dir a predecessor wrote), lookups and puts that would miss are answered 'ask again' (-1010) this long, and while a node re-registers its DRAM objects, in ms or as a duration")
	fs.Float64Var(&cfg.PrefetchBudget, "prefetch_budget", cfg.PrefetchBudget, "MB/s of objects a lookup hit (ExistKey, BatchExistKey) or a Prefetch may queue for promotion from SSD to DRAM, in bursts of one second's worth; admitted by the tinylfu frequency test (dram_promotion_min_freq); 0: no prefetch")
	fs.IntVar(&cfg.Shards, "metadata_shards", cfg.Shards, "metadata shards")
	cfg.AdmissionFlags.RegisterFlags(fs)
	fs.BoolVar(&cfg.AllowEvictSoftPinned, "allow_evict_soft_pinned_objects", cfg.AllowEvictSoftPinned, "soft-pinned objects may be evicted after unpinned ones")
	fs.StringVar(&opt.cpuProfile, "cpuprofile", "", "write a CPU profile (runtime/pprof) from start-up to shutdown to this file (empty: none)")
	fs.StringVar(&opt.stateDir, "state_dir", "", "directory of the removal log of a single master, so that removals stay final across its restarts (empty: in memory; a restart then empties the cluster). Not with enable_ha: leaders keep it in etcd")
	fs.Var(durationFlag{&cfg.RemovalLogRetention, time.Second}, "removal_log_retention", "removal log entries are kept at least this long; a node away longer comes back empty, in s or as a duration")
	fs.IntVar(&cfg.RemovalLogLimit, "removal_log_limit", cfg.RemovalLogLimit, "most removal log entries kept (the oldest are trimmed first)")
	logLevel := fs.String("log_level", "info", "debug, info, warn or error")

	// Mooncake master flags accepted for command-line compatibility.
	port := fs.Int("port", 0, "deprecated alias of rpc_port (Mooncake)")
	fs.Int("rpc_thread_num", 0, "accepted, no effect: gRPC serves each call on its own goroutine")
	fs.Int("max_threads", 0, "accepted, no effect (deprecated in Mooncake)")
	fs.Bool("enable_metric_reporting", true, "accepted, no effect: metrics are served on metrics_port")
	fs.Bool("rpc_enable_tcp_no_delay", true, "accepted, no effect: Go sets TCP_NODELAY")
	fs.Int("rpc_conn_timeout_seconds", 0, "accepted, no effect")
	allocator := fs.String("memory_allocator", "offset", "segment allocator: offset (the only one)")
	registerHAFlags(fs, &opt.ha)
	opt.tls.Register(fs)
	fs.StringVar(&opt.grantSecretFile, "grant_secret_file", "", "file of the grant secret (64 hex digits, e.g. from head -c32 /dev/urandom | xxd -p -c64; the same file on every master and node): every replica a lookup answers carries a grant for that read, every range PutStart answers a grant for that put's write, which the nodes check (docs/security.md). Re-read when it changes. Empty: no grants")
	opt.limits.Register(fs, false)

	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(helpOut, usageHeader)
			fs.SetOutput(helpOut)
			fs.PrintDefaults()
			return cfg, opt, err
		}
		return cfg, opt, fmt.Errorf("%w: %s", errUsage, oneLine(err))
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	for _, n := range []string{"rpc_thread_num", "max_threads", "enable_metric_reporting", "rpc_enable_tcp_no_delay", "rpc_conn_timeout_seconds"} {
		if set[n] {
			opt.ignored = append(opt.ignored, n)
		}
	}
	if set["port"] && !set["rpc_port"] {
		cfg.RPCPort = *port
	}
	if *allocator != "offset" {
		return cfg, opt, fmt.Errorf("%w: memory_allocator: only \"offset\" is supported, got %q", errUsage, *allocator)
	}
	if err := opt.ha.check(set, cfg); err != nil {
		return cfg, opt, err
	}
	if err := opt.limits.Check(); err != nil {
		return cfg, opt, fmt.Errorf("%w: %w", errUsage, err)
	}
	if err := opt.tls.Check(); err != nil {
		return cfg, opt, fmt.Errorf("%w: %s", errUsage, err)
	}
	if set["rebuild_window"] && !opt.ha.enable && !set["state_dir"] {
		return cfg, opt, fmt.Errorf("%w: rebuild_window: needs enable_ha=true or state_dir (without either a restarted master has nothing to rebuild: the nodes drop what they hold)", errUsage)
	}
	if opt.ha.enable && set["state_dir"] {
		return cfg, opt, fmt.Errorf("%w: state_dir: not with enable_ha=true (the leaders keep the removal log in etcd)", errUsage)
	}
	if fs.NArg() > 0 {
		return cfg, opt, fmt.Errorf("%w: unexpected argument %q (flags are --name=value)", errUsage, fs.Arg(0))
	}
	if err := opt.logLevel.UnmarshalText([]byte(*logLevel)); err != nil {
		return cfg, opt, fmt.Errorf("%w: log_level: %q is not debug, info, warn or error", errUsage, *logLevel)
	}
	if cfg.RPCAddress == "" {
		return cfg, opt, fmt.Errorf("%w: rpc_address must not be empty", errUsage)
	}
	if err := cfg.Validate(); err != nil {
		return cfg, opt, fmt.Errorf("%w: %s", errUsage, oneLine(err))
	}
	return cfg, opt, nil
}

// oneLine strips the flag package's "-" before names and joins lines.
func oneLine(err error) string {
	s := strings.ReplaceAll(err.Error(), "\n", "; ")
	s = strings.ReplaceAll(s, "flag -", "flag ")
	return strings.ReplaceAll(s, "defined: -", "defined: ")
}
