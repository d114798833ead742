package admission

import (
	"fmt"
	"testing"

	"github.com/tierstore/tierstore/masterapi"
	"pgregory.net/rapid"
)

// TestReturnGhostMatchesModel: over random sequences of remembered keys,
// lookups and clock steps, a returnGhost large enough never to drop an
// entry counts exactly what its definition says: a key looked up within
// the horizon after its newest record returned (and is forgotten); a key
// not looked up within the horizon expired; a record replaced by a newer
// one of its key counts once, as the newer one.
func TestReturnGhostMatchesModel(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		horizon := float64(rapid.IntRange(1, 12).Draw(t, "horizon"))
		g := newReturnGhost(1024)
		live := map[uint64]int64{}
		var returned, expired float64
		now := int64(0)
		for i, n := 0, rapid.IntRange(1, 200).Draw(t, "ops"); i < n; i++ {
			now += int64(rapid.IntRange(0, 4).Draw(t, "dt"))
			h := uint64(rapid.IntRange(0, 7).Draw(t, "key"))
			for k, at := range live {
				if float64(now-at) > horizon {
					expired++
					delete(live, k)
				}
			}
			if rapid.Bool().Draw(t, "add") {
				g.add(h, now, horizon)
				live[h] = now
			} else {
				g.lookup(h, now, horizon)
				if _, ok := live[h]; ok {
					returned++
					delete(live, h)
				}
			}
			if g.returned != returned || g.expired != expired {
				t.Fatalf("op %d at %d: ghost counts %v returned, %v expired; model %v, %v", i, now, g.returned, g.expired, returned, expired)
			}
		}
	})
}

// TestReturnGhostBounded: a full ring forgets its oldest entry without
// counting it, and the counts decay.
func TestReturnGhostBounded(t *testing.T) {
	g := newReturnGhost(4)
	for h := uint64(1); h <= 6; h++ {
		g.add(h, 0, 100)
	}
	if g.n != 4 || len(g.at) != 4 {
		t.Fatalf("%d entries, %d remembered; want 4", g.n, len(g.at))
	}
	g.lookup(1, 1, 100) // forgotten when the ring was full
	g.lookup(6, 1, 100)
	if g.returned != 1 || g.expired != 0 {
		t.Fatalf("counts %v returned, %v expired; want 1, 0", g.returned, g.expired)
	}
	for i := 0; i < decayEvery; i++ {
		g.count(false)
	}
	if n := g.returned + g.expired; n >= decayEvery {
		t.Fatalf("counts did not decay: %v outcomes", n)
	}
}

// windowPolicy is a TinyLFU whose new-key window has seen new keys that
// never came back and pushed-out objects that all came back (fresh:
// false), or the opposite (fresh: true); its node's SSD turns every
// candidate away.
func windowPolicy(t *testing.T, cfg TinyLFUConfig, fresh bool) *TinyLFU {
	t.Helper()
	cfg.Margin, cfg.MaxMargin, cfg.MarginStep, cfg.ColdPutFreq = 1, 1, -1, 2
	p := NewTinyLFU(cfg)
	p.ReportSSD("n1", full(8), 0)
	h := p.Window().horizon
	for i := 0; i < 2*minOutcomes; i++ {
		n, s := fmt.Sprintf("new%d", i), fmt.Sprintf("ssd%d", i)
		p.ObserveLookup(n, Miss, 0)
		p.AtPutEnd(candidate(n))
		p.ColdPut(candidate(n))
		p.ObserveSSDEviction([]string{s})
		if fresh {
			p.ObserveLookup(n, Miss, 0)
		} else {
			p.ObserveLookup(s, Miss, 0)
		}
		for j := 0; j <= int(h); j++ {
			p.ObserveLookup("other", DRAMHit, obj)
		}
	}
	return p
}

// Window exposes the new-key window to the tests.
func (p *TinyLFU) Window() *newKeyWindow { return &p.win }

// TestTinyLFUColdNewKeys: a new key's put is cold when new keys come back
// within a DRAM residency less often than pushed-out objects do and the
// SSD would turn the key away; warm when they come back more often, when
// the SSD would take it, with WarmNewKeys, and before the window counted
// enough.
func TestTinyLFUColdNewKeys(t *testing.T) {
	put := func(p *TinyLFU, key string) bool {
		p.ObserveLookup(key, Miss, 0)
		p.AtPutEnd(candidate(key))
		return p.ColdPut(candidate(key))
	}
	p := windowPolicy(t, TinyLFUConfig{}, false)
	st := p.Stats()
	if !(st.NewKeysReturn < st.PushedReturn) {
		t.Fatalf("return rates %v new, %v pushed: the set-up failed", st.NewKeysReturn, st.PushedReturn)
	}
	before := st.ColdNewPuts
	if !put(p, "a-new-key") {
		t.Fatal("a new key is warm although new keys come back less often than pushed-out objects and the SSD turns it away")
	}
	if got := p.Stats().ColdNewPuts; got != before+1 {
		t.Fatalf("ColdNewPuts %d, want %d", got, before+1)
	}
	p.ReportSSD("n1", masterapi.SSDReport{High: 100 * obj, Used: 0}, 0) // room: the SSD would take it now
	if put(p, "another-new-key") {
		t.Fatal("a new key the SSD would admit is cold")
	}
	if put(windowPolicy(t, TinyLFUConfig{WarmNewKeys: true}, false), "a-new-key") {
		t.Fatal("a new key is cold with WarmNewKeys")
	}
	if put(windowPolicy(t, TinyLFUConfig{}, true), "a-new-key") {
		t.Fatal("a new key is cold although new keys come back more often than pushed-out objects")
	}
	// Pushed-out objects came back, but no new key was counted yet.
	q := NewTinyLFU(TinyLFUConfig{Margin: 1, MaxMargin: 1, MarginStep: -1, ColdPutFreq: 2})
	q.ReportSSD("n1", full(8), 0)
	for i := 0; i < 2*minOutcomes; i++ {
		s := fmt.Sprintf("ssd%d", i)
		q.ObserveSSDEviction([]string{s})
		q.ObserveLookup(s, Miss, 0)
	}
	if st := q.Stats(); st.PushedReturn != 1 || st.NewKeysReturn != 0 {
		t.Fatalf("return rates %v new, %v pushed: the set-up failed", st.NewKeysReturn, st.PushedReturn)
	}
	if put(q, "a-new-key") {
		t.Fatal("a new key is cold before the window counted enough new keys")
	}
}

// TestNewKeyWindowSamples: while the cache holds at most the minimum
// population every key is sampled; at 64 times it about one in 64, so the
// ghosts stay bounded whatever the cache's size.
func TestNewKeyWindowSamples(t *testing.T) {
	w := newNewKeyWindow(1024)
	w.setPopulation(1000, 1024)
	n := 0
	for i := 0; i < 64000; i++ {
		if w.sampled(hashKey(fmt.Sprint(i))) {
			n++
		}
	}
	if n != 64000 {
		t.Fatalf("%d of 64000 keys sampled at the minimum population, want all", n)
	}
	w.setPopulation(64*1024, 1024)
	n = 0
	for i := 0; i < 64000; i++ {
		if w.sampled(hashKey(fmt.Sprint(i))) {
			n++
		}
	}
	if n < 500 || n > 2000 {
		t.Fatalf("%d of 64000 keys sampled at 64 x the minimum population, want about 1000", n)
	}
}

// TestNewKeyWindowNeedsAClearDifference: new keys go cold only when they
// come back less often than pushed-out objects by more than the noise of
// the counts (two standard errors), and only once both ghosts counted
// enough.
func TestNewKeyWindowNeedsAClearDifference(t *testing.T) {
	for _, c := range []struct {
		freshRet, freshExp, pushRet, pushExp float64
		cold                                 bool
	}{
		{30, 34, 32, 32, false}, // 0.47 against 0.50: noise
		{25, 39, 35, 29, false}, // 0.39 against 0.55: within two standard errors (0.18)
		{10, 54, 40, 24, true},  // 0.16 against 0.63
		{0, 20, 20, 0, false},   // clear, but too few new keys counted
		{0, 400, 3, 397, false}, // 0 against 0.0075 over 400 each: noise
		{20, 380, 80, 320, true},
	} {
		w := newNewKeyWindow(64)
		w.fresh.returned, w.fresh.expired = c.freshRet, c.freshExp
		w.pushed.returned, w.pushed.expired = c.pushRet, c.pushExp
		if got := w.coldNew(); got != c.cold {
			t.Errorf("new keys %v of %v back, pushed %v of %v: cold %v, want %v", c.freshRet, c.freshRet+c.freshExp,
				c.pushRet, c.pushRet+c.pushExp, got, c.cold)
		}
	}
}
