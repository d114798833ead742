package eviction

import "math"

// WorthFunc gives a bucket's worth per byte (masterapi.SSDVictim.Density of
// what it still holds) for the "worth" policy, or false when it cannot tell. It is called
// from Victims, so under the tier engine's lock: it must not take that lock
// (the tier's index and the admission sketch have their own).
type WorthFunc func(id uint64) (density float64, ok bool)

// worthWindow is how many of the least recently used buckets the "worth"
// policy compares: the one of least worth goes first.
const worthWindow = 8

// worthPolicy is "worth": LRU order, but a victim is the bucket of lowest
// worth per byte among the worthWindow least recently used ones (ties: the
// least recently used). Buckets the WorthFunc cannot weigh count as of
// infinite worth within the window, so without a WorthFunc it is lru.
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
	taken := map[uint64]bool{}
	var out []uint64
	var sum int64
	for sum < need {
		var best *item
		bestD := math.Inf(1)
		seen := 0
		for it := p.q.back; it != nil && seen < worthWindow; it = it.prev {
			if taken[it.id] || (skip != nil && skip(it.id)) {
				continue
			}
			seen++
			d, ok := p.worth(it.id)
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
