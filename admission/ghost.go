package admission

// ghost is a bounded FIFO set of key hashes: the keys admission turned
// away (rejected candidates) or pushed out of SSD (evicted buckets'
// objects), remembered for a while after they left. A later lookup miss of
// a remembered key is a regret of that decision (see TinyLFU's adaptive
// margin). Not safe for concurrent use (TinyLFU.mu).
type ghost struct {
	ring []ghostEntry
	next int
	seq  uint64
	set  map[uint64]uint64 // hash -> seq of its newest ring entry
}

type ghostEntry struct{ h, seq uint64 }

func newGhost(size int) *ghost {
	return &ghost{ring: make([]ghostEntry, max(size, 1)), set: map[uint64]uint64{}}
}

// add remembers h, forgetting the oldest entry when full.
func (g *ghost) add(h uint64) {
	old := g.ring[g.next]
	if s, ok := g.set[old.h]; ok && s == old.seq && old.seq != 0 {
		delete(g.set, old.h)
	}
	g.seq++
	g.ring[g.next] = ghostEntry{h: h, seq: g.seq}
	g.set[h] = g.seq
	g.next = (g.next + 1) % len(g.ring)
}

// take reports whether h is remembered, and forgets it.
func (g *ghost) take(h uint64) bool {
	if _, ok := g.set[h]; !ok {
		return false
	}
	delete(g.set, h)
	return true
}

// resize changes the capacity to size entries, keeping the newest. A
// change of less than an eighth is ignored (reports arrive every
// heartbeat; the size they imply wobbles).
func (g *ghost) resize(size int) {
	size = max(size, 1)
	if d := size - len(g.ring); d*8 < len(g.ring) && -d*8 < len(g.ring) {
		return
	}
	n := newGhost(size)
	// Replay the live entries oldest first.
	for i := 0; i < len(g.ring); i++ {
		e := g.ring[(g.next+i)%len(g.ring)]
		if s, ok := g.set[e.h]; ok && s == e.seq && e.seq != 0 {
			n.add(e.h)
		}
	}
	*g = *n
}

// regret records a lookup miss of h: a regret of rejecting it when h is a
// rejected candidate still remembered, a regret of pushing it out when h
// left SSD not long ago. Caller holds TinyLFU.mu.
func (p *TinyLFU) regret(h uint64) {
	if p.rejected.take(h) {
		p.adapt.rejectHits++
		p.st.regretRejected.Add(1)
	}
	if p.pushed.take(h) {
		p.adapt.pushHits++
		p.st.regretPushed.Add(1)
	}
}

// adaptState counts, since the last adaptation step (halved at each step
// so that older epochs still weigh), the rejections and the pushed-out
// objects, and how many of each came back while remembered.
type adaptState struct {
	rejects, rejectHits float64
	pushes, pushHits    float64
}

// adaptEvery is the number of rejections plus pushed-out objects between
// two adaptation steps.
const adaptEvery = 64

// maybeAdapt moves the margin once enough decisions accumulated: down by
// MarginStep when a rejected candidate came back more often than an object
// pushed out of SSD (turning candidates away costs more hits than the
// evictions admission causes), up in the opposite case. Without pushed-out
// objects in the epoch nothing moves: the cost of admitting is unknown, and
// a loop larger than the cache rejects everything (some of it coming back)
// while it keeps a fixed part. Caller holds TinyLFU.mu.
func (p *TinyLFU) maybeAdapt() {
	a := &p.adapt
	if p.cfg.MarginStep <= 0 || a.rejects+a.pushes < adaptEvery {
		return
	}
	if a.pushes >= 1 && a.rejects >= 1 {
		rR, rV := ratioOf(a.rejectHits, a.rejects), ratioOf(a.pushHits, a.pushes)
		switch {
		case rR > rV:
			p.margin = max(0, p.margin-p.cfg.MarginStep)
		case rV > rR:
			p.margin = min(p.cfg.MaxMargin, p.margin+p.cfg.MarginStep)
		}
	}
	a.rejects, a.rejectHits, a.pushes, a.pushHits = a.rejects/2, a.rejectHits/2, a.pushes/2, a.pushHits/2
}

// ObserveSSDEviction records that keys left an SSD (the node evicted their
// bucket): a later miss of one of them raises the margin.
func (p *TinyLFU) ObserveSSDEviction(keys []string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, k := range keys {
		h := hashKey(k)
		p.pushed.add(h)
		p.win.pushedOut(h)
	}
	p.adapt.pushes += float64(len(keys))
	p.st.pushedKeys.Add(int64(len(keys)))
	p.maybeAdapt()
}

// resizeGhosts sizes the ghost lists for an SSD of about objects objects.
// Caller holds TinyLFU.mu.
func (p *TinyLFU) resizeGhosts(objects int64) {
	n := int(max(64, float64(objects)*p.cfg.GhostFraction))
	p.rejected.resize(n)
	p.pushed.resize(n)
}

// Margin is the current adaptive margin.
func (p *TinyLFU) Margin() float64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.margin
}

func ratioOf(n, d float64) float64 {
	if d <= 0 {
		return 0
	}
	return n / d
}
