package node

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/tierstore/tierstore/client"
	"github.com/tierstore/tierstore/internal/errcode"
	"github.com/tierstore/tierstore/masterapi"
)

// failingStarts is a master whose n-th BatchPutStart call fails as a
// transport failure would.
type failingStarts struct {
	masterapi.ClientAPI
	calls, failAt atomic.Int64
}

var errInjected = errcode.Errorf(errcode.RPCFail, "test: injected BatchPutStart failure")

func (f *failingStarts) BatchPutStart(ctx context.Context, reqs []masterapi.PutStartRequest) ([]masterapi.PutStartResult, error) {
	if f.calls.Add(1) == f.failAt.Load() {
		return nil, errInjected
	}
	return f.ClientAPI.BatchPutStart(ctx, reqs)
}

// A BatchPut of 40 objects through a real node's data plane goes in
// several pipelined waves: every valid item is stored with its bytes, an
// invalid item or an existing key fails alone, and a wave whose
// BatchPutStart fails fails only its own items, leaving nothing behind
// (they are absent and can be put again), while the waves around it are
// stored.
func TestBatchPutWaves(t *testing.T) {
	m := newMaster(t, testMasterConfig())
	n := startTestNode(t, m, "127.0.0.1:0", nil)
	fm := &failingStarts{ClientAPI: m}
	c := newTestClient(t, client.Config{Master: fm})
	ctx := context.Background()
	if err := c.Put(ctx, "k7", rnd(100)); err != nil {
		t.Fatal(err)
	}
	const items, size = 40, 256 << 10
	keys := make([]string, items)
	vals := make([][]byte, items)
	for i := range keys {
		keys[i], vals[i] = fmt.Sprintf("k%d", i), rnd(size)
	}
	keys[3], vals[5] = "", nil // bad key, empty value
	check := func(errs []error, failed func(i int) bool) {
		t.Helper()
		for i, err := range errs {
			switch {
			case i == 3:
				if !errors.Is(err, errcode.ErrInvalidKey) {
					t.Errorf("item 3 (empty key): %v", err)
				}
			case i == 5:
				if !errors.Is(err, errcode.ErrInvalidParams) {
					t.Errorf("item 5 (empty value): %v", err)
				}
			case i == 7:
				if !errors.Is(err, errcode.ErrObjectExists) {
					t.Errorf("item 7 (existing key): %v", err)
				}
			case failed(i):
				if !errors.Is(err, errInjected) {
					t.Errorf("item %d of the failed wave: %v", i, err)
				}
				if ok, err := c.Exists(ctx, keys[i]); ok || err != nil {
					t.Errorf("item %d of the failed wave left behind: %v %v", i, ok, err)
				}
			default:
				if err != nil {
					t.Errorf("item %d: %v", i, err)
					continue
				}
				if got, err := c.Get(ctx, keys[i]); err != nil || !bytes.Equal(got, vals[i]) {
					t.Errorf("item %d read back: %v", i, err)
				}
			}
		}
	}
	// The second wave (after the first 8 items of 2 MiB) fails.
	fm.failAt.Store(2)
	errs := c.BatchPut(ctx, keys, vals)
	var failedWave []int
	for i, err := range errs {
		if errors.Is(err, errInjected) {
			failedWave = append(failedWave, i)
		}
	}
	if len(failedWave) == 0 || failedWave[0] < 8 || failedWave[len(failedWave)-1] == items-1 {
		t.Fatalf("the failed wave's items: %v (want a middle wave)", failedWave)
	}
	inFailed := func(i int) bool { return i >= failedWave[0] && i <= failedWave[len(failedWave)-1] }
	check(errs, inFailed)
	if calls := fm.calls.Load(); calls < 3 {
		t.Fatalf("%d BatchPutStart calls for 10 MiB: the batch did not go in waves", calls)
	}
	// Put again: the failed wave's items are stored now, the others exist.
	fm.failAt.Store(0)
	again := c.BatchPut(ctx, keys, vals)
	for _, i := range failedWave {
		if again[i] != nil {
			t.Errorf("item %d put again: %v", i, again[i])
		} else if got, err := c.Get(ctx, keys[i]); err != nil || !bytes.Equal(got, vals[i]) {
			t.Errorf("item %d put again, read back: %v", i, err)
		}
	}
	// One write per stored item (37 valid ones and the first k7).
	if st := n.Stats(); st.PeerWrites != int64(items-3+1) {
		t.Errorf("node got %d writes, want %d", st.PeerWrites, items-3+1)
	}
}
