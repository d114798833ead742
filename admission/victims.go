package admission

import (
	"math"
	"sort"
)

// victimExperts chooses DRAM eviction victims between two experts, LeCaR's
// way: recency (the master's order, least recently used first) and
// frequency (lowest estimate first, ties in the master's order). A round's
// victims are a weighted share of each expert's picks; a victim that only
// one expert picked is remembered (a ghost of that expert) until it is
// looked up again, in DRAM's absence (a miss or an SSD hit), or falls out
// of the ghost: its return is the regret of the expert that chose it, whose
// weight then falls. Not safe for concurrent use (TinyLFU.mu).
type victimExperts struct {
	wFreq float64 // the frequency expert's weight; recency's is 1 - wFreq
	ghost map[uint64]ghostVictim
	order []uint64 // FIFO of ghost keys
	head  int
	size  int
	now   int64 // lookups seen
	stats [2]int64
}

type ghostVictim struct {
	freq bool
	at   int64
}

// expLearn is LeCaR's learning rate.
const expLearn = 0.45

func newVictimExperts(size int) victimExperts {
	return victimExperts{wFreq: 0.5, ghost: map[uint64]ghostVictim{}, order: make([]uint64, 0, size), size: size}
}

func (e *victimExperts) remember(h uint64, freq bool) {
	if len(e.order) < e.size {
		e.order = append(e.order, h)
	} else {
		old := e.order[e.head]
		if g, ok := e.ghost[old]; ok && g.at <= e.now {
			delete(e.ghost, old)
		}
		e.order[e.head] = h
		e.head = (e.head + 1) % e.size
	}
	e.ghost[h] = ghostVictim{freq: freq, at: e.now}
}

// lookup observes a demand lookup of h; inDRAM whether it hit DRAM.
func (e *victimExperts) lookup(h uint64, inDRAM bool) {
	e.now++
	g, ok := e.ghost[h]
	if !ok {
		return
	}
	delete(e.ghost, h)
	if inDRAM {
		return
	}
	d := math.Pow(0.005, float64(e.now-g.at)/float64(e.size))
	wf, wr := e.wFreq, 1-e.wFreq
	if g.freq {
		wf *= math.Exp(-expLearn * d)
		e.stats[1]++
	} else {
		wr *= math.Exp(-expLearn * d)
		e.stats[0]++
	}
	e.wFreq = min(max(wf/(wf+wr), 0.01), 0.99)
}

// ChooseVictims implements the master's victim chooser: keys are the DRAM
// eviction candidates in the master's order (best victim first); it
// returns the indexes of the n to evict.
func (p *TinyLFU) ChooseVictims(keys []string, n int) []int {
	n = min(n, len(keys))
	hs := make([]uint64, len(keys))
	est := make([]uint32, len(keys))
	p.mu.Lock()
	defer p.mu.Unlock()
	for i, k := range keys {
		hs[i] = hashKey(k)
		est[i] = p.sk.EstimateHash(hs[i])
	}
	byFreq := make([]int, len(keys))
	for i := range byFreq {
		byFreq[i] = i
	}
	sort.SliceStable(byFreq, func(a, b int) bool { return est[byFreq[a]] < est[byFreq[b]] })
	inFreq := make([]bool, len(keys))
	for _, i := range byFreq[:n] {
		inFreq[i] = true
	}
	nf := int(math.Round(p.exp.wFreq * float64(n)))
	if ExpFixedFreq >= 0 {
		nf = int(math.Round(ExpFixedFreq * float64(n)))
	}
	picked := make([]bool, len(keys))
	out := make([]int, 0, n)
	for _, i := range byFreq[:nf] {
		picked[i] = true
		out = append(out, i)
	}
	for i := 0; len(out) < n; i++ {
		if !picked[i] {
			picked[i] = true
			out = append(out, i)
		}
	}
	for _, i := range out {
		if inLRU := i < n; inLRU != inFreq[i] {
			p.exp.remember(hs[i], inFreq[i])
		}
	}
	return out
}

// ExpFixedFreq EXPERIMENT: >= 0 fixes the frequency share.
var ExpFixedFreq = -1.0
