package clientmetrics_test

import (
	"context"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/tierstore/tierstore/client"
	"github.com/tierstore/tierstore/client/clientmetrics"
	"github.com/tierstore/tierstore/master"
	"github.com/tierstore/tierstore/node"
)

// A client with Metrics as its Observer fills the histograms by tier: puts
// and gets against the node of its process are dram_local.
func TestHistogramsByTier(t *testing.T) {
	quiet := slog.New(slog.DiscardHandler)
	mc := master.DefaultConfig()
	mc.MonitorInterval, mc.Logger = 0, quiet
	m, err := master.New(mc)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	nc := node.DefaultConfig()
	nc.Listen, nc.Memory, nc.Logger = "", 8<<20, quiet
	n, err := node.Start(context.Background(), nc, m)
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	met := clientmetrics.New(prometheus.Labels{"client": "test"})
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(met)
	c, err := client.New(context.Background(), client.Config{Master: m, LocalNode: n, Observer: met, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	if err := c.Put(ctx, "k", []byte("value")); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if _, err := c.Get(ctx, "k"); err != nil {
			t.Fatal(err)
		}
	}
	rec := httptest.NewRecorder()
	promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorHandling: promhttp.HTTPErrorOnError}).ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	out := rec.Body.String()
	if rec.Code != 200 {
		t.Fatalf("scrape: %d %s", rec.Code, out)
	}
	for _, line := range []string{
		`tierstore_client_get_seconds_count{client="test",tier="dram_local"} 3`,
		`tierstore_client_put_seconds_count{client="test",tier="dram_local"} 1`,
	} {
		if !strings.Contains(out, line) {
			t.Errorf("missing %q in\n%s", line, out)
		}
	}
	// Out-of-range tiers are ignored, not a panic.
	met.ObserveGet(client.Tier(200), time.Second)
	met.ObservePut(client.Tier(200), time.Second)
}
