package admission

import (
	"cmp"
	"math"
	"slices"
)

// DRAM victims by frequency (VictimRanker). The master orders DRAM
// eviction victims least recently used first (cold puts before them). With
// TinyLFU it considers a pool of pool x (the round's target) of them and
// asks OrderVictims for the order to drop them in: the least recently used
// object left goes next, unless its estimate exceeds the lowest estimate
// left by more than the margin (the SSD admission's adaptive margin, which
// absorbs a loop's phase difference); then that least frequent object goes
// instead and the other is spared (a swap). With a pool of the whole DRAM
// that is W-TinyLFU's protected region: DRAM keeps its frequent objects
// and drops the tail keys and one-off keys a burst brings; with a pool of
// the round's target it is LRU, today's order.
//
// The pool adapts (victimPool): every swap is remembered as a pair of the
// spared key and the dropped key, and the pair is settled by whichever of
// the two is looked up first: the spared one as a DRAM hit (the swap kept
// a hit: good) or the dropped one as a miss (the swap cost one: bad); a
// dropped key read from SSD, a spared key that left DRAM since, or a pair
// neither of whose keys returns before the ring of pairs overwrites it,
// settles nothing. Both keys of a pair face
// the same horizon, so the comparison needs no horizon of its own. Every
// swapEpoch settled pairs, the pool doubles if good pairs outnumber bad
// ones by more than one standard deviation of a fair coin (sqrt of the
// epoch), halves in the opposite case, in [minVictimPool, maxVictimPool].
// On conversations a recent turn's blocks (low estimates, read at the
// session's next turn) come back before an ended session's (high
// estimates): the pool shrinks to recency. On Zipf traffic with bursts of
// one-off keys, and on a loop sharing the pool with Zipf tail keys, the
// spared keys come back first: the pool grows.

const (
	// minVictimPool is the smallest pool factor: swaps keep happening, so
	// the pairs keep measuring.
	minVictimPool = 2
	// maxVictimPool is the largest pool factor: with eviction_ratio 0.05
	// (the default) 16 x the target is 80% of the evictable DRAM.
	maxVictimPool = 16
	// swapEpoch is the number of settled pairs between two adaptations.
	swapEpoch = 16
)

// orderVictims writes into order (len(f) long) the order to drop len(f)
// victims given least recently used first with estimates f: the least
// recently used one left goes next, unless its estimate exceeds the lowest
// estimate left by more than margin, in which case the first of the
// lowest (in the given order) goes. It returns the swaps made: pairs of
// (spared, dropped) indices, one per victim dropped out of order.
func orderVictims(f []uint32, margin float64, order []int, swaps [][2]int) [][2]int {
	n := len(f)
	byFreq := make([]int, n)
	for i := range byFreq {
		byFreq[i] = i
	}
	slices.SortStableFunc(byFreq, func(a, b int) int { return cmp.Compare(f[a], f[b]) })
	done := make([]bool, n)
	next, low := 0, 0 // the first not done in LRU order, in byFreq order
	for k := range order[:n] {
		for done[next] {
			next++
		}
		for done[byFreq[low]] {
			low++
		}
		v := next
		if y := byFreq[low]; float64(f[next]) > float64(f[y])+margin {
			v = y
			swaps = append(swaps, [2]int{next, y})
		}
		done[v] = true
		order[k] = v
	}
	return swaps
}

// swapPair is one remembered swap.
type swapPair struct {
	spared, dropped uint64
	live            bool
}

// victimPool is the adaptive pool factor and its ghost of swaps. Not safe
// for concurrent use (TinyLFU.mu).
type victimPool struct {
	// log2 of the pool factor, in [log2 minVictimPool, log2 maxVictimPool].
	log2 float64
	// ring holds the last len(ring) swaps; at maps each key of a live
	// pair to its index.
	ring      []swapPair
	head      int
	at        map[uint64]int
	good, bad int
	// moves counts adaptations up and down (Stats).
	ups, downs int64
}

func newVictimPool(size int) victimPool {
	return victimPool{log2: 1, ring: make([]swapPair, max(size, 64)), at: map[uint64]int{}}
}

// factor is the pool factor now.
func (v *victimPool) factor() float64 { return math.Exp2(v.log2) }

// swapped remembers the swap of spared (kept in DRAM) and dropped.
func (v *victimPool) swapped(spared, dropped uint64) {
	if spared == dropped {
		return
	}
	if old := &v.ring[v.head]; old.live {
		v.forget(v.head)
	}
	v.ring[v.head] = swapPair{spared: spared, dropped: dropped, live: true}
	v.forgetKey(spared)
	v.forgetKey(dropped)
	v.at[spared] = v.head
	v.at[dropped] = v.head
	v.head = (v.head + 1) % len(v.ring)
}

// forgetKey settles nothing for the live pair h belongs to (h is in a
// newer pair now).
func (v *victimPool) forgetKey(h uint64) {
	if i, ok := v.at[h]; ok {
		v.forget(i)
	}
}

// forget drops pair i unsettled.
func (v *victimPool) forget(i int) {
	p := &v.ring[i]
	p.live = false
	if v.at[p.spared] == i {
		delete(v.at, p.spared)
	}
	if v.at[p.dropped] == i {
		delete(v.at, p.dropped)
	}
}

// lookup settles the pair of h, if any, by a demand lookup of outcome o.
func (v *victimPool) lookup(h uint64, o Outcome) {
	i, ok := v.at[h]
	if !ok {
		return
	}
	p := v.ring[i]
	switch {
	case h == p.spared && o == DRAMHit:
		v.good++
	case h == p.dropped && o == Miss:
		v.bad++
	}
	v.forget(i)
	if v.good+v.bad < swapEpoch {
		return
	}
	d := float64(v.good - v.bad)
	switch lim := math.Sqrt(swapEpoch); {
	case d > lim && v.log2 < math.Log2(maxVictimPool):
		v.log2++
		v.ups++
	case d < -lim && v.log2 > math.Log2(minVictimPool):
		v.log2--
		v.downs++
	}
	v.good, v.bad = 0, 0
}

// VictimPoolFactor implements VictimRanker: how many times its round's
// target of least recently used objects the master considers.
func (p *TinyLFU) VictimPoolFactor() float64 {
	if p.cfg.LRUVictims {
		return 1
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.pool.factor()
}

// OrderVictims implements VictimRanker: keys are the pool, least recently
// used first; order receives the order to drop them in (orderVictims,
// with the current margin), and the swaps of sampled spared keys (the
// new-key window's sample) are remembered. The estimates
// are read under the lock estimateChunk keys at a time, so a large pool
// does not hold up lookups.
func (p *TinyLFU) OrderVictims(keys []string, order []int) {
	hs := make([]uint64, len(keys))
	f := make([]uint32, len(keys))
	for i, k := range keys {
		hs[i] = hashKey(k)
	}
	for lo := 0; lo < len(hs); lo += estimateChunk {
		p.mu.Lock()
		for i := lo; i < min(lo+estimateChunk, len(hs)); i++ {
			f[i] = p.sk.EstimateHash(hs[i])
		}
		p.mu.Unlock()
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, s := range orderVictims(f, p.margin, order, nil) {
		if p.win.sampled(hs[s[0]]) { // one key in population/MinPopulation
			p.pool.swapped(hs[s[0]], hs[s[1]])
		}
	}
}

// estimateChunk is how many estimates OrderVictims reads per hold of the
// lock.
const estimateChunk = 1024
