package main

import (
	"container/list"

	"github.com/tierstore/tierstore/admission"
	"github.com/tierstore/tierstore/bench/internal/trace"
)

// The single-tier W-TinyLFU reference. The two tiers' admission is judged
// against what a textbook W-TinyLFU (Einziger, Friedman and Manes, 2017)
// gets on one cache of the blocks the two tiers hold (churnUsableBlocks):
// a window LRU of 1% of the capacity in front of a segmented LRU (20%
// probation, 80% protected), the window's victim entering the main cache
// only if its estimated frequency exceeds that of the probation victim it
// would displace (TinyLFU's admission, the incumbent winning ties), with
// the same frequency sketch as the store's policy (admission.Sketch: 4-bit
// count-min behind a doorkeeper, halved every 10 x capacity accesses). No
// hill climbing: the window stays at 1%. It may decline to keep a missed
// block (the window's victim is dropped), which the two tiers cannot (a
// miss is put, and enters DRAM), so it can beat the two-tier bound.

// wtinyLFUHits replays reqs through a W-TinyLFU of capacity objects and
// returns its hits. Sizes are ignored (one slot per object).
func wtinyLFUHits(reqs []trace.Request, capacity int) int64 {
	if capacity <= 0 {
		return 0
	}
	w := max(1, capacity/100)
	mainCap := capacity - w
	protCap := mainCap * 8 / 10
	c := &wtlfu{
		sk:  admission.NewSketch(int64(capacity), 10*int64(capacity)),
		pos: map[string]*wtEntry{},
	}
	var hits int64
	for _, r := range reqs {
		c.sk.Add(r.Key)
		if e := c.pos[r.Key]; e != nil {
			hits++
			c.hit(e, protCap)
			continue
		}
		e := &wtEntry{key: r.Key, seg: wtWindow}
		e.el = c.window.PushFront(e)
		c.pos[r.Key] = e
		if c.window.Len() <= w {
			continue
		}
		cand := c.window.Remove(c.window.Back()).(*wtEntry)
		if c.probation.Len()+c.protected.Len() < mainCap {
			cand.seg = wtProbation
			cand.el = c.probation.PushFront(cand)
			continue
		}
		seg := &c.probation
		if seg.Len() == 0 {
			seg = &c.protected
		}
		victim := seg.Back().Value.(*wtEntry)
		if c.sk.Estimate(cand.key) > c.sk.Estimate(victim.key) {
			seg.Remove(victim.el)
			delete(c.pos, victim.key)
			cand.seg = wtProbation
			cand.el = c.probation.PushFront(cand)
		} else {
			delete(c.pos, cand.key)
		}
	}
	return hits
}

type wtSegment uint8

const (
	wtWindow wtSegment = iota
	wtProbation
	wtProtected
)

type wtEntry struct {
	key string
	seg wtSegment
	el  *list.Element
}

// wtlfu is the reference's state: three LRU lists (front: most recent)
// and the sketch.
type wtlfu struct {
	sk                           *admission.Sketch
	window, probation, protected list.List
	pos                          map[string]*wtEntry
}

// hit moves e to the front of its segment; a probation hit promotes it to
// protected, whose least recent entry goes back to probation when
// protected is over its share.
func (c *wtlfu) hit(e *wtEntry, protCap int) {
	switch e.seg {
	case wtWindow:
		c.window.MoveToFront(e.el)
	case wtProtected:
		c.protected.MoveToFront(e.el)
	case wtProbation:
		c.probation.Remove(e.el)
		e.seg = wtProtected
		e.el = c.protected.PushFront(e)
		if c.protected.Len() > protCap {
			d := c.protected.Remove(c.protected.Back()).(*wtEntry)
			d.seg = wtProbation
			d.el = c.probation.PushFront(d)
		}
	}
}
