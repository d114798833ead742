package admission

// The adaptive window. Every miss is put into DRAM, so DRAM is the
// window of a W-TinyLFU: a new key's put (estimate below ColdPutFreq)
// enters warm, pushing out what DRAM held longest, and the SSD admits
// what DRAM drops if it is worth its victim. On recency-driven traffic
// (a conversation's new blocks are read at its next turn) the window must
// be large; on frequency-driven traffic with bursts of one-off keys a
// burst larger than DRAM flushes it, and a small window keeps the
// frequent keys. No fixed size suits both (Caffeine's observation), so
// the window adapts, in the manner of ARC: a new key's put that the SSD
// would turn away enters cold (the first DRAM victim, ColdPutter) when
// its key's sample point (a fixed function of its hash, uniform in
// [0, 1)) is below the cold fraction. Two ghost lists remember the DRAM
// victims the SSD turned away: coldGhost those put cold as new keys
// (the window was denied to them), tailGhost the others (pushed out of
// DRAM by what entered after them). A lookup miss of a coldGhost key
// means a larger window would have hit: the fraction steps down; a miss
// of a tailGhost key means DRAM should have kept what it pushed out: the
// fraction steps up.

const (
	// windowStep is the move of the cold fraction per epoch.
	windowStep = 1.0 / 16
	// windowEpoch is the victims turned away between two steps.
	windowEpoch = 64
	// windowMinCold is the least cold fraction: the cold side always has
	// keys whose return rate is measured.
	windowMinCold = 1.0 / 16
)

// windowState is the cold fraction and its ghosts. Not safe for
// concurrent use (TinyLFU.mu).
type windowState struct {
	frac float64
	// coldNew and coldOld mark the keys put cold as new keys and as keys
	// coming back (until DRAM drops them or reads them); coldGhost and tailGhost are the ghosts above.
	coldNew, coldOld, coldGhost, tailGhost *ghost
	coldRegrets, tailRegrets               int64
	// The epoch's victims turned away and how many of them came back.
	coldLost, coldBack, tailLost, tailBack float64
}

func newWindowState(size int) windowState {
	return windowState{frac: windowMinCold, coldNew: newGhost(4 * size), coldOld: newGhost(4 * size), coldGhost: newGhost(size), tailGhost: newGhost(size)}
}

func (w *windowState) resize(size int) {
	w.coldNew.resize(4 * size)
	w.coldOld.resize(4 * size)
	w.coldGhost.resize(size)
	w.tailGhost.resize(size)
}

// windowLost records a DRAM victim the SSD turned away. Caller holds mu.
func (p *TinyLFU) windowLost(h uint64) {
	w := &p.window
	switch {
	case w.coldNew.take(h):
		w.coldGhost.add(h)
		w.coldLost++
	case w.coldOld.take(h):
		// Put cold as a key coming back: neither side's regret.
		return
	default:
		w.tailGhost.add(h)
		w.tailLost++
	}
	p.windowAdapt()
}

// windowRegret moves the cold fraction at a lookup miss of h. Caller
// holds mu.
func (p *TinyLFU) windowRegret(h uint64) {
	if p.cfg.FixedWindow {
		return
	}
	w := &p.window
	if w.coldGhost.take(h) {
		w.coldRegrets++
		w.coldBack++
	}
	if w.tailGhost.take(h) {
		w.tailRegrets++
		w.tailBack++
	}
}

// windowAdapt moves the cold fraction once an epoch of windowEpoch lost
// victims accumulated: down when the keys put cold came back more often
// than the tail pushed out, up in the opposite case. The counts are
// halved at each step so older epochs still weigh. Caller holds mu.
func (p *TinyLFU) windowAdapt() {
	w := &p.window
	if p.cfg.FixedWindow || w.coldLost+w.tailLost < windowEpoch {
		return
	}
	if w.coldLost >= 1 && w.tailLost >= 1 {
		rc, rt := w.coldBack/w.coldLost, w.tailBack/w.tailLost
		switch {
		case rc > rt:
			w.frac = max(windowMinCold, w.frac-windowStep)
		case rt > rc:
			w.frac = min(1, w.frac+windowStep)
		}
	}
	w.coldLost, w.coldBack, w.tailLost, w.tailBack = w.coldLost/2, w.coldBack/2, w.tailLost/2, w.tailBack/2
}

// samplePoint is h's fixed point in [0, 1), independent of the bits the
// sketch and the ghost lists use most.
func samplePoint(h uint64) float64 {
	h ^= h >> 29
	h *= 0xbf58476d1ce4e5b9
	h ^= h >> 32
	return float64(h>>11) / (1 << 53)
}

// windowHit forgets a cold put's mark when DRAM answers its key (the
// master made it warm). Caller holds mu.
func (p *TinyLFU) windowHit(h uint64) {
	p.window.coldNew.take(h)
	p.window.coldOld.take(h)
}
