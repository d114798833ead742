package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/tierstore/tierstore/client"
	"github.com/tierstore/tierstore/internal/testkit"
	"github.com/tierstore/tierstore/master"
	"github.com/tierstore/tierstore/mastergrpc"
)

// Issue 9 item 8: a node started before its master waits for it, saying
// so, and starts once the master is there: start order does not matter.
func TestStartWaitsForMaster(t *testing.T) {
	addr := testkit.FreeAddr(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rm, err := mastergrpc.Dial(ctx, addr)
	if err != nil {
		t.Fatal(err)
	}
	defer rm.Close()
	logs := &syncBuffer{}
	cfg := testNodeConfig("127.0.0.1:0")
	cfg.Logger = slog.New(slog.NewTextHandler(logs, nil))
	type started struct {
		n   *Node
		err error
	}
	done := make(chan started, 1)
	go func() {
		n, err := Start(ctx, cfg, rm)
		done <- started{n, err}
	}()
	for len(logs.lines("waiting for the master")) == 0 {
		select {
		case s := <-done:
			t.Fatalf("Start returned before the master was up: %v", s.err)
		case <-ctx.Done():
			t.Fatal("the node never said it waits for the master")
		case <-time.After(5 * time.Millisecond):
		}
	}
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	m := newMaster(t, testMasterConfig())
	srv := master.NewServer(m)
	go func() { _ = srv.Serve(lis) }()
	defer srv.Stop()
	s := <-done
	if s.err != nil {
		t.Fatalf("Start after the master came up: %v", s.err)
	}
	defer s.n.Close()
	c := newTestClient(t, client.Config{Master: m})
	if err := c.Put(ctx, "k", rnd(1000)); err != nil {
		t.Fatalf("put on the late-mounted node: %v", err)
	}
	// Bounded by ctx: no master at all gives up with a clear error.
	short, cancelShort := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancelShort()
	rm2, err := mastergrpc.Dial(short, testkit.FreeAddr(t))
	if err != nil {
		t.Fatal(err)
	}
	defer rm2.Close()
	if n, err := Start(short, testNodeConfig(""), rm2); err == nil || !strings.Contains(err.Error(), "gave up waiting for the master") {
		if n != nil {
			n.Close()
		}
		t.Fatalf("no master: %v", err)
	}
}

// Issue 9 item 8: a second node on an --ssd_dir in use says so, naming the
// directory and the holder, instead of "resource temporarily unavailable";
// once the first node is gone the directory is free again.
func TestSecondNodeOnSSDDirInUse(t *testing.T) {
	m := newMaster(t, testMasterConfig())
	cfg := testNodeConfig("")
	cfg.EnableOffload, cfg.SSDDir, cfg.Backend = true, t.TempDir(), "pwrite"
	first, err := Start(context.Background(), cfg, m)
	if err != nil {
		t.Fatal(err)
	}
	_, err = Start(context.Background(), cfg, m)
	want := fmt.Sprintf("--ssd_dir %s is in use by another node (pid %d)", cfg.SSDDir, os.Getpid())
	if !errors.Is(err, ErrSSDDirInUse) || !strings.Contains(err.Error(), want) {
		t.Fatalf("second node: %v, want %q", err, want)
	}
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}
	again, err := Start(context.Background(), cfg, m)
	if err != nil {
		t.Fatalf("after the first node closed: %v", err)
	}
	again.Close()
}
