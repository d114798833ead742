package eviction

const (
	// promoteHits is the number of reads in probation that promote a bucket
	// to the protected segment.
	promoteHits = 2
	// protectedPercent bounds the protected segment's share of the tracked
	// bytes.
	protectedPercent = 80
)

// lru2 is the segmented LRU described in the package documentation.
type lru2 struct {
	probation, protected queue
	items                map[uint64]*item
}

// NewLRU2 returns the "lru2" policy: a segmented LRU in which a bucket read
// twice is protected from one-hit traffic (see the package documentation).
func NewLRU2() Policy { return &lru2{items: map[uint64]*item{}} }

func (p *lru2) seg(it *item) *queue {
	if it.protected {
		return &p.protected
	}
	return &p.probation
}

func (p *lru2) Add(id uint64, size int64) {
	checkSize(id, size)
	if it, ok := p.items[id]; ok {
		p.seg(it).resize(it, size)
		p.Touch(id)
		return
	}
	it := &item{id: id, size: size}
	p.items[id] = it
	p.probation.pushFront(it)
	p.rebalance()
}

func (p *lru2) Touch(id uint64) {
	it, ok := p.items[id]
	if !ok {
		return
	}
	if it.protected {
		p.protected.moveToFront(it)
		return
	}
	it.hits++
	if it.hits < promoteHits {
		p.probation.moveToFront(it)
		return
	}
	p.probation.remove(it)
	it.protected = true
	p.protected.pushFront(it)
	p.rebalance()
}

// rebalance demotes the least recently used protected buckets while the
// protected segment holds more than protectedPercent of the bytes (always
// keeping one, so that a single bucket larger than the share stays
// protected). A demoted bucket goes to the front of probation with one hit:
// one more read promotes it again.
func (p *lru2) rebalance() {
	total := p.probation.size + p.protected.size
	for p.protected.n > 1 && p.protected.size*100 > total*protectedPercent {
		it := p.protected.back
		p.protected.remove(it)
		it.protected = false
		it.hits = promoteHits - 1
		p.probation.pushFront(it)
	}
}

func (p *lru2) Remove(id uint64) {
	it, ok := p.items[id]
	if !ok {
		return
	}
	p.seg(it).remove(it)
	delete(p.items, id)
	// Removing probation bytes can leave protected above its share; it
	// is corrected at the next Add or promotion, since Remove is usually
	// called for a victim in the middle of an eviction round.
}

func (p *lru2) Victims(need int64, skip func(uint64) bool) []uint64 {
	if need <= 0 {
		return nil
	}
	var sum int64
	out, done := p.probation.collect(nil, &sum, need, skip)
	if !done {
		out, _ = p.protected.collect(out, &sum, need, skip)
	}
	return out
}

func (p *lru2) Len() int    { return len(p.items) }
func (p *lru2) Size() int64 { return p.probation.size + p.protected.size }
