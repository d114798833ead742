package main

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tierstore/tierstore/node"
	"golang.org/x/sys/unix"
)

func TestParseFlagsDefaultsAndValues(t *testing.T) {
	dir := t.TempDir()
	o, err := parseFlags([]string{"--master", "127.0.0.1:50051"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	c := o.node
	if c.Listen != "127.0.0.1:0" || c.Memory != 1<<30 || c.Backend != "uring" || c.BucketKeysLimit != 500 ||
		c.BucketSizeLimit != 256<<20 || c.BucketEviction != "lru" || c.Compression != "none" ||
		c.MetricsPort != 0 || c.HeartbeatInterval != time.Second || c.EnableOffload || !c.DirectIO {
		t.Fatalf("defaults: %+v", c)
	}
	o, err = parseFlags([]string{
		"--master=127.0.0.1:1", "--listen=127.0.0.1:7000", "--memory=4GiB", "--enable_offload",
		"--ssd_dir=" + dir, "--ssd_capacity=10GiB", "--backend=pwrite", "--direct_io",
		"--bucket_keys_limit=7", "--bucket_size_limit=64MiB", "--bucket_eviction=fifo",
		"--compression=lz4", "--metrics_port=9100", "--heartbeat_interval=250ms",
	}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	c = o.node
	if o.master != "127.0.0.1:1" || c.Listen != "127.0.0.1:7000" || c.Memory != 4<<30 || !c.EnableOffload ||
		c.SSDDir != dir || c.SSDCapacity != 10<<30 || c.Backend != "pwrite" || !c.DirectIO ||
		c.BucketKeysLimit != 7 || c.BucketSizeLimit != 64<<20 || c.BucketEviction != "fifo" ||
		c.Compression != "lz4" || c.MetricsPort != 9100 || c.HeartbeatInterval != 250*time.Millisecond {
		t.Fatalf("parsed: %+v", c)
	}
	// --ssd_capacity alone: the bucket size follows it (an eighth), instead
	// of refusing a --bucket_size_limit nobody gave.
	for capacity, want := range map[string]int64{"128MiB": 16 << 20, "10GiB": 256 << 20, "100KiB": 12 << 10} {
		o, err := parseFlags([]string{"--master=m:1", "--ssd_capacity=" + capacity}, io.Discard)
		if err != nil || o.node.BucketSizeLimit != want {
			t.Fatalf("--ssd_capacity=%s alone: %v, bucket size %d, want %d", capacity, err, o.node.BucketSizeLimit, want)
		}
	}
	if l := o.node.Limits; l.ConnsPerPeer != 128 || l.StreamsPerConn != 256 || l.HandshakeTimeout != 10*time.Second ||
		l.PeerBuffer != 1<<30 || o.node.RequestsPerConn != 8 || o.node.DataFrameTimeout != 30*time.Second {
		t.Fatalf("bounds per peer, defaults: %+v, %d, %v", l, o.node.RequestsPerConn, o.node.DataFrameTimeout)
	}
	o, err = parseFlags([]string{"--master=m:1", "--max_conns_per_peer=9", "--max_streams_per_conn=17", "--tls_handshake_timeout=3s",
		"--max_peer_buffer=2GiB", "--max_requests_per_conn=4", "--data_frame_timeout=5s"}, io.Discard)
	if l := o.node.Limits; err != nil || l.ConnsPerPeer != 9 || l.StreamsPerConn != 17 || l.HandshakeTimeout != 3*time.Second ||
		l.PeerBuffer != 2<<30 || o.node.RequestsPerConn != 4 || o.node.DataFrameTimeout != 5*time.Second {
		t.Fatalf("bounds per peer: %v %+v", err, o.node)
	}
	if o, err := parseFlags([]string{"--master=m:1", "--bucket_size_limit=1GiB"}, io.Discard); err != nil || o.node.Limits.PeerBuffer != 2<<30 {
		t.Fatalf("--max_peer_buffer derived from --bucket_size_limit=1GiB: %v %d", err, o.node.Limits.PeerBuffer)
	}
	if o.node.OffloadTaskTimeout != 300*time.Second {
		t.Fatalf("offload_task_timeout default %v", o.node.OffloadTaskTimeout)
	}
	for arg, want := range map[string]time.Duration{"120": 2 * time.Minute, "1.5": 1500 * time.Millisecond, "90s": 90 * time.Second} {
		if o, err := parseFlags([]string{"--master=m:1", "--offload_task_timeout=" + arg}, io.Discard); err != nil || o.node.OffloadTaskTimeout != want {
			t.Fatalf("--offload_task_timeout=%s: %v %v", arg, err, o.node.OffloadTaskTimeout)
		}
	}
	if o, err := parseFlags([]string{"--master=m:1", "--memory=1048576"}, io.Discard); err != nil || o.node.Memory != 1<<20 {
		t.Fatalf("plain bytes: %v %d", err, o.node.Memory)
	}
	if o, err := parseFlags([]string{"--master=m:1", "--bucket_eviction=lru2", "--direct_io=false"}, io.Discard); err != nil ||
		o.node.BucketEviction != "lru2" || o.node.DirectIO {
		t.Fatalf("lru2, buffered: %v %+v", err, o.node)
	}
	if o, err := parseFlags([]string{"--master=m:1", "--bucket_eviction=worth", "--admission_sketch_interval=250ms"}, io.Discard); err != nil ||
		o.node.BucketEviction != "worth" || o.node.AdmissionSketchInterval != 250*time.Millisecond {
		t.Fatalf("worth eviction, sketch interval: %v %+v", err, o.node)
	}
	if o, err := parseFlags([]string{"--master=m:1"}, io.Discard); err != nil || o.node.AdmissionSketchInterval != 0 {
		t.Fatalf("admission_sketch_interval default: %v %v", err, o.node.AdmissionSketchInterval)
	}
}

func TestParseFlagsRefusesBadValues(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	ro := filepath.Join(dir, "ro")
	if err := os.Mkdir(ro, 0o555); err != nil {
		t.Fatal(err)
	}
	roWritable := os.Geteuid() == 0 // root writes through mode bits
	m := "--master=127.0.0.1:1"
	cases := []struct {
		args []string
		flag string // the error must name this flag
	}{
		{[]string{}, "master"},
		{[]string{m, "--memory=0"}, "memory"},
		{[]string{m, "--tls_cert=a.crt"}, "tls_key"},
		{[]string{m, "--tls_cert=a.crt", "--tls_key=a.key"}, "tls_ca"},
		{[]string{m, "--memory=-1"}, "memory"},
		{[]string{m, "--memory=4XiB"}, "memory"},
		{[]string{m, "--memory=1.5GiB"}, "memory"},
		{[]string{m, "--enable_offload"}, "enable_offload"},
		{[]string{m, "--enable_offload", "--ssd_dir=relative/dir"}, "ssd_dir"},
		{[]string{m, "--enable_offload", "--ssd_dir=" + filepath.Join(dir, "missing")}, "ssd_dir"},
		{[]string{m, "--enable_offload", "--ssd_dir=" + file}, "ssd_dir"},
		{[]string{m, "--ssd_dir=" + dir}, "ssd_dir"},
		{[]string{m, "--ssd_capacity=-5"}, "ssd_capacity"},
		{[]string{m, "--backend=spdk"}, "backend"},
		{[]string{m, "--bucket_keys_limit=0"}, "bucket_keys_limit"},
		{[]string{m, "--bucket_size_limit=0"}, "bucket_size_limit"},
		{[]string{m, "--bucket_size_limit=lots"}, "bucket_size_limit"},
		{[]string{m, "--ssd_capacity=64MiB", "--bucket_size_limit=256MiB"}, "bucket_size_limit"}, // an explicit bucket that does not fit
		{[]string{m, "--ssd_capacity=64MiB", "--bucket_size_limit=64MiB"}, "bucket_size_limit"},
		{[]string{m, "--ssd_capacity=16KiB"}, "ssd_capacity"},               // too small for any bucket
		{[]string{m, "--bucket_eviction=random"}, "lru, fifo, lru2, worth"}, // names the flag and the choices
		{[]string{m, "--bucket_eviction=value"}, "lru, fifo, lru2, worth"},  // the policy's name before it was worth
		{[]string{m, "--admission_sketch_interval=-1s"}, "admission_sketch_interval"},
		{[]string{m, "--compression=zstd"}, "compression"},
		{[]string{m, "--metrics_port=70000"}, "metrics_port"},
		{[]string{m, "--metrics_port=-1"}, "metrics_port"},
		{[]string{m, "--heartbeat_interval=0s"}, "heartbeat_interval"},
		{[]string{m, "--heartbeat_interval=soon"}, "heartbeat_interval"},
		{[]string{m, "--offload_task_timeout=0"}, "offload_task_timeout"},
		{[]string{m, "--offload_task_timeout=-3"}, "offload_task_timeout"},
		{[]string{m, "--offload_task_timeout=soon"}, "offload_task_timeout"},
		{[]string{m, "--offload_task_timeout=0s"}, "offload_task_timeout"},
		{[]string{m, "--no_such_flag"}, "no_such_flag"},
		{[]string{m, "--max_conns_per_peer=0"}, "max_conns_per_peer"},
		{[]string{m, "--max_streams_per_conn=-1"}, "max_streams_per_conn"},
		{[]string{m, "--tls_handshake_timeout=0s"}, "tls_handshake_timeout"},
		{[]string{m, "--max_peer_buffer=0"}, "max_peer_buffer"},
		{[]string{m, "--enable_offload", "--ssd_dir=" + dir, "--max_peer_buffer=1MiB"}, "max_peer_buffer"}, // less than a bucket's largest object
		{[]string{m, "--max_requests_per_conn=0"}, "max_requests_per_conn"},
		{[]string{m, "--data_frame_timeout=-1s"}, "data_frame_timeout"},
	}
	if !roWritable {
		cases = append(cases, struct {
			args []string
			flag string
		}{[]string{m, "--enable_offload", "--ssd_dir=" + ro}, "ssd_dir"})
	}
	for _, c := range cases {
		_, err := parseFlags(c.args, io.Discard)
		if err == nil {
			t.Errorf("%v: accepted", c.args)
			continue
		}
		if !strings.Contains(err.Error(), c.flag) {
			t.Errorf("%v: error %q does not name --%s", c.args, err, c.flag)
		}
	}
}

// TestMemoryAboveMachineLimit: --memory larger than physical memory (or the
// soft RLIMIT_DATA when it is lower) is refused with one line naming
// --memory and the limit.
func TestMemoryAboveMachineLimit(t *testing.T) {
	var si unix.Sysinfo_t
	if err := unix.Sysinfo(&si); err != nil {
		t.Fatal(err)
	}
	total := int64(si.Totalram) * int64(max(si.Unit, 1))
	m := "--master=127.0.0.1:1"
	limit, what, ok := node.MemoryLimit()
	if !ok || limit > total {
		t.Fatalf("MemoryLimit() = %d %q %v, physical memory %d", limit, what, ok, total)
	}
	_, err := parseFlags([]string{m, "--memory=" + strconv.FormatInt(limit+4096, 10)}, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "--memory") || !strings.Contains(err.Error(), what) ||
		!strings.Contains(err.Error(), strconv.FormatInt(limit, 10)) || strings.Contains(err.Error(), "\n") {
		t.Fatalf("--memory above %s (%d): %v", what, limit, err)
	}
	if _, err := parseFlags([]string{m, "--memory=" + strconv.FormatInt(min(limit, 1<<30), 10)}, io.Discard); err != nil {
		t.Fatalf("--memory at or below the limit: %v", err)
	}

	// A soft RLIMIT_DATA below physical memory is the limit. It is set on
	// this process for the duration of one parse, well above what the
	// process uses.
	var old unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_DATA, &old); err != nil {
		t.Fatal(err)
	}
	lim := uint64(total / 2)
	if old.Cur != unix.RLIM_INFINITY && old.Cur < lim {
		t.Skipf("RLIMIT_DATA already %d", old.Cur)
	}
	if lim < 2<<30 {
		t.Skipf("physical memory %d too small to set RLIMIT_DATA below it safely", total)
	}
	if err := unix.Setrlimit(unix.RLIMIT_DATA, &unix.Rlimit{Cur: lim, Max: old.Max}); err != nil {
		t.Skipf("setrlimit: %v", err)
	}
	_, err = parseFlags([]string{m, "--memory=" + strconv.FormatUint(lim+1<<20, 10)}, io.Discard)
	_, errOK := parseFlags([]string{m, "--memory=" + strconv.FormatUint(lim, 10)}, io.Discard)
	if rerr := unix.Setrlimit(unix.RLIMIT_DATA, &old); rerr != nil {
		t.Fatal(rerr)
	}
	if err == nil || !strings.Contains(err.Error(), "--memory") || !strings.Contains(err.Error(), "RLIMIT_DATA") {
		t.Fatalf("--memory above RLIMIT_DATA %d: %v", lim, err)
	}
	if errOK != nil {
		t.Fatalf("--memory equal to RLIMIT_DATA: %v", errOK)
	}
}

// TestHelp: -h/--help prints the usage with every flag and its default to
// stdout, exit 0; a bad value is one line on stderr naming the flag, exit 2,
// without the usage.
func TestHelp(t *testing.T) {
	for _, arg := range []string{"-h", "--help"} {
		var out, errb bytes.Buffer
		if code := run([]string{arg}, &out, &errb); code != 0 || errb.Len() != 0 {
			t.Fatalf("%s: exit %d, stderr %q", arg, code, errb.String())
		}
		for _, want := range []string{"usage: tierstore-node", "-memory", "(default 1GiB)", "-bucket_keys_limit", "(default 500)", "-master"} {
			if !strings.Contains(out.String(), want) {
				t.Errorf("%s: usage lacks %q:\n%s", arg, want, out.String())
			}
		}
	}
	for _, args := range [][]string{{"--master=m:1", "--memory=4XB"}, {"--master=m:1", "--no_such"}, {"--master=m:1", "stray"}} {
		var out, errb bytes.Buffer
		code := run(args, &out, &errb)
		name := strings.TrimPrefix(strings.SplitN(args[1], "=", 2)[0], "--")
		if code != 2 || out.Len() != 0 || strings.Count(errb.String(), "\n") != 1 || !strings.Contains(errb.String(), name) ||
			strings.Contains(errb.String(), "usage") {
			t.Errorf("%v: exit %d, stdout %q, stderr %q", args, code, out.String(), errb.String())
		}
	}
}
