package eviction

import "math"

// Valuer gives a bucket's value density (masterapi.SSDVictim.Density of what it still
// holds) for the "value" policy, or false when it cannot tell. It is called
// from Victims, so under the tier engine's lock: it must not take that lock
// (the tier's index and the admission sketch have their own).
type Valuer func(id uint64) (density float64, ok bool)

// valueWindow is how many of the least recently used buckets the "value"
// policy compares: the least valuable of them goes first.
const valueWindow = 8

// valuePolicy is "value": LRU order, but a victim is the bucket of lowest
// value density among the valueWindow least recently used ones (ties: the
// least recently used). Buckets the valuer cannot value count as
// infinitely valuable within the window, so without a valuer it is lru.
type valuePolicy struct {
	listPolicy
	valuer Valuer
}

// NewValue returns the "value" policy with valuer (nil: lru order until
// SetValuer).
func NewValue(valuer Valuer) Policy {
	return &valuePolicy{listPolicy: listPolicy{touchMoves: true, items: map[uint64]*item{}}, valuer: valuer}
}

// ValueAware is implemented by policies that rank buckets with a Valuer;
// the tier engine hands its valuer over with SetValuer after New.
type ValueAware interface {
	SetValuer(Valuer)
}

// SetValuer implements ValueAware.
func (p *valuePolicy) SetValuer(v Valuer) { p.valuer = v }

func (p *valuePolicy) Victims(need int64, skip func(uint64) bool) []uint64 {
	if need <= 0 {
		return nil
	}
	if p.valuer == nil {
		return p.listPolicy.Victims(need, skip)
	}
	taken := map[uint64]bool{}
	var out []uint64
	var sum int64
	for sum < need {
		var best *item
		bestD := math.Inf(1)
		seen := 0
		for it := p.q.back; it != nil && seen < valueWindow; it = it.prev {
			if taken[it.id] || (skip != nil && skip(it.id)) {
				continue
			}
			seen++
			d, ok := p.valuer(it.id)
			if !ok {
				d = math.Inf(1)
			}
			if best == nil || d < bestD {
				best, bestD = it, d
			}
		}
		if best == nil {
			break
		}
		taken[best.id] = true
		out = append(out, best.id)
		sum += best.size
	}
	return out
}
