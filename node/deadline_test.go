package node

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tierstore/tierstore/client"
	"github.com/tierstore/tierstore/internal/errcode"
	"github.com/tierstore/tierstore/internal/testkit"
	"github.com/tierstore/tierstore/masterapi"
)

// cutMaster is a real master as a client sees it across a link that is cut
// right after PutStart (found by the partition scenarios, docs/reliability.md):
// while cut, PutEnd, PutRevoke and ReportBadReplica wait, as a request
// lost in a partition does, until the link heals (then they reach the
// master) or their context ends. lieCRC makes lookups answer a wrong
// CRC32C, so that every read fails its check and is reported.
type cutMaster struct {
	masterapi.ClientAPI
	lieCRC bool

	mu     sync.Mutex    // guards healed
	healed chan struct{} // closed when the link is whole; nil: never cut

	revokes, reports atomic.Int64 // calls that reached the master
}

func (m *cutMaster) cut() {
	m.mu.Lock()
	m.healed = make(chan struct{})
	m.mu.Unlock()
}

func (m *cutMaster) heal() {
	m.mu.Lock()
	close(m.healed)
	m.mu.Unlock()
}

// through waits until the link lets a request through, or ctx ends.
func (m *cutMaster) through(ctx context.Context) error {
	m.mu.Lock()
	h := m.healed
	m.mu.Unlock()
	if h == nil {
		return nil
	}
	select {
	case <-h:
		return nil
	case <-ctx.Done():
		return errcode.Errorf(errcode.ContextCanceled, "cut link: %v", ctx.Err())
	}
}

func (m *cutMaster) PutEnd(ctx context.Context, key string, token uint64) error {
	if err := m.through(ctx); err != nil {
		return err
	}
	return m.ClientAPI.PutEnd(ctx, key, token)
}

func (m *cutMaster) PutRevoke(ctx context.Context, key string, token uint64) error {
	if err := m.through(ctx); err != nil {
		return err
	}
	m.revokes.Add(1)
	return m.ClientAPI.PutRevoke(ctx, key, token)
}

func (m *cutMaster) ReportBadReplica(ctx context.Context, key string, crc uint32, r masterapi.Replica) error {
	if err := m.through(ctx); err != nil {
		return err
	}
	m.reports.Add(1)
	return m.ClientAPI.ReportBadReplica(ctx, key, crc, r)
}

func (m *cutMaster) GetReplicaList(ctx context.Context, key string) (masterapi.ObjectInfo, error) {
	info, err := m.ClientAPI.GetReplicaList(ctx, key)
	if m.lieCRC {
		info.CRC ^= 1
	}
	return info, err
}

// A put whose PutEnd is lost in a partition returns by its deadline: its
// revoke does not hold it 5 s longer, and is still delivered, in the
// background, once the link heals (the key can be put again at once).
func TestPutReturnsByItsDeadlineAcrossACutMaster(t *testing.T) {
	m := newMaster(t, testMasterConfig())
	startTestNode(t, m, "127.0.0.1:0", nil)
	cm := &cutMaster{ClientAPI: m}
	c := newTestClient(t, client.Config{Master: cm})
	cm.cut()
	const deadline = 300 * time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()
	start := time.Now()
	err := c.Put(ctx, "k", rnd(64<<10))
	took := time.Since(start)
	if !errors.Is(err, errcode.ErrContextCanceled) {
		t.Fatalf("put across a cut link: %v, want CONTEXT_CANCELED", err)
	}
	// Scheduling slack of a loaded machine; the revoke's own bound was 5 s.
	if took > deadline+1500*time.Millisecond {
		t.Fatalf("put with a deadline of %v returned after %v", deadline, took)
	}
	if n := cm.revokes.Load(); n != 0 {
		t.Fatalf("%d revokes reached the master through a cut link", n)
	}
	cm.heal()
	testkit.Eventually(t, "the background revoke", func() bool { return cm.revokes.Load() == 1 })
	if err := c.Put(context.Background(), "k", rnd(64<<10)); err != nil {
		t.Fatalf("put again after the revoke: %v", err)
	}
}

// A read whose every replica fails its checksum returns by its deadline
// although the master cannot be told (the report of the bad replica waits
// in a partition), and the report reaches the master once the link heals.
func TestGetReturnsByItsDeadlineWhenTheReportIsCut(t *testing.T) {
	m := newMaster(t, testMasterConfig())
	startTestNode(t, m, "127.0.0.1:0", nil)
	cm := &cutMaster{ClientAPI: m}
	c := newTestClient(t, client.Config{Master: cm})
	if err := c.Put(context.Background(), "k", rnd(64<<10)); err != nil {
		t.Fatal(err)
	}
	cm.lieCRC = true
	cm.cut()
	const deadline = 300 * time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()
	start := time.Now()
	_, err := c.Get(ctx, "k")
	took := time.Since(start)
	if !errors.Is(err, errcode.ErrChecksumMismatch) && !errors.Is(err, errcode.ErrContextCanceled) {
		t.Fatalf("get of bytes failing their check: %v", err)
	}
	if took > deadline+1500*time.Millisecond {
		t.Fatalf("get with a deadline of %v returned after %v (the report's bound is 2 s)", deadline, took)
	}
	cm.heal()
	testkit.Eventually(t, "the background report", func() bool { return cm.reports.Load() == 1 })
}

func (m *cutMaster) BatchPutEnd(ctx context.Context, puts []masterapi.PutRef) ([]error, error) {
	if err := m.through(ctx); err != nil {
		return nil, err
	}
	return m.ClientAPI.BatchPutEnd(ctx, puts)
}

func (m *cutMaster) BatchPutRevoke(ctx context.Context, puts []masterapi.PutRef) ([]error, error) {
	if err := m.through(ctx); err != nil {
		return nil, err
	}
	m.revokes.Add(int64(len(puts)))
	return m.ClientAPI.BatchPutRevoke(ctx, puts)
}

// A batch put whose BatchPutEnd is lost in a partition returns by its
// deadline and revokes its puts, in the background once the deadline has
// passed, as a put does: after the heal its keys can be put again at once
// (they are not left in progress until put_start_discard_timeout).
func TestBatchPutRevokesAcrossACutMaster(t *testing.T) {
	m := newMaster(t, testMasterConfig())
	startTestNode(t, m, "127.0.0.1:0", nil)
	cm := &cutMaster{ClientAPI: m}
	c := newTestClient(t, client.Config{Master: cm})
	keys := []string{"a", "b", "c"}
	vals := [][]byte{rnd(32 << 10), rnd(32 << 10), rnd(32 << 10)}
	cm.cut()
	const deadline = 300 * time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()
	start := time.Now()
	errs := c.BatchPut(ctx, keys, vals)
	if took := time.Since(start); took > deadline+1500*time.Millisecond {
		t.Fatalf("batch put with a deadline of %v returned after %v", deadline, took)
	}
	for i, err := range errs {
		if !errors.Is(err, errcode.ErrContextCanceled) {
			t.Fatalf("item %d across a cut link: %v, want CONTEXT_CANCELED", i, err)
		}
	}
	cm.heal()
	testkit.Eventually(t, "the background revoke", func() bool { return cm.revokes.Load() == int64(len(keys)) })
	for i, err := range c.BatchPut(context.Background(), keys, vals) {
		if err != nil {
			t.Fatalf("put %s again after the revoke: %v", keys[i], err)
		}
	}
}
