package admission

import "math"

// The new-key window: whether a put of a new key (its estimate, this access
// included, below ColdPutFreq) enters DRAM warm, at the most recently used
// end (DRAM is then a window of recency in front of the SSD), or cold, as
// the first DRAM victim. See TinyLFU.ColdPut and the package documentation
// ("Cold puts").
//
// A warm new key holds a DRAM slot for one DRAM residency (the horizon);
// what that slot would otherwise hold longer is the cache's marginal
// object, the kind the SSD pushes out. So the window compares, over the
// same horizon, two return rates: of new keys (looked up again within the
// horizon after their put) and of objects the SSD evicted (looked up again
// within the horizon after their eviction). New keys enter cold while they
// return less often than what the SSD pushes out: a loop's first pass, the
// tail keys of a wide Zipf set, a burst of one-off keys; warm while they
// return more often: a conversation's new turn, the newly popular keys of
// a moving working set. The rates are measured, not fitted: nothing in the
// rule is a per-trace constant (ARC's ghosts and Caffeine's adaptive
// window are the same idea; unlike Caffeine's hill climbing it needs no
// period of stable traffic to measure a step).

// newKeyWindow is the window's state. Not safe for concurrent use
// (TinyLFU.mu).
type newKeyWindow struct {
	// now counts demand lookups: the clock of the horizon.
	now int64
	// horizon is the DRAM residency of a warm new key, in lookups: a
	// moving average (weight 1/10) of the age of sampled warm new keys
	// when DRAM evicted them.
	horizon float64
	// warmAt is the clock of each sampled warm new key's put, until DRAM
	// evicts it; cleared when it outgrows maxTracked (puts of keys the
	// master then removed are never evicted).
	warmAt     map[uint64]int64
	maxTracked int
	// fresh remembers sampled new keys from their put, pushed sampled
	// objects from the SSD's eviction of their bucket.
	fresh, pushed returnGhost
	// rejected remembers sampled candidates of the margin's decisions:
	// turned away by the margin alone (their estimate beat the victim's
	// density, not by more than the margin), or, at margin 0, admitted
	// where one step up would turn them away; the adaptive margin
	// compares their return rate with pushed's (ghost.go).
	rejected returnGhost
	// sample keeps a key when the top 32 bits of its hash are below it
	// (all of them while the cache holds at most the minimum population),
	// so that the ghosts stay bounded whatever the cache's size.
	sample uint64
}

func newNewKeyWindow(minPopulation int64) newKeyWindow {
	n := int(max(minPopulation, 64))
	return newKeyWindow{horizon: float64(n) / 4, warmAt: map[uint64]int64{}, maxTracked: 4 * n,
		fresh: newReturnGhost(4 * n), pushed: newReturnGhost(4 * n), rejected: newReturnGhost(4 * n), sample: 1 << 32}
}

// setPopulation samples one key in population/minPopulation.
func (w *newKeyWindow) setPopulation(population, minPopulation int64) {
	w.sample = 1 << 32
	if population > minPopulation {
		w.sample = uint64(float64(1<<32) * float64(minPopulation) / float64(population))
	}
}

func (w *newKeyWindow) sampled(h uint64) bool { return h>>32 < w.sample }

// returnGhost remembers key hashes with the clock at which they were
// recorded, and counts how many were looked up again within the horizon
// (returned) and how many were not (expired). The counts are halved every
// decayEvery outcomes, so that they describe the recent past.
type returnGhost struct {
	ring              []ghostEntry // seq: the clock of the entry
	head, n           int
	at                map[uint64]int64 // hash -> clock of its newest entry
	returned, expired float64
	// outcomes and returns count every outcome and every return ever
	// counted (they do not decay).
	outcomes, returns int64
}

// decayEvery is the number of outcomes between two halvings of a
// returnGhost's counts.
const decayEvery = 512

// minOutcomes is the number of outcomes each ghost needs before the window
// puts new keys cold.
const minOutcomes = 32

func newReturnGhost(size int) returnGhost {
	return returnGhost{ring: make([]ghostEntry, max(size, 1)), at: map[uint64]int64{}}
}

// add remembers h at clock now. A full ring forgets its oldest entry
// uncounted.
func (g *returnGhost) add(h uint64, now int64, horizon float64) {
	g.expire(now, horizon)
	if g.n == len(g.ring) {
		g.pop()
	}
	g.ring[(g.head+g.n)%len(g.ring)] = ghostEntry{h: h, seq: uint64(now)}
	g.n++
	g.at[h] = now
}

// pop removes the oldest ring entry; it reports whether the entry was
// still live (not returned, not replaced by a newer entry of its hash).
func (g *returnGhost) pop() bool {
	e := g.ring[g.head]
	g.head = (g.head + 1) % len(g.ring)
	g.n--
	if t, ok := g.at[e.h]; ok && t == int64(e.seq) {
		delete(g.at, e.h)
		return true
	}
	return false
}

// expire counts the live entries older than horizon as expired.
func (g *returnGhost) expire(now int64, horizon float64) {
	for g.n > 0 && float64(now-int64(g.ring[g.head].seq)) > horizon {
		if g.pop() {
			g.count(false)
		}
	}
}

// lookup counts a return of h if h is remembered within the horizon.
func (g *returnGhost) lookup(h uint64, now int64, horizon float64) {
	g.expire(now, horizon)
	if _, ok := g.at[h]; ok {
		delete(g.at, h)
		g.count(true)
	}
}

func (g *returnGhost) count(returned bool) {
	g.outcomes++
	if returned {
		g.returns++
		g.returned++
	} else {
		g.expired++
	}
	if g.returned+g.expired >= decayEvery {
		g.returned, g.expired = g.returned/2, g.expired/2
	}
}

// rate is the fraction of the counted entries that returned, and whether
// at least minOutcomes were counted.
func (g *returnGhost) rate() (float64, bool) {
	n := g.returned + g.expired
	return ratioOf(g.returned, n), n >= minOutcomes
}

// lookup advances the clock by one demand lookup of h.
func (w *newKeyWindow) lookup(h uint64) {
	w.now++
	if !w.sampled(h) {
		return
	}
	w.fresh.lookup(h, w.now, w.horizon)
	w.pushed.lookup(h, w.now, w.horizon)
	w.rejected.lookup(h, w.now, w.horizon)
}

// put records the put of new key h, warm or cold.
func (w *newKeyWindow) put(h uint64, warm bool) {
	if !w.sampled(h) {
		return
	}
	w.fresh.add(h, w.now, w.horizon)
	if !warm {
		return
	}
	if len(w.warmAt) >= w.maxTracked {
		clear(w.warmAt)
	}
	w.warmAt[h] = w.now
}

// evicted records that DRAM evicted h.
func (w *newKeyWindow) evicted(h uint64) {
	if t, ok := w.warmAt[h]; ok {
		delete(w.warmAt, h)
		w.horizon = 0.9*w.horizon + 0.1*float64(max(1, w.now-t))
	}
}

// pushedOut records that the SSD evicted h.
func (w *newKeyWindow) pushedOut(h uint64) {
	if w.sampled(h) {
		w.pushed.add(h, w.now, w.horizon)
	}
}

// inBand records candidate h of the margin's decisions.
func (w *newKeyWindow) inBand(h uint64) {
	if w.sampled(h) {
		w.rejected.add(h, w.now, w.horizon)
	}
}

// coldNew reports whether new keys enter cold now: both ghosts counted
// enough outcomes, and new keys return within the horizon less often than
// the objects the SSD pushed out, by more than twice the standard error of
// the difference (a two-proportion test with the pooled rate): a
// difference within the noise of a few hundred outcomes leaves new keys
// warm, as before the window.
func (w *newKeyWindow) coldNew() bool {
	return lessOften(&w.fresh, &w.pushed)
}

// lessOften reports whether a's entries return within the horizon less
// often than b's, by more than twice the standard error of the difference
// (a two-proportion test with the pooled rate), each ghost having counted
// at least minOutcomes outcomes.
func lessOften(a, b *returnGhost) bool {
	ra, okA := a.rate()
	rb, okB := b.rate()
	if !okA || !okB || ra >= rb {
		return false
	}
	nA, nB := a.returned+a.expired, b.returned+b.expired
	pool := (a.returned + b.returned) / (nA + nB)
	se := math.Sqrt(pool * (1 - pool) * (1/nA + 1/nB))
	return rb-ra > 2*se
}

// marginMove is the adaptive margin's next step: -1 when the candidates
// the margin turned away come back within the horizon more often than the
// objects the SSD pushed out (lessOften), +1 in the opposite case, 0 while
// the difference is within the noise or either ghost counted too few
// outcomes.
func (w *newKeyWindow) marginMove() int {
	switch {
	case lessOften(&w.pushed, &w.rejected):
		return -1
	case lessOften(&w.rejected, &w.pushed):
		return 1
	}
	return 0
}

// rates returns the two return rates (new keys, pushed out) and the
// horizon, for Stats.
func (w *newKeyWindow) rates() (fresh, pushed, horizon float64) {
	fresh, _ = w.fresh.rate()
	pushed, _ = w.pushed.rate()
	return fresh, pushed, w.horizon
}
