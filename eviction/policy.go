package eviction

import (
	"fmt"
	"strings"
)

// Policy orders SSD buckets for eviction. See the package documentation for
// the contract of each method.
type Policy interface {
	// Add starts tracking bucket id of size bytes. Adding an id already
	// tracked replaces its size; lru and lru2 count it as a use, fifo keeps
	// its place.
	Add(id uint64, size int64)
	// Touch records a read of bucket id. Unknown ids are ignored.
	Touch(id uint64)
	// Remove stops tracking bucket id. Unknown ids are ignored.
	Remove(id uint64)
	// Victims returns ids in eviction order until their sizes sum to at
	// least need, leaving out ids for which skip (may be nil) is true; all
	// such ids if they do not reach need. It changes nothing.
	Victims(need int64, skip func(id uint64) bool) []uint64
	// Len is the number of tracked ids.
	Len() int
	// Size is the summed size of the tracked ids.
	Size() int64
}

// Names lists the policies New accepts.
var Names = []string{"lru", "fifo", "lru2", "worth"}

// New returns the policy named name: "lru" (also ""), "fifo", "lru2" or
// "worth" (lru order until given a WorthFunc through WorthAware).
func New(name string) (Policy, error) {
	switch name {
	case "lru", "":
		return NewLRU(), nil
	case "fifo":
		return NewFIFO(), nil
	case "lru2":
		return NewLRU2(), nil
	case "worth":
		return NewWorth(nil), nil
	}
	return nil, fmt.Errorf("%w %q (valid: %s)", ErrUnknownPolicy, name, strings.Join(Names, ", "))
}

func checkSize(id uint64, size int64) {
	if size < 0 {
		panic(fmt.Sprintf("eviction: Add of bucket %d with negative size %d", id, size))
	}
}

// listPolicy implements lru (touchMoves) and fifo (!touchMoves).
type listPolicy struct {
	touchMoves bool
	q          queue
	items      map[uint64]*item
}

// NewLRU returns a policy that evicts the least recently added or touched
// bucket first.
func NewLRU() Policy { return &listPolicy{touchMoves: true, items: map[uint64]*item{}} }

// NewFIFO returns a policy that evicts the oldest added bucket first; Touch
// does nothing.
func NewFIFO() Policy { return &listPolicy{items: map[uint64]*item{}} }

func (p *listPolicy) Add(id uint64, size int64) {
	checkSize(id, size)
	if it, ok := p.items[id]; ok {
		p.q.resize(it, size)
		if p.touchMoves {
			p.q.moveToFront(it)
		}
		return
	}
	it := &item{id: id, size: size}
	p.items[id] = it
	p.q.pushFront(it)
}

func (p *listPolicy) Touch(id uint64) {
	if !p.touchMoves {
		return
	}
	if it, ok := p.items[id]; ok {
		p.q.moveToFront(it)
	}
}

func (p *listPolicy) Remove(id uint64) {
	if it, ok := p.items[id]; ok {
		p.q.remove(it)
		delete(p.items, id)
	}
}

func (p *listPolicy) Victims(need int64, skip func(uint64) bool) []uint64 {
	if need <= 0 {
		return nil
	}
	var sum int64
	out, _ := p.q.collect(nil, &sum, need, skip)
	return out
}

func (p *listPolicy) Len() int    { return len(p.items) }
func (p *listPolicy) Size() int64 { return p.q.size }
