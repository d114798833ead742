package main

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/tierstore/tierstore/admission"
	"github.com/tierstore/tierstore/internal/peerlimit"
	"github.com/tierstore/tierstore/master"
)

// TestMooncake2799CommandLine: the command line of Mooncake #2799's report starts the
// master unchanged.
func TestMooncake2799CommandLine(t *testing.T) {
	cfg, err := parseFlags(strings.Fields("--rpc_port=39486 --eviction_high_watermark_ratio=0.7 --eviction_ratio=0.2 --default_kv_lease_ttl=11000 --enable_offload=true --offload_on_evict=true"))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.RPCPort != 39486 || cfg.EvictionHighWatermarkRatio != 0.7 || cfg.EvictionRatio != 0.2 ||
		cfg.DefaultKVLeaseTTL != 11*time.Second || !cfg.EnableOffload || !cfg.OffloadOnEvict {
		t.Fatalf("cfg %+v", cfg)
	}
	s, err := master.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, ok := s.Policy().(admission.OnEvict); !ok {
		t.Fatalf("policy %s", s.Policy().Name())
	}
}

func TestDefaults(t *testing.T) {
	cfg, err := parseFlags(nil)
	if err != nil {
		t.Fatal(err)
	}
	want := master.DefaultConfig()
	if cfg.RPCPort != 50051 || cfg.RPCAddress != "127.0.0.1" || cfg.MetricsPort != 9003 || cfg.ClientTTL != 10*time.Second ||
		cfg.EvictionHighWatermarkRatio != 0.90 || cfg.EvictionRatio != 0.05 || cfg.OffloadingQueueLimit != 50000 ||
		cfg.DefaultKVLeaseTTL != want.DefaultKVLeaseTTL || cfg.EnableOffload || cfg.OffloadOnEvict {
		t.Fatalf("defaults %+v", cfg)
	}
}

// TestEveryFlag sets every flag to a non-default value.
func TestEveryFlag(t *testing.T) {
	cases := []struct {
		arg   string
		check func(master.Config) bool
	}{
		{"--rpc_port=1234", func(c master.Config) bool { return c.RPCPort == 1234 }},
		{"--rpc_address=0.0.0.0", func(c master.Config) bool { return c.RPCAddress == "0.0.0.0" }},
		{"--metrics_port=0", func(c master.Config) bool { return c.MetricsPort == 0 }},
		{"--metrics_port=9100", func(c master.Config) bool { return c.MetricsPort == 9100 }},
		{"--default_kv_lease_ttl=11000", func(c master.Config) bool { return c.DefaultKVLeaseTTL == 11*time.Second }},
		{"--default_kv_lease_ttl=2s", func(c master.Config) bool { return c.DefaultKVLeaseTTL == 2*time.Second }},
		{"--default_kv_lease_ttl=1.5", func(c master.Config) bool { return c.DefaultKVLeaseTTL == 1500*time.Microsecond }},
		{"--default_kv_soft_pin_ttl=60000", func(c master.Config) bool { return c.DefaultKVSoftPinTTL == time.Minute }},
		{"--default_kv_soft_pin_ttl=1h", func(c master.Config) bool { return c.DefaultKVSoftPinTTL == time.Hour }},
		{"--client_ttl=20", func(c master.Config) bool { return c.ClientTTL == 20*time.Second }},
		{"--client_ttl=2s", func(c master.Config) bool { return c.ClientTTL == 2*time.Second }},
		{"--client_ttl=500ms", func(c master.Config) bool { return c.ClientTTL == 500*time.Millisecond }},
		{"--eviction_high_watermark_ratio=1", func(c master.Config) bool { return c.EvictionHighWatermarkRatio == 1 }},
		{"--eviction_ratio=0.5", func(c master.Config) bool { return c.EvictionRatio == 0.5 }},
		{"--enable_offload", func(c master.Config) bool { return c.EnableOffload }},
		{"--enable_offload=false", func(c master.Config) bool { return !c.EnableOffload }},
		{"--offloading_queue_limit=7", func(c master.Config) bool { return c.OffloadingQueueLimit == 7 }},
		{"--offload_task_timeout=60", func(c master.Config) bool { return c.OffloadTaskTimeout == time.Minute }},
		{"--put_start_discard_timeout_sec=5", func(c master.Config) bool { return c.PutStartDiscardTimeout == 5*time.Second }},
		{"--metadata_shards=64", func(c master.Config) bool { return c.Shards == 64 }},
		{"--put_start_max_wait=250", func(c master.Config) bool { return c.PutStartMaxWait == 250*time.Millisecond }},
		{"--put_start_max_wait=0", func(c master.Config) bool { return c.PutStartMaxWait == 0 }},
		{"--put_start_max_wait=2s", func(c master.Config) bool { return c.PutStartMaxWait == 2*time.Second }},
		{"--startup_grace=1500", func(c master.Config) bool { return c.StartupGrace == 1500*time.Millisecond }},
		{"--startup_grace=0", func(c master.Config) bool { return c.StartupGrace == 0 }},
		{"-rpc_port=1", func(c master.Config) bool { return c.RPCPort == 1 }},
		{"--port=4321", func(c master.Config) bool { return c.RPCPort == 4321 }},
		{"--allow_evict_soft_pinned_objects=false", func(c master.Config) bool { return !c.AllowEvictSoftPinned }},
		{"--rpc_thread_num=8", func(c master.Config) bool { return c.RPCPort == 50051 }},
		{"--max_threads=8", func(c master.Config) bool { return true }},
		{"--enable_metric_reporting=false", func(c master.Config) bool { return c.MetricsPort == 9003 }},
		{"--rpc_enable_tcp_no_delay=true", func(c master.Config) bool { return true }},
		{"--rpc_conn_timeout_seconds=5", func(c master.Config) bool { return true }},
		{"--memory_allocator=offset", func(c master.Config) bool { return true }},
		{"--enable_ha=false", func(c master.Config) bool { return true }},
	}
	for _, c := range cases {
		cfg, err := parseFlags([]string{c.arg})
		if err != nil || !c.check(cfg) {
			t.Errorf("%s: %v (cfg %+v)", c.arg, err, cfg)
		}
	}
	for _, args := range [][]string{
		{"--enable_offload=true", "--offload_read_admission_threshold=3"},
		{"--enable_offload=true", "--offload_on_evict=true"},
		{"--log_level=debug"},
		{"--rpc_port", "4000"}, // gflags-style separate value
	} {
		if _, err := parseFlags(args); err != nil {
			t.Errorf("%v: %v", args, err)
		}
	}
	cfg, _ := parseFlags([]string{"--enable_offload", "--offload_read_admission_threshold=3"})
	if cfg.OffloadReadAdmissionThreshold != 3 {
		t.Fatal("threshold")
	}
	// rpc_port wins over the deprecated port.
	if cfg, _ := parseFlags([]string{"--port=1", "--rpc_port=2"}); cfg.RPCPort != 2 {
		t.Fatalf("port vs rpc_port: %d", cfg.RPCPort)
	}
	if _, opt, err := parseAll([]string{"--max_conns_per_peer=5", "--max_streams_per_conn=7", "--tls_handshake_timeout=3s"}, io.Discard); err != nil ||
		opt.limits.ConnsPerPeer != 5 || opt.limits.StreamsPerConn != 7 || opt.limits.HandshakeTimeout != 3*time.Second {
		t.Fatalf("bounds per peer: %v %+v", err, opt.limits)
	}
	if _, opt, err := parseAll(nil, io.Discard); err != nil || opt.limits != peerlimit.Defaults() {
		t.Fatalf("bounds per peer, defaults: %v %+v", err, opt.limits)
	}
	if _, opt, _ := parseAll([]string{"--rpc_thread_num=4"}, io.Discard); len(opt.ignored) != 1 || opt.ignored[0] != "rpc_thread_num" {
		t.Fatalf("ignored %v", opt.ignored)
	}
}

// TestBadFlags: every bad value or combination is refused with one line
// naming the flag.
func TestBadFlags(t *testing.T) {
	cases := []struct{ arg, name string }{
		{"--rpc_port=x", "rpc_port"},
		{"--tls_cert=a.crt", "tls_key"},
		{"--tls_ca=ca.crt", "tls_cert"},
		{"--max_conns_per_peer=0", "max_conns_per_peer"},
		{"--max_streams_per_conn=-2", "max_streams_per_conn"},
		{"--tls_handshake_timeout=0s", "tls_handshake_timeout"},
		{"--max_peer_buffer=1GiB", "max_peer_buffer"}, // a node's flag only
		{"--rpc_port=70000", "rpc_port"},
		{"--rpc_port=-1", "rpc_port"},
		{"--rpc_address=", "rpc_address"},
		{"--metrics_port=-5", "metrics_port"},
		{"--metrics_port=99999", "metrics_port"},
		{"--default_kv_lease_ttl=abc", "default_kv_lease_ttl"},
		{"--default_kv_lease_ttl=0", "default_kv_lease_ttl"},
		{"--default_kv_lease_ttl=-5", "default_kv_lease_ttl"},
		{"--default_kv_lease_ttl=99999999999999999999", "default_kv_lease_ttl"},
		{"--default_kv_soft_pin_ttl=0", "default_kv_soft_pin_ttl"},
		{"--default_kv_soft_pin_ttl=x", "default_kv_soft_pin_ttl"},
		{"--client_ttl=abc", "client_ttl"},
		{"--client_ttl=0", "client_ttl"},
		{"--client_ttl=-1s", "client_ttl"},
		{"--eviction_high_watermark_ratio=0", "eviction_high_watermark_ratio"},
		{"--eviction_high_watermark_ratio=1.5", "eviction_high_watermark_ratio"},
		{"--eviction_high_watermark_ratio=NaN", "eviction_high_watermark_ratio"},
		{"--eviction_high_watermark_ratio=x", "eviction_high_watermark_ratio"},
		{"--eviction_ratio=0", "eviction_ratio"},
		{"--eviction_ratio=2", "eviction_ratio"},
		{"--eviction_ratio=-0.1", "eviction_ratio"},
		{"--enable_offload=maybe", "enable_offload"},
		{"--offload_on_evict=2", "offload_on_evict"},
		{"--offloading_queue_limit=0", "offloading_queue_limit"},
		{"--offloading_queue_limit=x", "offloading_queue_limit"},
		{"--offload_read_admission_threshold=-1", "offload_read_admission_threshold"},
		{"--offload_read_admission_threshold=x", "offload_read_admission_threshold"},
		{"--offload_task_timeout=0", "offload_task_timeout"},
		{"--put_start_discard_timeout_sec=0", "put_start_discard_timeout_sec"},
		{"--put_start_max_wait=-1", "put_start_max_wait"},
		{"--put_start_max_wait=x", "put_start_max_wait"},
		{"--startup_grace=-1", "startup_grace"},
		{"--metadata_shards=0", "metadata_shards"},
		{"--metadata_shards=70000", "metadata_shards"},
		{"--log_level=loud", "log_level"},
		{"--memory_allocator=cachelib", "memory_allocator"},
		{"--enable_ha=true", "enable_ha"},
		{"--allow_evict_soft_pinned_objects=x", "allow_evict_soft_pinned_objects"},
		{"--port=x", "port"},
		{"--rpc_thread_num=x", "rpc_thread_num"},
		{"--no_such_flag=1", "no_such_flag"},
		{"stray", "stray"},
	}
	for _, c := range cases {
		_, err := parseFlags([]string{c.arg})
		if err == nil {
			t.Errorf("%s accepted", c.arg)
			continue
		}
		msg := err.Error()
		if !strings.Contains(msg, c.name) || strings.Contains(msg, "\n") || !errors.Is(err, errUsage) {
			t.Errorf("%s: message %q does not name %s on one line", c.arg, msg, c.name)
		}
	}
	// Invalid combinations name both flags.
	for _, args := range [][]string{
		{"--enable_offload=true", "--offload_on_evict=true", "--offload_read_admission_threshold=2"},
	} {
		_, err := parseFlags(args)
		if err == nil || !strings.Contains(err.Error(), "offload_on_evict") || !strings.Contains(err.Error(), "offload_read_admission_threshold") {
			t.Errorf("%v: %v", args, err)
		}
	}
	for _, args := range [][]string{{"--offload_on_evict=true"}, {"--offload_read_admission_threshold=2"}} {
		_, err := parseFlags(args)
		if err == nil || !strings.Contains(err.Error(), "enable_offload") {
			t.Errorf("%v: %v", args, err)
		}
	}
}

// TestHelp: -h and --help print the usage with every flag and its default
// to stdout and exit 0; nothing goes to stderr.
func TestHelp(t *testing.T) {
	for _, arg := range []string{"-h", "--help", "-help"} {
		var out, errb bytes.Buffer
		code := run([]string{arg}, &out, &errb)
		if code != 0 || errb.Len() != 0 {
			t.Fatalf("%s: exit %d, stderr %q", arg, code, errb.String())
		}
		for _, want := range []string{"usage: tierstore-master", "-rpc_port", "(default 50051)", "-metadata_shards", "(default 65536)", "-default_kv_lease_ttl", "(default 5000)"} {
			if !strings.Contains(out.String(), want) {
				t.Errorf("%s: usage lacks %q:\n%s", arg, want, out.String())
			}
		}
	}
	// A bad flag is one line on stderr, exit 2, no usage dump.
	var out, errb bytes.Buffer
	if code := run([]string{"--metadata_shards=0"}, &out, &errb); code != 2 || out.Len() != 0 ||
		strings.Count(errb.String(), "\n") != 1 || !strings.Contains(errb.String(), "metadata_shards") {
		t.Fatalf("exit %d, stdout %q, stderr %q", code, out.String(), errb.String())
	}
}

// state_dir: not with enable_ha; a directory another master holds is
// refused at start naming the holder.
func TestStateDirFlag(t *testing.T) {
	if _, _, err := parseAll([]string{"--enable_ha=true", "--etcd_endpoints=127.0.0.1:2379", "--state_dir=/tmp/x"}, io.Discard); err == nil || !strings.Contains(err.Error(), "state_dir") {
		t.Fatalf("state_dir with enable_ha: %v", err)
	}
	if _, _, err := parseAll([]string{"--removal_log_limit=0"}, io.Discard); err == nil || !strings.Contains(err.Error(), "removal_log_limit") {
		t.Fatalf("removal_log_limit=0: %v", err)
	}
	dir := t.TempDir()
	cfg, opt, err := parseAll([]string{"--state_dir=" + dir, "--removal_log_retention=90s"}, io.Discard)
	if err != nil || opt.stateDir != dir || cfg.RebuildWindow != 2*time.Second {
		t.Fatalf("state_dir: %+v %v", opt, err)
	}
	// rebuild_window: with state_dir (a restart rebuilds from the nodes),
	// not alone (nothing to rebuild).
	if cfg, _, err := parseAll([]string{"--state_dir=" + dir, "--rebuild_window=750"}, io.Discard); err != nil || cfg.RebuildWindow != 750*time.Millisecond {
		t.Fatalf("rebuild_window with state_dir: %v %v", cfg.RebuildWindow, err)
	}
	if _, _, err := parseAll([]string{"--rebuild_window=750"}, io.Discard); err == nil || !strings.Contains(err.Error(), "rebuild_window") {
		t.Fatalf("rebuild_window alone: %v", err)
	}
}
