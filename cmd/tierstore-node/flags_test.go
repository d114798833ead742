package main

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
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
		c.MetricsPort != 0 || c.HeartbeatInterval != time.Second || c.EnableOffload {
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
	if o, err := parseFlags([]string{"--master=m:1", "--memory=1048576"}, io.Discard); err != nil || o.node.Memory != 1<<20 {
		t.Fatalf("plain bytes: %v %d", err, o.node.Memory)
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
		{[]string{m, "--ssd_capacity=64MiB"}, "bucket_size_limit"}, // the 256MiB default bucket does not fit
		{[]string{m, "--bucket_eviction=random"}, "bucket_eviction"},
		{[]string{m, "--compression=zstd"}, "compression"},
		{[]string{m, "--metrics_port=70000"}, "metrics_port"},
		{[]string{m, "--metrics_port=-1"}, "metrics_port"},
		{[]string{m, "--heartbeat_interval=0s"}, "heartbeat_interval"},
		{[]string{m, "--heartbeat_interval=soon"}, "heartbeat_interval"},
		{[]string{m, "--no_such_flag"}, "no_such_flag"},
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
