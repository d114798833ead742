package node

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tierstore/tierstore/client"
	"github.com/tierstore/tierstore/internal/errcode"
	"github.com/tierstore/tierstore/internal/testkit"
	"github.com/tierstore/tierstore/master"
	"github.com/tierstore/tierstore/masterapi"
)

// The client's replica-location cache (client/loccache.go) against a real
// master over gRPC and real nodes on 127.0.0.1: each invariant of
// docs/design.md, "Replica-location cache".

// countingMaster counts the lookups a master serves.
type countingMaster struct {
	masterapi.API
	lookups atomic.Int64
}

func (m *countingMaster) GetReplicaList(ctx context.Context, key string) (masterapi.ObjectInfo, error) {
	m.lookups.Add(1)
	return m.API.GetReplicaList(ctx, key)
}

// Touch passes the touches of cached gets on (the gRPC server finds it by
// a type assertion, which the embedded API alone would not satisfy).
func (m *countingMaster) Touch(ctx context.Context, keys []string) error {
	return m.API.(masterapi.Toucher).Touch(ctx, keys)
}

func (m *countingMaster) BatchGetReplicaList(ctx context.Context, keys []string) ([]masterapi.ReplicaListResult, error) {
	m.lookups.Add(int64(len(keys)))
	return m.API.BatchGetReplicaList(ctx, keys)
}

// cacheRig: a master (counted) served over gRPC, nodes that pull the
// removal log only every second and are woken by the master (as in
// production), a writer client and a reader client, both remote.
type cacheRig struct {
	m      *master.Service
	cm     *countingMaster
	nodes  []*Node
	w, r   *client.Client
	master string
}

func newCacheRig(t *testing.T, mc master.Config, nodes int, tiers bool, rcfg client.Config) *cacheRig {
	t.Helper()
	g := &cacheRig{m: newMaster(t, mc)}
	g.cm = &countingMaster{API: g.m}
	g.master = serveMaster(t, g.cm)
	for range nodes {
		cfg := testNodeConfig("127.0.0.1:0")
		cfg.PingInterval = time.Second // the removal log's pull: the wake must not wait for it
		cfg.OffloadWake = true
		var opts []Option
		if tiers {
			opts = append(opts, WithTier(newMemTier()))
		}
		n, err := Start(context.Background(), cfg, g.m, opts...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { n.Close() })
		g.nodes = append(g.nodes, n)
	}
	g.w = newTestClient(t, client.Config{MasterAddr: g.master})
	rcfg.MasterAddr = g.master
	g.r = newTestClient(t, rcfg)
	return g
}

// Gets served from the location cache reach the master as touches: the
// object read through the cache is then the most recently used, and a DRAM
// eviction takes the other one. Without touches it takes the object the
// reader keeps reading, whose one lookup was the older.
func TestCachedGetsTouchTheMaster(t *testing.T) {
	clk := master.NewManualClock(time.Now())
	mc := testMasterConfig()
	mc.EnableOffload, mc.Clock, mc.EvictionRatio = false, clk, 0.5
	g := newCacheRig(t, mc, 1, false, client.Config{})
	ctx := context.Background()
	val := rnd(64 << 10)
	for _, k := range []string{"a", "b"} {
		if err := g.w.Put(ctx, k, val); err != nil {
			t.Fatal(err)
		}
		clk.Advance(time.Second)
	}
	buf := make([]byte, len(val))
	for _, k := range []string{"a", "b"} { // a's lookup is the older
		if _, err := g.r.GetInto(ctx, k, buf); err != nil {
			t.Fatal(err)
		}
		clk.Advance(time.Second)
	}
	for range 3 { // a again: from the cache, no lookup
		if _, err := g.r.GetInto(ctx, "a", buf); err != nil {
			t.Fatal(err)
		}
	}
	if n := g.cm.lookups.Load(); n != 2 {
		t.Fatalf("%d lookups, want 2 (a's repeated gets served by the cache)", n)
	}
	g.r.Close() // sends the touches not sent yet
	if st := g.r.ReadStats(); st.Touched != 1 || st.TouchFailures != 0 {
		t.Fatalf("touches: %d keys sent, %d calls failed; want 1 and 0", st.Touched, st.TouchFailures)
	}
	clk.Advance(5 * time.Second) // past both leases, within the node's TTL
	if n := g.m.EvictNow(); n != 1 {
		t.Fatalf("evicted %d objects, want 1 of 2", n)
	}
	for k, want := range map[string]bool{"a": true, "b": false} {
		if ok, err := g.m.ExistKey(ctx, k); err != nil || ok != want {
			t.Fatalf("after the eviction %s exists: %v (%v), want %v", k, ok, err, want)
		}
	}
}

func TestLocationCacheHitSkipsMaster(t *testing.T) {
	g := newCacheRig(t, testMasterConfig(), 1, false, client.Config{})
	ctx := context.Background()
	val := rnd(100 << 10)
	if err := g.w.Put(ctx, "k", val); err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		buf := make([]byte, len(val))
		n, err := g.r.GetInto(ctx, "k", buf)
		if err != nil || !bytes.Equal(buf[:n], val) {
			t.Fatalf("get %d: %v", i, err)
		}
	}
	if got := g.cm.lookups.Load(); got != 1 {
		t.Fatalf("5 gets of a key inside its lease looked it up %d times, want 1", got)
	}
	if st := g.r.ReadStats(); st.CacheHits != 4 || st.RemoteDRAM != 5 {
		t.Fatalf("read stats %+v", st)
	}
	// Batch reads use and fill it too.
	vals, errs := g.r.BatchGet(ctx, []string{"k", "k"})
	if errs[0] != nil || errs[1] != nil || !bytes.Equal(vals[0], val) || !bytes.Equal(vals[1], val) {
		t.Fatalf("batch get: %v", errs)
	}
	if got := g.cm.lookups.Load(); got != 1 {
		t.Fatalf("a batch get of cached keys looked them up (%d lookups)", got)
	}
}

func TestLocationCacheDisabled(t *testing.T) {
	g := newCacheRig(t, testMasterConfig(), 1, false, client.Config{LocationCacheEntries: -1})
	ctx := context.Background()
	val := rnd(1000)
	if err := g.w.Put(ctx, "k", val); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if got, err := g.r.Get(ctx, "k"); err != nil || !bytes.Equal(got, val) {
			t.Fatalf("get: %v", err)
		}
	}
	if got := g.cm.lookups.Load(); got != 3 {
		t.Fatalf("without a cache 3 gets looked the key up %d times", got)
	}
	if st := g.r.ReadStats(); st.CacheHits != 0 || st.CacheEntries != 0 {
		t.Fatalf("read stats %+v", st)
	}
}

// An entry is not used past its lease (less the margin): the next get
// looks the key up.
func TestLocationCacheExpiresWithLease(t *testing.T) {
	mc := testMasterConfig()
	mc.DefaultKVLeaseTTL = 400 * time.Millisecond
	g := newCacheRig(t, mc, 1, false, client.Config{})
	ctx := context.Background()
	val := rnd(1000)
	if err := g.w.Put(ctx, "k", val); err != nil {
		t.Fatal(err)
	}
	if _, err := g.r.Get(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	if _, err := g.r.Get(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	if got := g.cm.lookups.Load(); got != 1 {
		t.Fatalf("a get inside the lease looked the key up (%d lookups)", got)
	}
	time.Sleep(350 * time.Millisecond) // past the lease less its margin (300 ms)
	if got, err := g.r.Get(ctx, "k"); err != nil || !bytes.Equal(got, val) {
		t.Fatalf("get after the lease: %v", err)
	}
	if got := g.cm.lookups.Load(); got != 2 {
		t.Fatalf("a get after the lease's end used the cached answer (%d lookups, want 2)", got)
	}
}

func TestLocationCacheBounded(t *testing.T) {
	g := newCacheRig(t, testMasterConfig(), 1, false, client.Config{LocationCacheEntries: 4})
	ctx := context.Background()
	for i := range 10 {
		k := fmt.Sprint("k", i)
		if err := g.w.Put(ctx, k, rnd(100)); err != nil {
			t.Fatal(err)
		}
		if _, err := g.r.Get(ctx, k); err != nil {
			t.Fatal(err)
		}
		if st := g.r.ReadStats(); st.CacheEntries > 4 {
			t.Fatalf("%d entries in a cache of 4", st.CacheEntries)
		}
	}
	// The 4 most recent stay; the first was dropped.
	before := g.cm.lookups.Load()
	for _, k := range []string{"k9", "k8", "k7", "k6"} {
		if _, err := g.r.Get(ctx, k); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := g.r.Get(ctx, "k0"); err != nil {
		t.Fatal(err)
	}
	if got := g.cm.lookups.Load() - before; got != 1 {
		t.Fatalf("%d lookups for 4 recent keys and 1 dropped one, want 1", got)
	}
	// The byte bound: room for about two entries.
	h := newTestClient(t, client.Config{MasterAddr: g.master, LocationCacheBytes: 900})
	for i := range 10 {
		if _, err := h.Get(ctx, fmt.Sprint("k", i)); err != nil {
			t.Fatal(err)
		}
		if st := h.ReadStats(); st.CacheBytes > 900 || st.CacheEntries > 3 {
			t.Fatalf("cache of 900 bytes holds %d entries, %d bytes", st.CacheEntries, st.CacheBytes)
		}
	}
}

// After another client's forced Remove returned, a cached get answers
// OBJECT_NOT_FOUND, never the removed bytes: the removal waits until the
// node applied it, and the node refuses the range (DRAM) or the key (SSD).
// Also when a new object with the same bytes took the range (another key):
// the read names the put it expects.
func TestLocationCacheForcedRemoveByOtherClient(t *testing.T) {
	for _, where := range []string{"dram", "dram-reused", "ssd"} {
		t.Run(where, func(t *testing.T) {
			g := newCacheRig(t, testMasterConfig(), 1, where == "ssd", client.Config{})
			ctx := context.Background()
			val := rnd(64 << 10)
			if err := g.w.Put(ctx, "k", val); err != nil {
				t.Fatal(err)
			}
			if where == "ssd" {
				// A DRAM and an SSD replica: the cached read falls back
				// from the refused range to the SSD, which must refuse too.
				if got := g.nodes[0].OffloadNow(); got != 1 {
					t.Fatalf("offloaded %d", got)
				}
				if info, err := g.w.Lookup(ctx, "k"); err != nil || len(info.Replicas) != 2 {
					t.Fatalf("lookup: %+v %v", info, err)
				}
			}
			if got, err := g.r.Get(ctx, "k"); err != nil || !bytes.Equal(got, val) {
				t.Fatalf("first get: %v", err)
			}
			if err := g.w.Remove(ctx, "k", true); err != nil {
				t.Fatal(err)
			}
			if where == "dram-reused" {
				// Another key, the same bytes, most likely at the same range.
				if err := g.w.Put(ctx, "other", val); err != nil {
					t.Fatal(err)
				}
			}
			got, err := g.r.Get(ctx, "k")
			if !errors.Is(err, errcode.ErrObjectNotFound) {
				t.Fatalf("cached get after a forced remove: %d bytes, %v; want OBJECT_NOT_FOUND", len(got), err)
			}
			if st := g.r.ReadStats(); st.CacheStale != 1 {
				t.Fatalf("read stats %+v: the cached read should have failed once", st)
			}
		})
	}
}

// A key removed and put again by another client: the cached answer names
// the old object, the get returns the new value.
func TestLocationCacheRemovedAndPutAgain(t *testing.T) {
	g := newCacheRig(t, testMasterConfig(), 2, false, client.Config{})
	ctx := context.Background()
	old := rnd(64 << 10)
	if err := g.w.Put(ctx, "k", old); err != nil {
		t.Fatal(err)
	}
	if got, err := g.r.Get(ctx, "k"); err != nil || !bytes.Equal(got, old) {
		t.Fatalf("first get: %v", err)
	}
	if err := g.w.Remove(ctx, "k", true); err != nil {
		t.Fatal(err)
	}
	for i, val := range [][]byte{rnd(64 << 10), rnd(1000)} { // the same size (likely the same range), then another
		if i > 0 {
			if err := g.w.Remove(ctx, "k", true); err != nil {
				t.Fatal(err)
			}
		}
		if err := g.w.Put(ctx, "k", val); err != nil {
			t.Fatal(err)
		}
		got, err := g.r.Get(ctx, "k")
		if err != nil || !bytes.Equal(got, val) {
			t.Fatalf("get after the key was put again (%d): %d bytes, %v", i, len(got), err)
		}
	}
}

// Readers of cached keys while a writer removes (forced) and puts the keys
// again, each value naming its version: a get that starts after a version
// was published never returns an older one.
func TestLocationCacheConcurrentRemovePut(t *testing.T) {
	g := newCacheRig(t, testMasterConfig(), 2, false, client.Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	const keys, versions, size = 4, 6, 8 << 10
	value := func(v uint64) []byte {
		b := rnd(size)
		binary.LittleEndian.PutUint64(b, v)
		return b
	}
	var published [keys]atomic.Uint64
	for k := range keys {
		if err := g.w.Put(ctx, fmt.Sprint("k", k), value(1)); err != nil {
			t.Fatal(err)
		}
		published[k].Store(1)
	}
	var wg sync.WaitGroup
	var done atomic.Bool
	errc := make(chan error, 8)
	for r := range 3 {
		c := g.r
		if r == 2 {
			c = newTestClient(t, client.Config{MasterAddr: g.master})
		}
		wg.Go(func() {
			for i := 0; !done.Load(); i++ {
				k := i % keys
				want := published[k].Load()
				got, err := c.Get(ctx, fmt.Sprint("k", k))
				switch {
				case errors.Is(err, errcode.ErrObjectNotFound), errors.Is(err, errcode.ErrReplicaNotReady):
					// between a removal and the next put, or during the put
				case err != nil && strings.Contains(err.Error(), "removed while they were read"):
					// removed under the read, and the object the one
					// lookup again found removed under its read too
					// (readAgain tries once): no bytes, no wrong version
				case err != nil:
					errc <- fmt.Errorf("get k%d: %w", k, err)
					return
				case binary.LittleEndian.Uint64(got) < want:
					errc <- fmt.Errorf("get k%d returned version %d after version %d was published", k, binary.LittleEndian.Uint64(got), want)
					return
				}
			}
		})
	}
	for v := uint64(2); v <= versions; v++ {
		for k := range keys {
			key := fmt.Sprint("k", k)
			if err := g.w.Remove(ctx, key, true); err != nil {
				t.Fatal(err)
			}
			if err := g.w.Put(ctx, key, value(v)); err != nil {
				t.Fatal(err)
			}
			published[k].Store(v)
		}
	}
	done.Store(true)
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Error(err)
	}
}

// A client with the node in its process reads a cached location of the
// local DRAM through the node's object check (ReadObjectIntoParts): after
// another client's forced remove, and after the range was written again by
// another key with the same bytes, the cached get answers OBJECT_NOT_FOUND.
func TestLocationCacheLocalNode(t *testing.T) {
	m := newMaster(t, testMasterConfig())
	cfg := testNodeConfig("")
	cfg.PingInterval = time.Second
	cfg.OffloadWake = true
	n, err := Start(context.Background(), cfg, m)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	local := newTestClient(t, client.Config{Master: m, LocalNode: n})
	other := newTestClient(t, client.Config{Master: m, LocalNode: n}) // another client, its own cache
	ctx := context.Background()
	val := rnd(64 << 10)
	if err := local.Put(ctx, "k", val); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if got, err := local.Get(ctx, "k"); err != nil || !bytes.Equal(got, val) {
			t.Fatalf("get: %v", err)
		}
	}
	if st := local.ReadStats(); st.CacheHits != 1 || st.LocalDRAM != 2 {
		t.Fatalf("read stats %+v: want a cached local DRAM read", st)
	}
	if err := other.Remove(ctx, "k", true); err != nil {
		t.Fatal(err)
	}
	if err := other.Put(ctx, "same", val); err != nil {
		t.Fatal(err)
	}
	if got, err := local.Get(ctx, "k"); !errors.Is(err, errcode.ErrObjectNotFound) {
		t.Fatalf("cached local get after a forced remove: %d bytes, %v", len(got), err)
	}
}

// A node that has gone half the master's client_ttl without an answered
// Ping refuses reads of cached locations (they name the put), and still
// serves a lookup's fresh read (no token): the master may be expiring it.
func TestCachedReadRefusedOutOfTouch(t *testing.T) {
	g := newCacheRig(t, testMasterConfig(), 1, false, client.Config{})
	ctx := context.Background()
	val := rnd(1000)
	if err := g.w.Put(ctx, "k", val); err != nil {
		t.Fatal(err)
	}
	info, err := g.w.Lookup(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	r, n := info.Replicas[0], g.nodes[0]
	testkit.Eventually(t, "an answered ping", func() bool { return n.contact.Load() != 0 && n.clientTTL.Load() != 0 })
	if _, err := n.checkReadRange(r.Offset, r.Length, r.PutToken); err != nil {
		t.Fatalf("a node in touch refused a cached read: %v", err)
	}
	n.contact.Store(time.Now().Add(-time.Duration(n.clientTTL.Load())/2 - time.Second).UnixNano())
	if _, err := n.checkReadRange(r.Offset, r.Length, r.PutToken); !errors.Is(err, ErrNotAnObject) {
		t.Fatalf("a node out of touch served a cached read: %v", err)
	}
	if _, err := n.checkReadRange(r.Offset, r.Length, 0); err != nil {
		t.Fatalf("a node out of touch refused a fresh read: %v", err)
	}
}
