package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/tierstore/tierstore/client"
	"github.com/tierstore/tierstore/internal/errcode"
	"github.com/tierstore/tierstore/master"
)

// serveMaster runs a real master on a gRPC listener of 127.0.0.1.
func serveMaster(t *testing.T) string {
	t.Helper()
	cfg := master.DefaultConfig()
	cfg.Logger = slog.New(slog.DiscardHandler)
	m, err := master.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := master.NewServer(m)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	return lis.Addr().String()
}

func mustOpen(t *testing.T, cfg string) (int64, *handle) {
	t.Helper()
	id, err := open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	h, err := lookup(id)
	if err != nil {
		t.Fatal(err)
	}
	return id, h
}

// Bad configurations are INVALID_PARAMS naming the field, and open nothing.
func TestOpenBadConfig(t *testing.T) {
	addr := serveMaster(t)
	for cfg, field := range map[string]string{
		`{}`: "master",
		fmt.Sprintf(`{"master":%q,"segment_size":-1}`, addr):                "segment_size",
		fmt.Sprintf(`{"master":%q,"ssd_dir":"/tmp"}`, addr):                 "ssd_dir",
		fmt.Sprintf(`{"master":%q,"ssd_capacity":-5}`, addr):                "ssd_capacity",
		fmt.Sprintf(`{"master":%q,"timeout":-1}`, addr):                     "timeout",
		fmt.Sprintf(`{"master":%q,"log_level":"loud"}`, addr):               "log_level",
		fmt.Sprintf(`{"master":%q,"segmentsize":1}`, addr):                  "segmentsize",
		`{"master":"etcd://"}`:                                              "etcd",
		fmt.Sprintf(`{"master":%q,"segment_size":1,"ssd_dir":"rel"}`, addr): "ssd_dir",
	} {
		handlesMu.Lock()
		before := len(handles)
		handlesMu.Unlock()
		_, err := open(cfg)
		if codeOf(err) != int64(errcode.InvalidParams) || !strings.Contains(err.Error(), field) {
			t.Errorf("%s: %v (code %d), want INVALID_PARAMS naming %s", cfg, err, codeOf(err), field)
		}
		handlesMu.Lock()
		after := len(handles)
		handlesMu.Unlock()
		if after != before {
			t.Errorf("%s: a failed open left a handle", cfg)
		}
	}
}

// An in-process node serves the pool; close unmounts it (its objects leave
// the pool), later calls on the handle are INVALID_PARAMS "client is
// closed", and a new open in the same process works.
func TestOpenCloseReopen(t *testing.T) {
	addr := serveMaster(t)
	ctx := context.Background()
	_, pure := mustOpen(t, fmt.Sprintf(`{"master":%q}`, addr))
	for round := range 2 {
		id, h := mustOpen(t, fmt.Sprintf(`{"master":%q,"segment_size":%d}`, addr, 16<<20))
		if h.n == nil || !strings.HasPrefix(h.hostname, "127.0.0.1:") || strings.HasSuffix(h.hostname, ":0") {
			t.Fatalf("round %d: node %v, hostname %q", round, h.n, h.hostname)
		}
		key := fmt.Sprintf("k%d", round)
		val := bytes.Repeat([]byte{byte(round + 1)}, 1<<20)
		if err := h.c.Put(ctx, key, val); err != nil {
			t.Fatal(err)
		}
		info, err := h.c.Lookup(ctx, key)
		if err != nil || len(info.Replicas) != 1 || info.Replicas[0].Endpoint != h.hostname {
			t.Fatalf("round %d: %+v %v: not placed on the in-process node", round, info, err)
		}
		// Another client reads it through the node's listener.
		if got, err := pure.c.Get(ctx, key); err != nil || !bytes.Equal(got, val) {
			t.Fatalf("round %d: remote read: %v", round, err)
		}
		if err := closeHandle(id); err != nil {
			t.Fatal(err)
		}
		err = use(id, func(*handle) error { return nil })
		if codeOf(err) != int64(errcode.InvalidParams) || !strings.Contains(err.Error(), "closed") {
			t.Fatalf("call after close: %v", err)
		}
		if err := closeHandle(id); err != nil {
			t.Fatalf("second close: %v", err)
		}
		_, err = pure.c.Get(ctx, key)
		if !errors.Is(err, errcode.ErrObjectNotFound) && !errors.Is(err, errcode.ErrReplicaGone) {
			t.Fatalf("round %d: after close the object is still readable: %v", round, err)
		}
	}
}

// codeOf maps a closed client to INVALID_PARAMS and keeps other codes.
func TestCodeOf(t *testing.T) {
	if codeOf(nil) != 0 || codeOf(client.ErrClosed) != -600 || codeOf(errcode.ErrObjectNotFound) != -704 {
		t.Fatal(codeOf(nil), codeOf(client.ErrClosed), codeOf(errcode.ErrObjectNotFound))
	}
}

// slowProxy forwards connections to addr, each only after delay (a master
// whose handshake is slow: a loaded machine).
func slowProxy(t *testing.T, addr string, delay time.Duration) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lis.Close() })
	go func() {
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				time.Sleep(delay)
				up, err := net.Dial("tcp", addr)
				if err != nil {
					return
				}
				defer up.Close()
				go func() { _, _ = io.Copy(up, c) }()
				_, _ = io.Copy(c, up)
			}()
		}
	}()
	return lis.Addr().String()
}

// A master whose connection takes longer than the reconnect backoff's
// first delay to set up still answers: the connection attempt is bounded
// by a connect timeout, not by the backoff delay (100 ms).
func TestSlowMasterHandshake(t *testing.T) {
	addr := slowProxy(t, serveMaster(t), 400*time.Millisecond)
	id, h := mustOpen(t, fmt.Sprintf(`{"master":%q,"timeout":10}`, addr))
	defer closeHandle(id)
	ctx, cancel := h.ctx()
	defer cancel()
	if _, err := h.c.Stats(ctx); err != nil {
		t.Fatalf("stats through a slow handshake: %v", err)
	}
}

// A master that does not answer fails open (RPC_FAIL naming the address)
// within the timeout, and leaves no handle.
func TestOpenUnreachableMaster(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	lis.Close() // nothing listens there now
	_, err = open(fmt.Sprintf(`{"master":%q,"timeout":2}`, addr))
	if err == nil || !strings.Contains(err.Error(), addr) || codeOf(err) >= 0 {
		t.Fatalf("open of an unreachable master: %v (code %d)", err, codeOf(err))
	}
	t.Logf("%v (code %d)", err, codeOf(err))
}
