package admission

import (
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tierstore/tierstore/bucket"
	"github.com/tierstore/tierstore/masterapi"
)

// TinyLFUConfig tunes the TinyLFU policy. The zero value of each field
// takes the default in its comment (chosen from `go run ./bench churn`,
// docs/bench/bench.md).
type TinyLFUConfig struct {
	// SampleFactor sets the ageing period: the sketch halves every
	// SampleFactor x (objects cached) accesses (admission_sample_factor,
	// default 10, the TinyLFU paper's W/C).
	SampleFactor int64
	// Margin is what a candidate's frequency must exceed the displaced
	// bucket's worth per byte by, at start (admission_margin; used as
	// given, the flag's default is 1, DefaultTinyLFUConfig). The incumbent
	// always wins ties. A margin of one access absorbs the phase
	// difference of a loop: a key just seen again counts one more than a
	// key of the same loop still waiting for its turn, and without the
	// margin it would displace it, which is LRU's failure on loops. On
	// recency-driven traffic the same margin turns away objects that come
	// back soon, so the margin adapts (see MaxMargin).
	Margin float64
	// MaxMargin bounds the adaptive margin (default 2). The margin moves
	// by MarginStep down while candidates that the margin alone turned
	// away come back within the horizon (the new-key window's) more often
	// than objects pushed out of SSD, and up in the opposite case, in
	// [0, MaxMargin] (the idea of ARC's ghost lists; ghost.go).
	// MaxMargin equal to Margin with a negative MarginStep keeps it fixed.
	MaxMargin float64
	// FreeRoom admits every candidate that fits under the high watermark,
	// as before the room test (see valueTest); for comparisons.
	FreeRoom bool
	// MarginStep is the adaptation step (default 0.25; negative: none).
	MarginStep float64
	// WriteBudget is the SSD write budget per node in bytes per second
	// (ssd_write_budget, in MB/s on the command line); 0 = no budget.
	// Tokens accumulate for at most one second of budget. When tokens run
	// short, low-frequency candidates are refused first: a candidate of
	// frequency f may only spend tokens down to (1 - f/16) of the burst.
	WriteBudget float64
	// PromoteFreq: an object read from SSD whose estimated frequency
	// reaches this is worth a DRAM copy (dram_promotion_min_freq); 0 = no
	// promotion.
	PromoteFreq uint32
	// ColdPutFreq: a put of a key whose estimated frequency, this access
	// included, reaches ColdPutFreq enters DRAM cold (ColdPutter): the key
	// left DRAM and SSD and came back, its reuse distance is longer than
	// what the two tiers keep, and it should not push out objects that
	// DRAM holds for longer. 0 = every put is warm (DRAM is LRU).
	// admission_cold_put_freq; the flag's default is 2
	// (DefaultTinyLFUConfig). A put of a new key (estimate below
	// ColdPutFreq) is cold when the new-key window says so (window.go)
	// and the SSD would turn it away.
	ColdPutFreq uint32
	// WarmNewKeys puts every new key warm, as before the new-key window
	// (stop 37); for comparisons.
	WarmNewKeys bool
	// AtPut admits at PutEnd (an inclusive SSD: DRAM and SSD hold copies)
	// instead of when DRAM eviction drops the object (exclusive, the
	// default). Exclusive keeps more distinct objects in DRAM+SSD; see
	// docs/bench/bench.md.
	AtPut bool
	// MinPopulation is the cache size, in objects, assumed while the
	// master holds fewer (default 1024).
	MinPopulation int64
	// Now is the clock of the write budget; default time.Now.
	Now func() time.Time
}

func (c *TinyLFUConfig) defaults() {
	if c.SampleFactor <= 0 {
		c.SampleFactor = 10
	}
	if c.Margin < 0 {
		c.Margin = 0
	}
	if c.MaxMargin == 0 {
		c.MaxMargin = max(2, c.Margin)
	}
	c.MaxMargin = max(c.MaxMargin, c.Margin)
	if c.MarginStep == 0 {
		c.MarginStep = 0.25
	}
	if c.MinPopulation <= 0 {
		c.MinPopulation = 1024
	}
	if c.Now == nil {
		c.Now = time.Now
	}
}

// DefaultTinyLFUConfig is the configuration of the flags' defaults.
func DefaultTinyLFUConfig() TinyLFUConfig {
	c := TinyLFUConfig{Margin: 1, ColdPutFreq: 2}
	c.defaults()
	return c
}

// Outcome classifies a demand lookup for TinyLFU.ObserveLookup.
type Outcome uint8

const (
	// Miss: the key has no readable replica.
	Miss Outcome = iota
	// DRAMHit: a DRAM replica answers it.
	DRAMHit
	// SSDHit: only SSD replicas answer it (the reader goes to SSD).
	SSDHit
)

// Reason says why TinyLFU accepted or rejected a candidate (metrics label).
type Reason uint8

const (
	// AcceptRoom: the candidate fits under the node's high watermark.
	AcceptRoom Reason = iota
	// AcceptWon: the candidate's frequency beats the worth per byte of the
	// bucket it would displace by more than the margin.
	AcceptWon
	// AcceptNoReport: the node has not reported its SSD; the candidate is
	// admitted as offload_on_evict would.
	AcceptNoReport
	// RejectLost: the bucket it would displace is worth at least as much.
	RejectLost
	// RejectBudget: the SSD write budget has no tokens for a candidate of
	// this value.
	RejectBudget
	// RejectNoVictim: the SSD is full and the node reported no bucket it
	// could evict.
	RejectNoVictim
	numReasons
)

var reasonNames = [numReasons]string{"room", "won", "no_report", "lost", "budget", "no_victim"}

func (r Reason) String() string {
	if r < numReasons {
		return reasonNames[r]
	}
	return "unknown"
}

// Accepted reports whether r is an acceptance.
func (r Reason) Accepted() bool { return r <= AcceptNoReport }

// recentMisses is the size of the table that pairs a put with the lookup
// miss just before it, so that a miss followed by its put counts as one
// access.
const recentMisses = 1 << 12

// TinyLFU is the frequency-based admission policy (offload_admission_policy
// = tinylfu): see the package documentation.
type TinyLFU struct {
	cfg TinyLFUConfig

	// mu protects sk, recent, nodes, population, admittedCost, the margin
	// and its adaptation state, and win (whose ghosts the margin uses).
	mu     sync.Mutex
	sk     *Sketch
	recent [recentMisses]uint64
	nodes  map[string]*nodeState
	// population returns the number of objects cached (DRAM and SSD);
	// nil: MinPopulation.
	population func() int64
	// margin is the current, adaptive margin (ghost.go; its ghosts are
	// win's).
	margin float64
	adapt  adaptState
	// win decides whether new keys enter DRAM warm or cold.
	win newKeyWindow
	// admittedCost is the sum of ssdCost over every admitted object: the
	// report counts outstanding tasks at its average.
	admittedCost int64

	st tinyStats
}

type nodeState struct {
	rep masterapi.SSDReport
	// pending bounds the SSD bytes of the objects admitted to the node
	// but not in rep.Used yet: each at ssdCost, the size of a bucket file
	// of its own.
	pending int64
	tokens  float64
	last    time.Time // of the last token refill
}

type tinyStats struct {
	decisions        [numReasons]atomic.Int64
	lookups          [3]atomic.Int64
	admitted         atomic.Int64
	admittedBytes    atomic.Int64
	ssdHitBytes      atomic.Int64
	promotions       atomic.Int64
	coldPuts         atomic.Int64
	coldNewPuts      atomic.Int64
	pushedKeys       atomic.Int64
	reports, resizes atomic.Int64
}

// NewTinyLFU returns the policy with cfg (zero fields take their defaults).
func NewTinyLFU(cfg TinyLFUConfig) *TinyLFU {
	cfg.defaults()
	p := &TinyLFU{cfg: cfg, nodes: map[string]*nodeState{}, margin: cfg.Margin}
	p.sk = NewSketch(cfg.MinPopulation, cfg.SampleFactor*cfg.MinPopulation)
	p.win = newNewKeyWindow(cfg.MinPopulation)
	return p
}

// Config returns the configuration in use, defaults applied.
func (p *TinyLFU) Config() TinyLFUConfig { return p.cfg }

func (p *TinyLFU) Name() string { return "tinylfu" }

// WantsLookups is true: the master must pass its demand lookups
// (ObserveLookup is what learns from them; OnLookup itself never queues).
func (p *TinyLFU) WantsLookups() bool { return true }

// OnLookup never queues: TinyLFU admits when DRAM drops an object (or at
// PutEnd with AtPut).
func (p *TinyLFU) OnLookup(o *Object) bool { return false }

// SetPopulation gives the policy the number of objects cached (the
// master's object count), which sizes the sketch and its ageing period.
func (p *TinyLFU) SetPopulation(f func() int64) {
	p.mu.Lock()
	p.population = f
	p.mu.Unlock()
}

// add records an access of h. Caller holds mu.
func (p *TinyLFU) add(h uint64) {
	if p.sk.AddHash(h) {
		p.aged()
	}
}

// aged recomputes the period (and, when the cache outgrew the sketch, its
// width) after a halving. Caller holds mu.
func (p *TinyLFU) aged() {
	pop := p.cfg.MinPopulation
	if p.population != nil {
		pop = max(pop, p.population())
	}
	p.win.setPopulation(pop, p.cfg.MinPopulation)
	if 2*pop > p.sk.Width() && p.sk.Width() < maxSketchSize {
		// The counters were just halved; starting afresh with room for
		// the cache loses little.
		resets := p.sk.resets
		p.sk.resize(pop, p.cfg.SampleFactor*pop)
		p.sk.resets = resets
		p.st.resizes.Add(1)
		return
	}
	p.sk.SetPeriod(p.cfg.SampleFactor * pop)
}

// ObserveLookup records one demand lookup of key (the master calls it for
// every counted lookup, hit or miss, once per key and batch, never for the
// offload path). size is the object's size (0 on a miss).
func (p *TinyLFU) ObserveLookup(key string, o Outcome, size int64) {
	h := hashKey(key)
	p.mu.Lock()
	p.add(h)
	p.win.lookup(h)
	p.adaptMargin()
	if o == Miss {
		p.recent[h&(recentMisses-1)] = h
	}
	p.mu.Unlock()
	if int(o) < len(p.st.lookups) {
		p.st.lookups[o].Add(1)
	}
	if o == SSDHit {
		p.st.ssdHitBytes.Add(size)
	}
}

// AtPutEnd records the put as an access, unless it is the put that follows
// a lookup miss of the same key (one request, counted once). With
// Config.AtPut it is also the admission point.
func (p *TinyLFU) AtPutEnd(o Object) bool {
	h := hashKey(o.Key)
	p.mu.Lock()
	defer p.mu.Unlock()
	if i := h & (recentMisses - 1); p.recent[i] == h {
		p.recent[i] = 0
	} else {
		p.add(h)
	}
	if !p.cfg.AtPut || !eligible(o) {
		return false
	}
	return p.admitLocked(o, h)
}

// OnEvict is the admission point: DRAM eviction picked o.
func (p *TinyLFU) OnEvict(o Object) bool {
	h := hashKey(o.Key)
	p.mu.Lock()
	defer p.mu.Unlock()
	p.win.evicted(h)
	if p.cfg.AtPut || !eligible(o) {
		return false
	}
	return p.admitLocked(o, h)
}

// admitLocked decides, counts and accounts one candidate. Caller holds mu.
func (p *TinyLFU) admitLocked(o Object, h uint64) bool {
	f := p.sk.EstimateHash(h)
	st := p.nodes[o.Node]
	cost := ssdCost(o)
	r, d := p.decide(f, o.Size, cost, st)
	p.st.decisions[r].Add(1)
	if fd := float64(f); fd > d && (r == RejectLost || p.margin == 0 && fd <= d+p.cfg.MarginStep) {
		// In the margin's band: turned away by the margin alone, or (at
		// margin 0) admitted where the next step up would turn it away.
		p.win.inBand(h)
	}
	if !r.Accepted() {
		return false
	}
	p.admittedCost += cost
	if st != nil {
		st.pending += cost
		if p.cfg.WriteBudget > 0 {
			st.tokens -= float64(o.Size)
		}
	}
	p.st.admitted.Add(1)
	p.st.admittedBytes.Add(o.Size)
	return true
}

// decide is the admission test of a candidate of estimated frequency f,
// size bytes and SSD cost (ssdCost) on a node in state st (nil: no
// report), with the density of the victim it was compared with (see
// valueTest). It changes nothing but the budget's refill. Caller holds mu.
func (p *TinyLFU) decide(f uint32, size, cost int64, st *nodeState) (Reason, float64) {
	if st == nil {
		return AcceptNoReport, math.Inf(1)
	}
	r, d := p.valueTest(f, cost, st)
	if r.Accepted() && p.cfg.WriteBudget > 0 && !p.budgetAllows(f, size, st) {
		return RejectBudget, d
	}
	return r, d
}

// valueTest compares a candidate of SSD cost bytes (ssdCost) with the SSD:
// room under the high watermark admits; otherwise the candidate must beat
// the bucket its bytes would displace (the victims are consumed in order
// by the bytes admitted beyond the watermark since the report) by more
// than the margin. It returns the density of the victim the candidate is
// (or, in free room, would be) compared with: +Inf when there is none.
func (p *TinyLFU) valueTest(f uint32, cost int64, st *nodeState) (Reason, float64) {
	rep := &st.rep
	if rep.High <= 0 {
		return AcceptRoom, math.Inf(1)
	}
	after := rep.Used + st.pending + cost
	over := after - rep.High
	if over <= 0 {
		if len(rep.Victims) == 0 {
			return AcceptRoom, math.Inf(1)
		}
		// Room between the watermarks is the next victim's, which the
		// next eviction takes.
		d := rep.Victims[0].Density()
		if after <= rep.Low || !p.roomTested() {
			return AcceptRoom, d
		}
		if float64(f) > d+p.margin {
			return AcceptWon, d
		}
		return RejectLost, d
	}
	if len(rep.Victims) == 0 {
		return RejectNoVictim, math.Inf(1)
	}
	var cum int64
	d := rep.Victims[len(rep.Victims)-1].Density()
	for _, v := range rep.Victims {
		cum += v.FileBytes
		if cum >= over {
			d = v.Density()
			break
		}
	}
	if float64(f) > d+p.margin {
		return AcceptWon, d
	}
	return RejectLost, d
}

// roomTested reports whether a candidate that fits under the high
// watermark but not under the low one must beat the next victim: once an
// SSD has evicted (the room between the watermarks is then what the last
// eviction freed, and what is admitted into it decides what the next one
// takes), while the adaptive margin is above 0 (the ghosts do not say
// that the candidates the margin turns away come back more often than
// pushed-out objects), unless Config.FreeRoom. Caller holds mu.
func (p *TinyLFU) roomTested() bool {
	return !p.cfg.FreeRoom && p.margin > 0 && p.st.pushedKeys.Load() > 0
}

// ssdCost bounds the SSD bytes o takes once written: the size of a bucket
// file holding o alone (header, o's data to the block boundary, its
// trailer entry, footer). An offload round writes its last bucket partly
// full, so an object at the end of one may pay a bucket's fixed overhead
// alone; priced as a share of full buckets (the bucket format's average
// expansion) the estimate admitted one object too many at the watermark's
// edge, and the tier evicted a bucket to make room for it. The bound
// overprices objects that share a bucket by about a bucket's overhead
// each (8 KiB for keys of up to 4008 bytes), until the next report
// replaces it with the tier's own count.
func ssdCost(o Object) int64 {
	return bucket.Size(1, int64(len(o.Key)), bucket.AlignUp(o.Size))
}

// budgetAllows refills the node's tokens and reports whether a candidate of
// frequency f may spend size of them: it may go down to a floor of
// (1 - f/16) of the burst, so as tokens run out the least frequent
// candidates are refused first. Caller holds mu.
func (p *TinyLFU) budgetAllows(f uint32, size int64, st *nodeState) bool {
	burst := p.cfg.WriteBudget // one second of budget
	now := p.cfg.Now()
	if st.last.IsZero() {
		st.tokens = burst
	} else if dt := now.Sub(st.last).Seconds(); dt > 0 {
		st.tokens = math.Min(burst, st.tokens+dt*p.cfg.WriteBudget)
	}
	st.last = now
	floor := burst * math.Max(0, 1-float64(f)/16)
	return st.tokens-float64(size) >= floor
}

// budgetWouldAllow is budgetAllows without its refill: what it would
// answer now, changing nothing. Caller holds mu.
func (p *TinyLFU) budgetWouldAllow(f uint32, size int64, st *nodeState) bool {
	burst := p.cfg.WriteBudget
	tokens := burst
	if !st.last.IsZero() {
		tokens = st.tokens
		if dt := p.cfg.Now().Sub(st.last).Seconds(); dt > 0 {
			tokens = math.Min(burst, tokens+dt*p.cfg.WriteBudget)
		}
	}
	return tokens-float64(size) >= burst*math.Max(0, 1-float64(f)/16)
}

// ReportSSD records node's SSD report (the heartbeat carries it).
// outstanding is the number of the node's offload tasks the master still
// has queued or in flight: admitted, but not in the report's Used yet; they
// are counted at the average size of admitted objects.
func (p *TinyLFU) ReportSSD(node string, r masterapi.SSDReport, outstanding int) {
	p.ReportSSDCounted(node, r, func() int { return outstanding })
}

// ReportSSDCounted is ReportSSD with the outstanding tasks counted by
// outstanding, called under the policy's lock: an admission (which takes
// the lock) is then either before the count, and counted in it by a
// caller that counts an admitted object until its task is queued, or after
// the report, and added to it. The master reports this way (counting with
// ReportSSD, an admission between the caller's count and the report would
// be forgotten, and the room estimate would admit one object too many).
func (p *TinyLFU) ReportSSDCounted(node string, r masterapi.SSDReport, outstandingFn func() int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	outstanding := outstandingFn()
	st := p.nodes[node]
	if st == nil {
		st = &nodeState{}
		p.nodes[node] = st
	}
	st.rep = r
	st.pending = 0
	if n := p.st.admitted.Load(); n > 0 && outstanding > 0 {
		st.pending = int64(outstanding) * (p.admittedCost / n)
	}
	p.st.reports.Add(1)
}

// ForgetNode drops node's report (the node left).
func (p *TinyLFU) ForgetNode(node string) {
	p.mu.Lock()
	delete(p.nodes, node)
	p.mu.Unlock()
}

// Estimate is key's estimated frequency (0..16).
func (p *TinyLFU) Estimate(key string) uint32 {
	h := hashKey(key)
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.sk.EstimateHash(h)
}

// EstimateBytes is Estimate of a key given as bytes (the tier's form).
func (p *TinyLFU) EstimateBytes(key []byte) uint32 {
	h := hashKey(key)
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.sk.EstimateHash(h)
}

// Promote says whether an object read from SSD is worth a DRAM copy: its
// estimated frequency reaches PromoteFreq (never when PromoteFreq is 0).
// A true answer is counted as a promotion.
func (p *TinyLFU) Promote(key string) bool {
	if p.cfg.PromoteFreq == 0 {
		return false
	}
	if p.Estimate(key) < p.cfg.PromoteFreq {
		return false
	}
	p.st.promotions.Add(1)
	return true
}

// ColdPut implements ColdPutter: o's node's SSD would turn o away now (its
// SSD is full of buckets worth at least as much, or reported none it could
// evict, or the write budget would refuse it), and either o's key is
// coming back (its estimated frequency, this access included, reaches
// ColdPutFreq: it left DRAM and SSD before, nothing says it will be read
// sooner than what DRAM holds, and when DRAM drops it the SSD will not
// take it: entering DRAM warm it would only push out objects DRAM keeps
// for longer, on a loop every one of them) or it is new and the new-key
// window (window.go) finds that new keys come back within a DRAM residency
// less often than the objects the SSD pushes out (unless WarmNewKeys). A
// key SSD admission would take enters warm, as any put. Never when
// ColdPutFreq is 0. Counted in Stats.ColdPuts (new keys also in
// Stats.ColdNewPuts).
func (p *TinyLFU) ColdPut(o Object) bool {
	if p.cfg.ColdPutFreq == 0 {
		return false
	}
	h := hashKey(o.Key)
	p.mu.Lock()
	f := p.sk.EstimateHash(h)
	st := p.nodes[o.Node]
	fresh := f < p.cfg.ColdPutFreq
	again := p.win.seen(h)
	cold := st != nil && (!fresh || (!p.cfg.WarmNewKeys && p.win.coldNew(again)))
	if cold {
		switch r, _ := p.valueTest(f, ssdCost(o), st); r {
		case RejectLost, RejectNoVictim:
		default:
			cold = p.cfg.WriteBudget > 0 && !p.budgetWouldAllow(f, o.Size, st)
		}
	}
	if fresh {
		p.win.put(h, again, !cold)
	}
	p.mu.Unlock()
	if cold {
		p.st.coldPuts.Add(1)
		if fresh {
			p.st.coldNewPuts.Add(1)
		}
	}
	return cold
}

// MarshalSketch encodes the current sketch (Sketch.MarshalBinary). The
// words are copied out a piece at a time (SketchChunk) and encoded with
// the policy's lock released.
func (p *TinyLFU) MarshalSketch() ([]byte, error) {
	var a SketchAssembly
	off := uint64(0)
	for restarts := 0; restarts < 16; {
		sk, err := a.Add(p.SketchChunk(off, 1<<30))
		switch {
		case errors.Is(err, ErrSketchChanged):
			off, restarts = 0, restarts+1
			continue
		case err != nil:
			return nil, err
		case sk != nil:
			return sk.MarshalBinary()
		}
		_, off = a.Transfer()
	}
	return nil, fmt.Errorf("%w: it changed during 16 copies in a row", ErrSketchChanged)
}
