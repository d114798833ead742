package admission

// The adaptive margin (see TinyLFUConfig.MaxMargin and the package
// documentation). Its ghosts are the new-key window's return ghosts
// (window.go), on the window's clock and horizon: rejected, the
// candidates the margin alone turned away (they beat the victim's density
// without it), and pushed, the objects the SSD evicted. Both rates are
// measured over the same horizon, and only decisions the margin made are
// counted on the rejected side, so the comparison is of like with like:
// until stop 43 two FIFO lists of equal length remembered every rejection
// and every pushed-out object; rejections arrive far faster than
// evictions, so a rejected key was remembered for a fraction of the time
// a pushed-out one was, and most rejected keys would have lost at any
// margin (docs/benchmarks.md, churn stop 43).

// adaptEvery is the number of outcomes (returns and expiries, of both
// ghosts) between two adaptation steps.
const adaptEvery = 64

// adaptMargin steps the margin every adaptEvery outcomes of the two
// ghosts, when pushed counted at least one outcome since the last step
// (while the margin turns every candidate away the SSD pushes nothing
// out, and the rate of pushed-out objects is that of an old epoch; the
// rejected side may be old: at margin 0 the margin turns nothing away,
// and its last rate stands): down by MarginStep while the
// candidates the margin turned away come back more often than what the
// SSD pushed out, up in the opposite case, by more than the noise
// (newKeyWindow.marginMove), within [0, MaxMargin]. Caller holds
// TinyLFU.mu.
func (p *TinyLFU) adaptMargin() {
	w := &p.win
	n := w.rejected.outcomes + w.pushed.outcomes
	if p.cfg.MarginStep <= 0 || n-p.adapt.at < adaptEvery {
		return
	}
	fresh := w.pushed.outcomes > p.adapt.pushed
	p.adapt = adaptState{at: n, pushed: w.pushed.outcomes}
	if !fresh {
		return
	}
	switch w.marginMove() {
	case -1:
		p.margin = max(0, p.margin-p.cfg.MarginStep)
	case 1:
		p.margin = min(p.cfg.MaxMargin, p.margin+p.cfg.MarginStep)
	}
}

// adaptState is the ghosts' outcome counts at the last adaptation step.
type adaptState struct {
	at, pushed int64
}

// ObserveSSDEviction records that keys left an SSD (the node evicted their
// bucket): a return of one of them within the horizon raises the margin,
// and counts against new keys in the new-key window.
func (p *TinyLFU) ObserveSSDEviction(keys []string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, k := range keys {
		p.win.pushedOut(hashKey(k))
	}
	p.st.pushedKeys.Add(int64(len(keys)))
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

// ghostEntry is one entry of a returnGhost's ring: a key hash and the
// clock at which it was recorded.
type ghostEntry struct{ h, seq uint64 }
