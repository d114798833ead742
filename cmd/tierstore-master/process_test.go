package main

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net/http"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tierstore/tierstore/internal/errcode"
	"github.com/tierstore/tierstore/internal/testkit"
	"github.com/tierstore/tierstore/masterapi"
	"github.com/tierstore/tierstore/mastergrpc"
)

// TestBinary builds tierstore-master, starts it as a real process on
// 127.0.0.1 with the flags of Mooncake #2799's report, talks gRPC to it, scrapes
// /metrics, sends SIGTERM and expects a clean exit.
func TestBinary(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a binary")
	}
	bin := filepath.Join(t.TempDir(), "tierstore-master")
	build := exec.Command("go", "build", "-o", bin, ".")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	mport := testkit.FreePort(t)
	cmd := exec.Command(bin, "--rpc_port=0", "--eviction_high_watermark_ratio=0.7", "--eviction_ratio=0.2",
		"--default_kv_lease_ttl=11000", "--enable_offload=true", "--offload_on_evict=true",
		"--metrics_port="+strconv.Itoa(mport))
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := false
	defer func() {
		if !exited {
			cmd.Process.Kill()
			cmd.Wait()
		}
	}()
	addrCh := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if a, ok := strings.CutPrefix(sc.Text(), "tierstore-master listening on "); ok {
				addrCh <- a
			}
		}
		io.Copy(io.Discard, stdout)
	}()
	var addr string
	select {
	case addr = <-addrCh:
	case <-time.After(30 * time.Second):
		t.Fatalf("no listening line; stderr:\n%s", stderr.String())
	}
	if !strings.HasPrefix(addr, "127.0.0.1:") {
		t.Fatalf("listening on %s, want 127.0.0.1", addr)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	r, err := mastergrpc.Dial(ctx, addr)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if p, err := r.Ping(ctx, "n1"); err != nil || p.Status != masterapi.NeedRemount || p.ClientTTL != 10*time.Second {
		t.Fatalf("ping: %+v %v", p, err)
	}
	if err := r.MountSegment(ctx, masterapi.MountRequest{Node: "n1", Endpoint: "127.0.0.1:1", Segment: "s", Size: 1 << 20}); err != nil {
		t.Fatal(err)
	}
	rep, err := r.PutStart(ctx, masterapi.PutStartRequest{Key: "k", Size: 100})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.PutEnd(ctx, "k", rep.PutToken); err != nil {
		t.Fatal(err)
	}
	info, err := r.GetReplicaList(ctx, "k")
	if err != nil || len(info.Replicas) != 1 {
		t.Fatalf("%+v %v", info, err)
	}
	if got := time.Until(info.LeaseDeadline); got < 9*time.Second || got > 12*time.Second {
		t.Fatalf("lease %v, want ~11s (default_kv_lease_ttl=11000 ms)", got)
	}
	if _, err := r.GetReplicaList(ctx, "absent"); !errors.Is(err, errcode.ErrObjectNotFound) {
		t.Fatalf("absent: %v", err)
	}

	resp, err := http.Get("http://127.0.0.1:" + strconv.Itoa(mport) + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, m := range []string{"tierstore_master_objects 1", `tierstore_master_errors_total{code="OBJECT_NOT_FOUND"} 1`, `tierstore_master_bytes{tier="dram"} 100`, "tierstore_master_offload_queue_depth 0"} {
		if !strings.Contains(string(body), m) {
			t.Errorf("metrics lack %q", m)
		}
	}

	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		exited = true
		if err != nil {
			t.Fatalf("exit after SIGTERM: %v\nstderr:\n%s", err, stderr.String())
		}
	case <-time.After(20 * time.Second):
		t.Fatal("no exit after SIGTERM")
	}
	if !strings.Contains(stderr.String(), "shutting down") {
		t.Fatalf("stderr:\n%s", stderr.String())
	}
}

// TestBinaryBadFlag: a bad flag stops start-up with exit status 2 and one
// line naming the flag.
func TestBinaryBadFlag(t *testing.T) {
	var out, errb strings.Builder
	if got := run([]string{"--eviction_ratio=3"}, &out, &errb); got != 2 || out.Len() != 0 ||
		strings.Count(errb.String(), "\n") != 1 || !strings.Contains(errb.String(), "eviction_ratio") {
		t.Fatalf("exit %d, stdout %q, stderr %q", got, out.String(), errb.String())
	}
}
