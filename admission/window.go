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
// same horizon, return rates: of new keys (looked up again within the
// horizon after their put), in two classes (first puts, and new keys
// cached before: putFilter), and of objects the SSD evicted (looked up
// again within the horizon after their eviction). New keys of a class
// enter cold while they return less often than what the SSD pushes out:
// a loop's first pass, the tail keys of a wide Zipf set, a burst of
// one-off keys; warm while they return more often: a conversation's new
// turn, the newly popular keys of a moving working set. The rates are measured, not fitted: nothing in the
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
	// fresh remembers sampled new keys from their put, by class: [0] the
	// first put of a key (not cached before, as far as puts remembers),
	// [1] a new key cached before (its estimate fell below ColdPutFreq);
	// pushed remembers sampled objects from the SSD's eviction of their
	// bucket.
	fresh  [2]returnGhost
	pushed returnGhost
	// puts remembers the keys put lately (about twice the population):
	// which class a new key's put is of.
	puts putFilter
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
		fresh:  [2]returnGhost{newReturnGhost(4 * n), newReturnGhost(4 * n)},
		pushed: newReturnGhost(4 * n), rejected: newReturnGhost(4 * n), sample: 1 << 32,
		puts: newPutFilter(int64(n))}
}

// setPopulation samples one key in population/minPopulation, and sizes
// the put filter for the population (a new size starts it empty).
func (w *newKeyWindow) setPopulation(population, minPopulation int64) {
	w.puts.resize(max(population, minPopulation))
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
	w.fresh[0].lookup(h, w.now, w.horizon)
	w.fresh[1].lookup(h, w.now, w.horizon)
	w.pushed.lookup(h, w.now, w.horizon)
	w.rejected.lookup(h, w.now, w.horizon)
}

// put records the put of new key h of class again (cached before), warm
// or cold.
func (w *newKeyWindow) put(h uint64, again, warm bool) {
	if !w.sampled(h) {
		return
	}
	w.fresh[class(again)].add(h, w.now, w.horizon)
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

// coldNew reports whether new keys of class again (cached before, or
// first put) enter cold now: both ghosts counted enough outcomes, and new
// keys of that class return within the horizon less often than the
// objects the SSD pushed out, by more than twice the standard error of
// the difference (a two-proportion test with the pooled rate): a
// difference within the noise of a few hundred outcomes leaves new keys
// warm, as before the window. The two classes are told apart because
// they are different populations on KV-cache traffic: keys never cached
// before are a conversation's new turn (back soon) or a burst of one-off
// keys (never back); keys cached before with a low estimate are a Zipf
// set's tail, a loop's blocks. Pooled, one hides the other
// (docs/benchmarks.md, churn stop 44).
func (w *newKeyWindow) coldNew(again bool) bool {
	return lessOften(&w.fresh[class(again)], &w.pushed)
}

// class is the index of a new key's fresh ghost: 1 when it was cached
// before, 0 for its first put.
func class(again bool) int {
	if again {
		return 1
	}
	return 0
}

// seen tests whether h was put lately and records that it is put now.
func (w *newKeyWindow) seen(h uint64) bool { return w.puts.testAndSet(h) }

// putFilter is a Bloom filter of the keys put lately: two bits a key, in
// 16 bits per object of the population up to maxPutFilterBits; it starts
// again empty once a quarter of its bits are set (about twice the
// population of distinct keys put, or 2^25 keys at the cap), so a key it
// answers for was put within roughly that many puts of distinct keys
// (false positives at most about 1 in 16).
type putFilter struct {
	words []uint64
	set   int
}

// maxPutFilterBits bounds a putFilter (2^28 bits: 32 MiB, as much as the
// sketch's counters at their cap, maxSketchSize), whatever the
// population: 16 bits an object up to 16M objects; a master of 50M
// objects would otherwise hold 128 MiB of filter and clear it, under the
// policy's lock, every 100M distinct puts.
const maxPutFilterBits = 1 << 28

func newPutFilter(population int64) putFilter {
	var f putFilter
	f.resize(population)
	return f
}

// resize sizes f for population, emptying it when the size changes.
func (f *putFilter) resize(population int64) {
	bits := uint64(64)
	for bits < uint64(16*max(population, 4)) && bits < maxPutFilterBits {
		bits <<= 1
	}
	if uint64(len(f.words))*64 != bits {
		f.words, f.set = make([]uint64, bits/64), 0
	}
}

// testAndSet reports whether both bits of h were set, and sets them.
func (f *putFilter) testAndSet(h uint64) bool {
	mask := uint64(len(f.words))*64 - 1
	b1, b2 := h&mask, (h>>32^h*0x9e3779b97f4a7c15>>17)&mask
	seen := true
	for _, b := range [2]uint64{b1, b2} {
		w, bit := &f.words[b/64], uint64(1)<<(b%64)
		if *w&bit == 0 {
			seen = false
			*w |= bit
			f.set++
		}
	}
	if f.set*4 >= len(f.words)*64 {
		clear(f.words)
		f.set = 0
	}
	return seen
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

// rates returns the return rates (new keys at their first put, new keys
// cached before, pushed out) and the horizon, for Stats.
func (w *newKeyWindow) rates() (first, again, pushed, horizon float64) {
	first, _ = w.fresh[0].rate()
	again, _ = w.fresh[1].rate()
	pushed, _ = w.pushed.rate()
	return first, again, pushed, w.horizon
}
