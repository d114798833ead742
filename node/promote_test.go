package node

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/tierstore/tierstore/internal/testkit"
	"github.com/tierstore/tierstore/tier"
)

// gateTier is the real tier engine whose Load of a gated key waits until
// the test opens its gate; it counts the Loads of each key.
type gateTier struct {
	*tier.Engine
	mu      sync.Mutex // protects gates and loads
	gates   map[string]chan struct{}
	loads   map[string]int
	started chan string // each gated key, when its Load waits
}

func newGateTier(t *testing.T) *gateTier {
	t.Helper()
	cfg := testNodeConfig("127.0.0.1:0")
	cfg.EnableOffload = true
	cfg.SSDDir = t.TempDir()
	cfg.Backend = "uring"
	if err := cfg.validate(true); err != nil { // fills the derived limits
		t.Fatal(err)
	}
	st, _, err := openTier(cfg, nil, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return &gateTier{Engine: st.(*tier.Engine), gates: map[string]chan struct{}{}, loads: map[string]int{}, started: make(chan string, 64)}
}

func (g *gateTier) gate(keys ...string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, k := range keys {
		g.gates[k] = make(chan struct{})
	}
}

func (g *gateTier) open() {
	g.mu.Lock()
	defer g.mu.Unlock()
	for k, ch := range g.gates {
		close(ch)
		delete(g.gates, k)
	}
}

func (g *gateTier) loaded(key string) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.loads[key]
}

func (g *gateTier) Load(ctx context.Context, keys [][]byte) []tier.LoadResult {
	for _, k := range keys {
		g.mu.Lock()
		g.loads[string(k)]++
		ch := g.gates[string(k)]
		g.mu.Unlock()
		if ch != nil {
			g.started <- string(k)
			select {
			case <-ch:
			case <-ctx.Done():
			}
		}
	}
	return g.Engine.Load(ctx, keys)
}

// promotedStack: n keys of val, each on SSD only and read twice from it,
// so that each is queued for promotion (dram_promotion_min_freq 3) on a
// node whose tier is g.
func promotedStack(t *testing.T, g *gateTier, keys []string, val []byte) *admStack {
	t.Helper()
	s := newAdmStack(t, admMasterConfig(3), func(c *Config) {
		c.HeartbeatInterval = time.Hour // rounds run when the test says
		c.OffloadWake = false
	}, nil, WithTier(g))
	t.Cleanup(g.open) // before the node closes (cleanups run last first): a failed test leaves no load held
	for _, k := range keys {
		s.ssdOnly(t, k, val)
	}
	for _, k := range keys {
		s.readsFromSSD(t, k, val, 2)
	}
	return s
}

// TestPromotionsLoadTogetherAndAnswerAsTheyComplete: while one promotion's
// load is held up, the others of the same heartbeat load, are answered and
// read from DRAM; the held one follows once its load ends.
func TestPromotionsLoadTogetherAndAnswerAsTheyComplete(t *testing.T) {
	g := newGateTier(t)
	keys := []string{admKey("p", 0), admKey("p", 1), admKey("p", 2), admKey("p", 3)}
	val := rnd(64 << 10)
	s := promotedStack(t, g, keys, val)
	g.gate(keys[0])
	round := make(chan struct{})
	go func() { defer close(round); s.n.OffloadNow() }()
	testkit.Eventually(t, "the other promotions to be published while the first one loads", func() bool {
		return s.n.Stats().Promotions == 3
	})
	before := s.c.ReadStats()
	if got, err := s.c.Get(context.Background(), keys[1]); err != nil || string(got) != string(val) {
		t.Fatalf("get %s: %v", keys[1], err)
	}
	if after := s.c.ReadStats(); after.LocalDRAM != before.LocalDRAM+1 {
		t.Fatalf("%s not read from DRAM once promoted: %+v -> %+v", keys[1], before, after)
	}
	g.open()
	<-round
	if p := s.n.Stats().Promotions; p != 4 {
		t.Fatalf("%d promotions after the round, want 4", p)
	}
	if err := s.m.Check(); err != nil {
		t.Fatal(err)
	}
}

// TestSSDReadJoinsPromotion: a read of a key whose promotion waits for its
// turn behind promoteParallel held-up loads does not wait for them: it
// runs that promotion's load itself and both the read and the promotion
// take its bytes (the SSD is read once for the key).
func TestSSDReadJoinsPromotion(t *testing.T) {
	g := newGateTier(t)
	var keys []string
	for i := range promoteParallel + 1 {
		keys = append(keys, admKey("j", i))
	}
	val := rnd(64 << 10)
	s := promotedStack(t, g, keys, val)
	last := keys[promoteParallel]
	g.gate(keys[:promoteParallel]...)
	round := make(chan struct{})
	go func() { defer close(round); s.n.OffloadNow() }()
	for range promoteParallel {
		<-g.started // every worker holds a load
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	before := s.c.ReadStats()
	got, err := s.c.Get(ctx, last)
	if err != nil || string(got) != string(val) {
		t.Fatalf("get %s while the promotions ahead of it are held: %v", last, err)
	}
	if after := s.c.ReadStats(); after.LocalSSD != before.LocalSSD+1 {
		t.Fatalf("get %s: %+v -> %+v, want an SSD read", last, before, after)
	}
	if j := s.n.Stats().PromotionReadsJoined; j != 1 {
		t.Fatalf("%d reads joined a promotion, want 1", j)
	}
	g.open()
	<-round
	if p := s.n.Stats().Promotions; p != int64(len(keys)) {
		t.Fatalf("%d promotions, want %d", p, len(keys))
	}
	if n := g.loaded(last); n != 1 {
		t.Fatalf("%s loaded %d times from the tier, want once", last, n)
	}
	before = s.c.ReadStats()
	if _, err := s.c.Get(ctx, last); err != nil {
		t.Fatal(err)
	}
	if after := s.c.ReadStats(); after.LocalDRAM != before.LocalDRAM+1 {
		t.Fatalf("%s not in DRAM after its promotion: %+v -> %+v", last, before, after)
	}
}
