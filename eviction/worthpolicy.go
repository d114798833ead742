package eviction

import (
	"cmp"
	"math"
	"slices"
)

// WorthFunc gives a bucket's worth per byte (masterapi.SSDVictim.Density of
// what it still holds) for the "worth" policy, or false when it cannot tell. It is called
// from Victims, so under the tier engine's lock: it must not take that lock
// (the tier's index and the admission sketch have their own).
type WorthFunc func(id uint64) (density float64, ok bool)

// worthPolicy is "worth": a victim is the bucket of lowest worth per byte
// among all the tracked buckets, ties going to the least recently used
// (buckets the WorthFunc cannot weigh count as of infinite worth: lru
// order among them), so without a WorthFunc it is lru. Until issue 23's
// churn stop 40 it compared only the 8 least recently used buckets: a
// bucket written while the SSD filled, mixing a few popular objects with
// many read once, is read often enough never to be among those, and the
// SSD kept it for good (docs/benchmarks.md, churn stop 40). The WorthFunc
// is called once per tracked bucket per Victims call; the tier engine's
// caches what it computes (Engine.SetWorthFreq).
type worthPolicy struct {
	listPolicy
	worth WorthFunc
}

// NewWorth returns the "worth" policy with worth (nil: lru order until
// SetWorthFunc).
func NewWorth(worth WorthFunc) Policy {
	return &worthPolicy{listPolicy: listPolicy{touchMoves: true, items: map[uint64]*item{}}, worth: worth}
}

// WorthAware is implemented by policies that rank buckets with a
// WorthFunc; the tier engine hands its own over with SetWorthFunc after New.
type WorthAware interface {
	SetWorthFunc(WorthFunc)
}

// SetWorthFunc implements WorthAware.
func (p *worthPolicy) SetWorthFunc(w WorthFunc) { p.worth = w }

var _ WorthAware = (*worthPolicy)(nil)

func (p *worthPolicy) Victims(need int64, skip func(uint64) bool) []uint64 {
	if need <= 0 {
		return nil
	}
	if p.worth == nil {
		return p.listPolicy.Victims(need, skip)
	}
	type cand struct {
		it *item
		d  float64
	}
	var cands []cand
	for it := p.q.back; it != nil; it = it.prev { // least recently used first
		if skip != nil && skip(it.id) {
			continue
		}
		d, ok := p.worth(it.id)
		if !ok {
			d = math.Inf(1)
		}
		cands = append(cands, cand{it, d})
	}
	// Stable: equal worth keeps lru order.
	slices.SortStableFunc(cands, func(a, b cand) int { return cmp.Compare(a.d, b.d) })
	var out []uint64
	var sum int64
	for _, c := range cands {
		if sum >= need {
			break
		}
		out = append(out, c.it.id)
		sum += c.it.size
	}
	return out
}
