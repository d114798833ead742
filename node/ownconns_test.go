package node

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/tierstore/tierstore/client"
)

// TestSingleTransfersReadTheirReplies: through a master over gRPC and a
// node over the data plane, a single put's write and a single get's read
// go on a data connection of their own, whose reply the calling goroutine
// reads (wire.WithCallerReads: no hand-off from a reader goroutine), kept
// for the next single transfer; batch puts and batch gets share the
// pool's connections. Every value comes back with its own bytes,
// concurrent single gets included.
func TestSingleTransfersReadTheirReplies(t *testing.T) {
	m := newMaster(t, testMasterConfig())
	addr := serveMaster(t, m)
	n := startTestNode(t, m, "127.0.0.1:0", nil)
	c := newTestClient(t, client.Config{MasterAddr: addr, PreferredNode: n.Name()})
	ctx := context.Background()
	own := func() int64 { return c.ReadStats().OwnConns }

	const readers = 4
	keys := make([]string, readers)
	vals := make([][]byte, readers)
	for i := range keys {
		keys[i], vals[i] = fmt.Sprintf("b%d", i), rnd(256<<10+i)
	}
	for i, err := range c.BatchPut(ctx, keys, vals) {
		if err != nil {
			t.Fatalf("batch put %s: %v", keys[i], err)
		}
	}
	if d := own(); d != 0 {
		t.Fatalf("a batch put dialled %d connections of its own", d)
	}
	single := rnd(1<<20 + 3)
	if err := c.Put(ctx, "single", single); err != nil {
		t.Fatal(err)
	}
	if d := own(); d != 1 {
		t.Fatalf("a single put dialled %d connections of its own, want 1", d)
	}
	parts := [][]byte{make([]byte, 1000), make([]byte, 512<<10), make([]byte, len(single))}
	if got, err := c.GetIntoParts(ctx, "single", parts); err != nil || got != len(single) ||
		!bytes.Equal(bytes.Join(parts, nil)[:len(single)], single) {
		t.Fatalf("GetIntoParts: %d, %v", got, err)
	}
	if d := own(); d != 1 {
		t.Fatalf("%d connections of their own after a single get, want 1 (the put's, reused)", d)
	}
	bufs := make([][]byte, readers)
	for i := range bufs {
		bufs[i] = make([]byte, len(vals[i]))
	}
	if _, errs := c.BatchGetInto(ctx, keys, bufs); errs[0] != nil || !bytes.Equal(bufs[0], vals[0]) {
		t.Fatalf("batch get: %v", errs[0])
	}
	if d := own(); d != 1 {
		t.Fatalf("%d connections of their own after a batch get, want 1", d)
	}
	var wg sync.WaitGroup
	errs := make([]error, readers)
	for r := range readers {
		wg.Go(func() {
			buf := make([]byte, 300<<10)
			for j := range 20 {
				k := (r + j) % readers
				got, err := c.GetInto(ctx, keys[k], buf)
				if err == nil && !bytes.Equal(buf[:got], vals[k]) {
					err = fmt.Errorf("get %s: other bytes", keys[k])
				}
				if err != nil {
					errs[r] = err
					return
				}
			}
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if d := own(); d < 1 || d > 1+readers {
		t.Fatalf("%d connections of their own after %d concurrent readers", d, readers)
	}
}
