package node

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/tierstore/tierstore/client"
	"github.com/tierstore/tierstore/masterapi"
)

// countingEnds counts the PutEnd and BatchPutEnd calls (and the items of
// the batches) that reach a master.
type countingEnds struct {
	masterapi.API
	singles, batches, items atomic.Int64
}

func (c *countingEnds) PutEnd(ctx context.Context, key string, token uint64) error {
	c.singles.Add(1)
	return c.API.PutEnd(ctx, key, token)
}

func (c *countingEnds) BatchPutEnd(ctx context.Context, puts []masterapi.PutRef) ([]error, error) {
	c.batches.Add(1)
	c.items.Add(int64(len(puts)))
	return c.API.BatchPutEnd(ctx, puts)
}

// TestConcurrentSinglePutsShareEnds: single puts from concurrent
// goroutines of one client, through a master over gRPC and a node over
// the data plane, share BatchPutEnds (client/coalesce.go), and every one
// of them is stored, complete, with its own bytes; a put of a key that
// exists still fails with ErrObjectExists among them.
func TestConcurrentSinglePutsShareEnds(t *testing.T) {
	m := newMaster(t, testMasterConfig())
	cm := &countingEnds{API: m}
	addr := serveMaster(t, cm)
	n := startTestNode(t, m, "127.0.0.1:0", nil)
	c := newTestClient(t, client.Config{MasterAddr: addr, PreferredNode: n.Name()})
	ctx := context.Background()
	const writers, each = 8, 60
	vals := make([][]byte, writers*each)
	for i := range vals {
		vals[i] = rnd(4096 + i)
	}
	if err := c.Put(ctx, "w0-0", vals[0]); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make([]error, len(vals))
	for w := range writers {
		wg.Go(func() {
			for j := range each {
				i := w*each + j
				errs[i] = c.Put(ctx, fmt.Sprintf("w%d-%d", w, j), vals[i])
			}
		})
	}
	wg.Wait()
	for i, err := range errs {
		switch {
		case i == 0 && !errors.Is(err, client.ErrObjectExists):
			t.Errorf("put of an existing key: %v, want ErrObjectExists", err)
		case i != 0 && err != nil:
			t.Errorf("put %d: %v", i, err)
		}
	}
	if cm.batches.Load() == 0 {
		t.Fatalf("%d single puts from %d goroutines made %d PutEnds and no BatchPutEnd", len(vals), writers, cm.singles.Load())
	}
	if got, want := cm.singles.Load()+cm.items.Load(), int64(len(vals)); got != want {
		t.Fatalf("%d PutEnds and batch items for %d successful puts", got, want)
	}
	for i, v := range vals {
		got, err := c.Get(ctx, fmt.Sprintf("w%d-%d", i/each, i%each))
		if err != nil || !bytes.Equal(got, v) {
			t.Fatalf("get %d: %v (bytes equal %v)", i, err, bytes.Equal(got, v))
		}
	}
	t.Logf("%d puts: %d PutEnds, %d BatchPutEnds of %d items", len(vals), cm.singles.Load(), cm.batches.Load(), cm.items.Load())
}
