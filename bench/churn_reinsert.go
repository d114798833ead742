package main

import "sort"

// reinsertRule decides which objects of a victim bucket are worth writing
// again, into the bucket being written, instead of leaving SSD with it
// (CacheLib Navy's reinsertion): the churn benchmark's
// tinylfu+worth+reinsert policy calls Keep from the tier's eviction
// callback with the victim's objects. It was measured there and costs hits
// (docs/bench/bench.md), so it lives with the experiment, not in package
// eviction. Whole buckets stay the
// unit of deletion; reinsertion moves the few hot objects of a cold bucket
// out of the way first.
//
// The bound is in bytes: at most MaxFraction of the victim's live bytes,
// and at most the room the caller has left in the bucket it is writing.
// Within it the hottest objects go first (ties: smaller first, then key
// order), and only objects whose estimated frequency reaches MinFreq.
// Re-insertion writes bytes a second time; the SSD write budget, when there
// is one, should be charged for them by the caller.
type reinsertRule struct {
	// MinFreq is the estimated frequency an object needs to be kept
	// (default 3: seen in several halving periods' worth of accesses, or
	// often in the current one).
	MinFreq uint32
	// MaxFraction bounds the kept bytes to this fraction of the victim's
	// live bytes (default 0.25; at most 1).
	MaxFraction float64
}

func (r reinsertRule) withDefaults() reinsertRule {
	if r.MinFreq == 0 {
		r.MinFreq = 3
	}
	if r.MaxFraction <= 0 {
		r.MaxFraction = 0.25
	}
	r.MaxFraction = min(r.MaxFraction, 1)
	return r
}

// keep returns, for each object of a victim bucket (keys, with value sizes
// in sizes), whether to re-insert it. freq estimates an object's access
// frequency (the admission sketch); room is the bytes the caller can still
// put in the bucket being written (< 0: no limit besides MaxFraction).
func (r reinsertRule) keep(keys [][]byte, sizes []int64, freq func(key []byte) uint32, room int64) []bool {
	r = r.withDefaults()
	keep := make([]bool, len(keys))
	var live int64
	type cand struct {
		i    int
		f    uint32
		size int64
	}
	var cands []cand
	for i, k := range keys {
		live += sizes[i]
		if f := freq(k); f >= r.MinFreq {
			cands = append(cands, cand{i, f, sizes[i]})
		}
	}
	budget := int64(r.MaxFraction * float64(live))
	if room >= 0 {
		budget = min(budget, room)
	}
	sort.Slice(cands, func(a, b int) bool {
		x, y := cands[a], cands[b]
		if x.f != y.f {
			return x.f > y.f
		}
		if x.size != y.size {
			return x.size < y.size
		}
		return string(keys[x.i]) < string(keys[y.i])
	})
	for _, c := range cands {
		if c.size <= budget {
			keep[c.i] = true
			budget -= c.size
		}
	}
	return keep
}
