package embedded_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/tierstore/tierstore/client"
	"github.com/tierstore/tierstore/embedded"
)

// Embedded mode: master, node and client in one process. The object is put
// into DRAM, offloaded to SSD, its DRAM replica dropped, and read back from
// SSD.
func ExampleNew() {
	ctx := context.Background()
	cfg := embedded.DefaultConfig() // offload on, temporary SSD directory
	quiet := slog.New(slog.DiscardHandler)
	cfg.Master.Logger, cfg.Node.Logger = quiet, quiet
	cfg.Node.Memory = 64 << 20
	e, err := embedded.New(ctx, cfg)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer e.Close()

	if err := e.Client.Put(ctx, "layer0/block42", []byte("kv-cache bytes")); err != nil {
		fmt.Println(err)
		return
	}
	e.Node.OffloadNow() // the heartbeat would do it within --heartbeat_interval
	res, _ := e.Client.EvictDRAM(ctx, nil, true)
	v, err := e.Client.Get(ctx, "layer0/block42")
	fmt.Printf("dropped %d DRAM replica; read %q from SSD (%d SSD reads)\n", res.Dropped, v, e.Client.ReadStats().LocalSSD)
	// Output: dropped 1 DRAM replica; read "kv-cache bytes" from SSD (1 SSD reads)
}

// Errors are checked with errors.Is against the sentinels package client
// re-exports; CodeOf gives the Mooncake code.
func Example_errors() {
	ctx := context.Background()
	cfg := embedded.DefaultConfig()
	quiet := slog.New(slog.DiscardHandler)
	cfg.Master.Logger, cfg.Node.Logger = quiet, quiet
	cfg.Node.Memory = 16 << 20
	e, err := embedded.New(ctx, cfg)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer e.Close()
	_, err = e.Client.Get(ctx, "never/put")
	fmt.Println(errors.Is(err, client.ErrObjectNotFound), client.CodeOf(err), int32(client.CodeOf(err)))
	// Output: true OBJECT_NOT_FOUND -704
}
