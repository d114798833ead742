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
		w.fresh[0].returned, w.fresh[0].expired = c.freshRet, c.freshExp
		w.pushed.returned, w.pushed.expired = c.pushRet, c.pushExp
		if got := w.coldNew(false); got != c.cold {
			t.Errorf("new keys %v of %v back, pushed %v of %v: cold %v, want %v", c.freshRet, c.freshRet+c.freshExp,
				c.pushRet, c.pushRet+c.pushExp, got, c.cold)
		}
	}
}

// setRates gives ghost g n outcomes of which back returned.
func setRates(g *returnGhost, back, n float64) { g.returned, g.expired = back, n-back }

// TestNewKeyWindowClassesApart: new keys at their first put and new keys
// cached before are judged each by their own return rate: keys never
// cached before that never come back (a burst of one-off keys) go cold
// while keys cached before that come back (a working set's tail) stay
// warm, and the other way round. Pooled (before churn stop 44), the two
// rates average out and both classes go the same way.
func TestNewKeyWindowClassesApart(t *testing.T) {
	for _, c := range []struct {
		first, again float64 // returns of 100 counted
		coldFirst    bool
		coldAgain    bool
	}{
		{first: 0, again: 60, coldFirst: true, coldAgain: false},
		{first: 60, again: 0, coldFirst: false, coldAgain: true},
		{first: 60, again: 60, coldFirst: false, coldAgain: false},
		{first: 0, again: 0, coldFirst: true, coldAgain: true},
	} {
		w := newNewKeyWindow(64)
		setRates(&w.fresh[0], c.first, 100)
		setRates(&w.fresh[1], c.again, 100)
		setRates(&w.pushed, 30, 100)
		if got := w.coldNew(false); got != c.coldFirst {
			t.Errorf("first puts %v/100 back, cached before %v/100, pushed 30/100: first put cold %v, want %v", c.first, c.again, got, c.coldFirst)
		}
		if got := w.coldNew(true); got != c.coldAgain {
			t.Errorf("first puts %v/100 back, cached before %v/100, pushed 30/100: cached-before cold %v, want %v", c.first, c.again, got, c.coldAgain)
		}
	}
}

// TestTinyLFUColdPutByClass: ColdPut tells a new key's first put from the
// put of a new key cached before (its estimate still below ColdPutFreq)
// and answers by that class's rate; each put is recorded in its class's
// ghost.
func TestTinyLFUColdPutByClass(t *testing.T) {
	p := NewTinyLFU(TinyLFUConfig{Margin: 1, MaxMargin: 1, MarginStep: -1, ColdPutFreq: 2})
	p.ReportSSD("n1", full(8), 0) // the SSD turns every candidate away
	w := p.Window()
	setRates(&w.fresh[0], 0, 100)
	setRates(&w.fresh[1], 60, 100)
	setRates(&w.pushed, 30, 100)
	// ColdPut alone adds no access: the estimate stays below ColdPutFreq.
	if !p.ColdPut(candidate("k")) {
		t.Fatal("the first put of a new key is warm although first puts never come back")
	}
	if p.ColdPut(candidate("k")) {
		t.Fatal("a new key cached before is cold although such keys come back more often than pushed-out objects")
	}
	if n0, n1 := w.fresh[0].n, w.fresh[1].n; n0 != 1 || n1 != 1 {
		t.Fatalf("ghost entries: %d first puts, %d cached before; want 1 and 1", n0, n1)
	}
}

// TestPutFilter: a key put is answered as seen from its second put on;
// keys never put are answered seen rarely; the filter starts again empty
// once a quarter of its bits are set, so it never fills up.
func TestPutFilter(t *testing.T) {
	f := newPutFilter(1024)
	h := hashKey("a")
	if f.testAndSet(h) {
		t.Fatal("a key never put is seen")
	}
	if !f.testAndSet(h) {
		t.Fatal("a key just put is not seen")
	}
	for i := 0; i < 1000; i++ {
		f.testAndSet(hashKey(fmt.Sprint("in", i)))
	}
	fp := 0
	for i := 0; i < 10000; i++ {
		if f.testAndSet(hashKey(fmt.Sprint("out", i))) {
			fp++
		}
		if f.set*4 > len(f.words)*64 {
			t.Fatalf("%d of %d bits set: more than a quarter", f.set, len(f.words)*64)
		}
	}
	if fp > 10000/16 {
		t.Fatalf("%d of 10000 keys never put seen, want at most 1 in 16", fp)
	}
	g := newPutFilter(1024)
	g.testAndSet(h)
	g.resize(1024)
	if !g.testAndSet(h) {
		t.Fatal("a resize to the same size emptied the filter")
	}
}

// TestPutFilterBounded: the filter of a 50M-object population stays at
// maxPutFilterBits (32 MiB), not 16 bits an object, and still answers.
func TestPutFilterBounded(t *testing.T) {
	f := newPutFilter(50_000_000)
	if got := len(f.words) * 64; got != maxPutFilterBits {
		t.Fatalf("filter of 50M objects: %d bits, want %d", got, maxPutFilterBits)
	}
	h := hashKey("k")
	f.testAndSet(h)
	if !f.testAndSet(h) {
		t.Fatal("a key just put is not seen")
	}
	if g := newPutFilter(1 << 20); len(g.words)*64 != 16<<20 {
		t.Fatalf("filter of 1M objects: %d bits, want 16 an object", len(g.words)*64)
	}
}
