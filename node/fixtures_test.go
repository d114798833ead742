// Fixtures the node's tests share: a master, a node, a client, a master
// served over gRPC, random bytes.

package node

import (
	"context"
	"crypto/rand"
	"log/slog"
	"net"
	"testing"
	"time"

	"github.com/tierstore/tierstore/client"
	"github.com/tierstore/tierstore/master"
	"github.com/tierstore/tierstore/masterapi"
)

var quiet = slog.New(slog.DiscardHandler)

func testMasterConfig() master.Config {
	mc := master.DefaultConfig()
	mc.EnableOffload = true
	mc.MonitorInterval = 0 // tests call Tick when they need it
	mc.Logger = quiet
	return mc
}

func newMaster(t *testing.T, mc master.Config) *master.Service {
	t.Helper()
	m, err := master.New(mc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

// testNodeConfig: small segment; heartbeat and reconcile effectively off
// (tests drive OffloadNow / Reconcile), fast ping.
func testNodeConfig(listen string) Config {
	c := DefaultConfig()
	c.Listen = listen
	c.Memory = 16 << 20
	c.HeartbeatInterval = time.Hour
	c.OffloadWake = false
	c.ReconcileInterval = time.Hour
	c.PingInterval = 20 * time.Millisecond
	c.Logger = quiet
	return c
}

func startTestNode(t *testing.T, m masterapi.API, listen string, tr SSDTier) *Node {
	t.Helper()
	var opts []Option
	if tr != nil {
		opts = append(opts, WithTier(tr))
	}
	n, err := Start(context.Background(), testNodeConfig(listen), m, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	return n
}

// newMemNode is the usual fixture of a node test: a master of
// testMasterConfig, and a node on it whose SSD tier is a fresh memTier.
func newMemNode(t *testing.T) (*master.Service, *memTier, *Node) {
	t.Helper()
	m := newMaster(t, testMasterConfig())
	tr := newMemTier()
	return m, tr, startTestNode(t, m, "", tr)
}

func newTestClient(t *testing.T, cfg client.Config) *client.Client {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = quiet
	}
	c, err := client.New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func rnd(n int) []byte {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return b
}

// serveMaster exposes m over gRPC on 127.0.0.1 and returns its address.
func serveMaster(t *testing.T, m masterapi.API) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := master.NewServer(m)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	return lis.Addr().String()
}
