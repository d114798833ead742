package node

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/tierstore/tierstore/client"
	"github.com/tierstore/tierstore/internal/tlsconf"
	"github.com/tierstore/tierstore/master"
)

// BenchmarkTLSCost measures the data plane with and without mutual TLS,
// side by side: one node on a loopback socket, the master in process (so
// only the data plane differs), a client without a local node. Get and
// put of 1 MiB, batch get of 16 x 1 MiB. Compare MB/s of tls against
// plaintext in the same run (docs/benchmarks.md).
func BenchmarkTLSCost(b *testing.B) {
	ca, err := tlsconf.NewCA("bench ca", time.Hour)
	if err != nil {
		b.Fatal(err)
	}
	p := &testPKI{t: b, ca: ca, dir: b.TempDir()}
	nodeSrc, err := tlsconf.Load(p.files("node", tlsconf.Node))
	if err != nil {
		b.Fatal(err)
	}
	cliFiles := p.files("client", tlsconf.Client)
	const size = 1 << 20
	for _, mode := range []string{"plaintext", "tls"} {
		mc := master.DefaultConfig()
		mc.Logger = quiet
		m, err := master.New(mc)
		if err != nil {
			b.Fatal(err)
		}
		nc := DefaultConfig()
		nc.Listen, nc.Memory, nc.Logger, nc.HeartbeatInterval = "127.0.0.1:0", 512<<20, quiet, time.Hour
		cc := client.Config{Master: m, Logger: quiet}
		if mode == "tls" {
			nc.TLS, cc.TLS = nodeSrc, cliFiles
		}
		n, err := Start(context.Background(), nc, m)
		if err != nil {
			b.Fatal(err)
		}
		c, err := client.New(context.Background(), cc)
		if err != nil {
			b.Fatal(err)
		}
		ctx := context.Background()
		val := rnd(size)
		keys := make([]string, 16)
		for i := range keys {
			keys[i] = fmt.Sprintf("k%d", i)
			if err := c.Put(ctx, keys[i], val); err != nil {
				b.Fatal(err)
			}
		}
		b.Run("get/"+mode, func(b *testing.B) {
			b.SetBytes(size)
			for i := 0; b.Loop(); i++ {
				if _, err := c.Get(ctx, keys[i%len(keys)]); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run("batchget16/"+mode, func(b *testing.B) {
			b.SetBytes(size * int64(len(keys)))
			for b.Loop() {
				if _, errs := c.BatchGet(ctx, keys); errs[0] != nil {
					b.Fatal(errs[0])
				}
			}
		})
		b.Run("put/"+mode, func(b *testing.B) {
			b.SetBytes(size)
			for i := 0; b.Loop(); i++ {
				k := fmt.Sprintf("p%d", i)
				if err := c.Put(ctx, k, val); err != nil {
					b.Fatal(err)
				}
				if err := m.Remove(ctx, k, true); err != nil {
					b.Fatal(err)
				}
			}
		})
		c.Close()
		n.Close()
		m.Close()
	}
}
