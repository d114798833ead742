package admission

import (
	"fmt"
	"testing"
	"time"

	"github.com/tierstore/tierstore/masterapi"
	"pgregory.net/rapid"
)

const obj = 64 << 10 // object size of the tests

// objFile is the SSD cost of one test object (any test key is shorter than
// a block): the file of a bucket holding it alone.
var objFile = refCost(1, obj)

// fixedPolicy is a TinyLFU whose margin does not adapt.
func fixedPolicy(margin float64) *TinyLFU {
	return NewTinyLFU(TinyLFUConfig{Margin: margin, MaxMargin: margin, MarginStep: -1})
}

// touch looks key up n times (DRAM hits).
func touch(p *TinyLFU, key string, n int) {
	for i := 0; i < n; i++ {
		p.ObserveLookup(key, DRAMHit, obj)
	}
}

// full is a report of an SSD exactly at its high watermark whose next
// victims have the given densities, one object each (a bucket file of
// objFile bytes).
func full(densities ...float64) masterapi.SSDReport {
	r := masterapi.SSDReport{High: 100 * objFile, Low: 80 * objFile, Used: 100 * objFile}
	for _, d := range densities {
		r.Victims = append(r.Victims, masterapi.SSDVictim{FileBytes: objFile, Span: obj, Worth: d * obj})
	}
	return r
}

func candidate(key string) Object {
	return Object{Key: key, Size: obj, InDRAM: true, Node: "n1"}
}

func lastReason(t *testing.T, p *TinyLFU, before TinyLFUStats) string {
	t.Helper()
	after := p.Stats()
	for r, n := range after.Decisions {
		if n != before.Decisions[r] {
			return r
		}
	}
	t.Fatal("no decision counted")
	return ""
}

func decideOnce(t *testing.T, p *TinyLFU, key string) (bool, string) {
	t.Helper()
	before := p.Stats()
	ok := p.OnEvict(candidate(key))
	return ok, lastReason(t, p, before)
}

func TestTinyLFUIncumbentWinsTies(t *testing.T) {
	for _, margin := range []float64{0, 1} {
		p := fixedPolicy(margin)
		p.ReportSSD("n1", full(3), 0)
		tie := 3 + int(margin)
		touch(p, "tie", tie)
		if ok, why := decideOnce(t, p, "tie"); ok || why != "lost" {
			t.Fatalf("margin %v: a candidate of frequency %d against density 3: admitted=%v (%s), want lost", margin, tie, ok, why)
		}
		touch(p, "better", tie+1)
		p.ReportSSD("n1", full(3), 0)
		if ok, why := decideOnce(t, p, "better"); !ok || why != "won" {
			t.Fatalf("margin %v: frequency %d against density 3: admitted=%v (%s), want won", margin, tie+1, ok, why)
		}
	}
}

func TestTinyLFURoomNoReportNoVictim(t *testing.T) {
	p := fixedPolicy(1)
	if ok, why := decideOnce(t, p, "a"); !ok || why != "no_report" {
		t.Fatalf("without a report: %v %s", ok, why)
	}
	r := full(9)
	r.Used = r.High - 2*objFile
	p.ReportSSD("n1", r, 0)
	for i := 0; i < 2; i++ { // two objects fit; frequency 0 does not matter
		if ok, why := decideOnce(t, p, fmt.Sprintf("r%d", i)); !ok || why != "room" {
			t.Fatalf("room %d: %v %s", i, ok, why)
		}
	}
	if ok, why := decideOnce(t, p, "r3"); ok || why != "lost" {
		t.Fatalf("third object with the SSD full: %v %s", ok, why)
	}
	p.ReportSSD("n1", masterapi.SSDReport{High: 10, Used: 10}, 0)
	if ok, why := decideOnce(t, p, "r4"); ok || why != "no_victim" {
		t.Fatalf("full without victims: %v %s", ok, why)
	}
	p.ReportSSD("n1", masterapi.SSDReport{}, 0) // unlimited tier
	if ok, why := decideOnce(t, p, "r5"); !ok || why != "room" {
		t.Fatalf("unlimited tier: %v %s", ok, why)
	}
	if p.OnEvict(Object{Key: "x", Size: obj, InDRAM: true, OnSSD: true, Node: "n1"}) {
		t.Fatal("an object already on SSD was admitted")
	}
}

// TestTinyLFUVictimsInOrder: admissions beyond the watermark consume the
// reported victims in order; outstanding tasks count as admitted bytes.
func TestTinyLFUVictimsInOrder(t *testing.T) {
	p := fixedPolicy(0)
	for i := 0; i < 4; i++ {
		touch(p, fmt.Sprintf("c%d", i), 3)
	}
	p.ReportSSD("n1", full(1, 1, 5), 0)
	for i := 0; i < 2; i++ {
		if ok, why := decideOnce(t, p, fmt.Sprintf("c%d", i)); !ok || why != "won" {
			t.Fatalf("candidate %d against a cold victim: %v %s", i, ok, why)
		}
	}
	if ok, why := decideOnce(t, p, "c2"); ok || why != "lost" {
		t.Fatalf("third candidate reaches the hot victim: %v %s", ok, why)
	}
	// Two tasks still outstanding at the next report: same position.
	p.ReportSSD("n1", full(1, 1, 5), 2)
	if ok, why := decideOnce(t, p, "c3"); ok || why != "lost" {
		t.Fatalf("outstanding tasks ignored: %v %s", ok, why)
	}
}

func TestTinyLFUPutAfterMissCountsOnce(t *testing.T) {
	p := fixedPolicy(1)
	p.ObserveLookup("k", Miss, 0)
	p.AtPutEnd(candidate("k"))
	if got := p.Estimate("k"); got != 1 {
		t.Fatalf("a miss and its put estimate %d, want 1", got)
	}
	p.AtPutEnd(candidate("fresh")) // a put without a lookup is an access
	p.AtPutEnd(candidate("fresh"))
	if got := p.Estimate("fresh"); got != 2 {
		t.Fatalf("two puts estimate %d, want 2", got)
	}
	p.ObserveLookup("k", DRAMHit, obj)
	if got := p.Estimate("k"); got != 2 {
		t.Fatalf("then a hit: %d, want 2", got)
	}
}

// ssdModel is a small SSD of buckets in LRU order for the scenario tests:
// the report a node would send, with worth from the policy's sketch.
type ssdModel struct {
	bucketKeys [][]string // LRU first
	perBucket  int
}

func (m *ssdModel) report(p *TinyLFU) masterapi.SSDReport {
	n := len(m.bucketKeys) * m.perBucket
	r := masterapi.SSDReport{High: int64(n) * obj, Low: int64(n-m.perBucket) * obj}
	for _, b := range m.bucketKeys {
		r.Used += int64(m.perBucket) * obj
		v := masterapi.SSDVictim{FileBytes: int64(m.perBucket) * obj, Span: int64(m.perBucket) * obj}
		for _, k := range b {
			v.Worth += float64(p.Estimate(k)) * obj
		}
		r.Victims = append(r.Victims, v)
	}
	return r
}

// admit evicts the LRU bucket and appends a bucket holding key.
func (m *ssdModel) admit(key string) []string {
	gone := m.bucketKeys[0]
	m.bucketKeys = append(m.bucketKeys[1:], []string{key})
	return gone
}

// TestTinyLFUScanDoesNotDisplaceHotSet: an SSD full of a hot set that is
// still in use (one hot lookup per four scan keys), then a one-pass scan
// twenty times the SSD: not one scan key is admitted.
func TestTinyLFUScanDoesNotDisplaceHotSet(t *testing.T) {
	p := NewTinyLFU(DefaultTinyLFUConfig()) // adaptive margin included
	const buckets, per = 8, 8
	m := &ssdModel{perBucket: per}
	for b := 0; b < buckets; b++ {
		var ks []string
		for i := 0; i < per; i++ {
			k := fmt.Sprintf("hot%d", b*per+i)
			touch(p, k, 5)
			ks = append(ks, k)
		}
		m.bucketKeys = append(m.bucketKeys, ks)
	}
	admitted := 0
	for i := 0; i < 20*buckets*per; i++ {
		k := fmt.Sprintf("scan%d", i)
		p.ObserveLookup(k, Miss, 0)
		p.AtPutEnd(candidate(k))
		if i%4 == 0 {
			touch(p, fmt.Sprintf("hot%d", (i/4)%(buckets*per)), 1)
		}
		p.ReportSSD("n1", m.report(p), 0)
		if p.OnEvict(candidate(k)) {
			admitted++
			p.ObserveSSDEviction(m.admit(k))
		}
	}
	if admitted != 0 {
		t.Fatalf("%d scan keys displaced the hot set (stats %+v)", admitted, p.Stats())
	}
}

// TestTinyLFUAgeing: a set that was hot and is not used any more decays
// with the halvings until a recurring new key displaces it.
func TestTinyLFUAgeing(t *testing.T) {
	p := fixedPolicy(1)
	p.SetPopulation(func() int64 { return 1024 })
	m := &ssdModel{perBucket: 4, bucketKeys: [][]string{{"old0", "old1", "old2", "old3"}}}
	for _, k := range m.bucketKeys[0] {
		touch(p, k, 12)
	}
	touch(p, "new", 3)
	p.ReportSSD("n1", m.report(p), 0)
	if p.OnEvict(candidate("new")) {
		t.Fatal("a key seen 3 times displaced keys seen 12 times")
	}
	// Other traffic for a few periods; "new" keeps coming back.
	period := p.Stats().Period
	for i := int64(0); i < 3*period; i++ {
		p.ObserveLookup(fmt.Sprintf("other%d", i%5000), Miss, 0)
		if i%500 == 0 {
			touch(p, "new", 1)
		}
	}
	if p.Stats().Halvings < 3 {
		t.Fatalf("halvings = %d after 3 periods", p.Stats().Halvings)
	}
	p.ReportSSD("n1", m.report(p), 0)
	if !p.OnEvict(candidate("new")) {
		t.Fatalf("aged-out keys still win: new=%d old=%d", p.Estimate("new"), p.Estimate("old0"))
	}
}

type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time { return c.t }

// TestTinyLFUWriteBudget: as tokens run out, low-frequency candidates are
// refused first; tokens come back with time.
func TestTinyLFUWriteBudget(t *testing.T) {
	clk := &fakeClock{t: time.Unix(1000, 0)}
	p := NewTinyLFU(TinyLFUConfig{Margin: 1, MaxMargin: 1, MarginStep: -1, WriteBudget: 16 * obj, Now: clk.now})
	p.ReportSSD("n1", masterapi.SSDReport{}, 0) // unlimited tier: only the budget limits
	touch(p, "hot", 16)
	touch(p, "warm", 8)
	// Spend half of the burst with hot objects (floor 0 for them).
	for i := 0; i < 8; i++ {
		if ok, why := decideOnce(t, p, "hot"); !ok {
			t.Fatalf("hot %d refused: %s", i, why)
		}
	}
	// 8 objects of tokens left: warm (f=8) may go down to half the burst.
	if ok, why := decideOnce(t, p, "warm"); ok || why != "budget" {
		t.Fatalf("warm with half the tokens left: %v %s", ok, why)
	}
	if ok, why := decideOnce(t, p, "cold"); ok || why != "budget" {
		t.Fatalf("cold with half the tokens left: %v %s", ok, why)
	}
	if ok, _ := decideOnce(t, p, "hot"); !ok {
		t.Fatal("hot refused while tokens remain")
	}
	clk.t = clk.t.Add(time.Second) // refill to the burst
	if ok, why := decideOnce(t, p, "warm"); !ok {
		t.Fatalf("warm after a refill: %s", why)
	}
}

// marginRig drives the adaptive margin of a policy whose node reports a
// full SSD with one victim of density 0.9: band candidates (estimate 1:
// they beat the victim, not by the margin of 0.25 or more) and losers
// (estimate 0: they lose at any margin) are turned away, pushed-out
// objects are reported, and lookups of unrelated keys advance the clock
// past the ghosts' horizon.
type marginRig struct {
	t *testing.T
	p *TinyLFU
	n int
}

const rigDensity = 0.9

func newMarginRig(t *testing.T) *marginRig {
	p := NewTinyLFU(TinyLFUConfig{Margin: 1, MaxMargin: 2, MarginStep: 0.25})
	p.ReportSSD("n1", full(rigDensity), 0)
	return &marginRig{t: t, p: p}
}

func (r *marginRig) key(kind string) string {
	r.n++
	return fmt.Sprintf("%s%d", kind, r.n)
}

// offer offers a candidate to the SSD of report rep and returns its key
// and whether it was admitted; band: its estimate (1) beats the victim's
// density, else it is 0 (it loses at any margin). Keys whose sketch
// counters collide with others' are skipped.
func (r *marginRig) offer(band bool, rep masterapi.SSDReport) (string, bool, string) {
	r.t.Helper()
	want := map[bool]uint32{true: 1, false: 0}[band]
	for {
		k := r.key("cand")
		if r.p.Estimate(k) != 0 {
			continue
		}
		if band {
			touch(r.p, k, 1)
		}
		if r.p.Estimate(k) != want {
			continue
		}
		r.p.ReportSSD("n1", rep, 0)
		ok, why := decideOnce(r.t, r.p, k)
		return k, ok, why
	}
}

// reject offers a candidate to a full SSD and requires that it be turned
// away (band: by the margin).
func (r *marginRig) reject(band bool) string {
	r.t.Helper()
	k, ok, why := r.offer(band, full(rigDensity))
	if ok || why != "lost" {
		r.t.Fatalf("%s (band %v, margin %v): admitted=%v (%s), want lost", k, band, r.p.Margin(), ok, why)
	}
	return k
}

func (r *marginRig) push() string {
	k := r.key("pushed")
	r.p.ObserveSSDEviction([]string{k})
	return k
}

// back looks k up again (a miss, within the horizon).
func (r *marginRig) back(k string) { r.p.ObserveLookup(k, Miss, 0) }

// expire advances the clock past the horizon.
func (r *marginRig) expire() {
	for i := 0; i < 300; i++ { // the initial horizon: 256 lookups
		r.p.ObserveLookup(r.key("tick"), DRAMHit, obj)
	}
}

// TestTinyLFUAdaptiveMargin: candidates the margin turned away that come
// back lower the margin only while pushed-out objects come back less
// often; nothing moves without pushed-out objects; pushed-out objects
// that come back raise it.
func TestTinyLFUAdaptiveMargin(t *testing.T) {
	r := newMarginRig(t)
	for i := 0; i < 4*adaptEvery; i++ { // turned away by the margin, and all come back
		r.back(r.reject(true))
	}
	r.expire()
	if m := r.p.Margin(); m != 1 {
		t.Fatalf("margin moved to %v without any pushed-out object", m)
	}
	// Pushed-out objects that never come back, rejected ones that do.
	for i := 0; i < 4*adaptEvery; i++ {
		r.push()
		r.back(r.reject(true))
	}
	r.expire()
	if m := r.p.Margin(); m >= 1 {
		t.Fatalf("margin %v did not go down", m)
	}
	low := r.p.Margin()
	// Now every pushed-out object comes back, no candidate of the band
	// does (at margin 0 they are admitted: still the band's).
	for i := 0; i < 16*adaptEvery; i++ {
		r.back(r.push())
		r.offer(true, full(rigDensity))
		if i%adaptEvery == 0 {
			r.expire()
		}
	}
	r.expire()
	if m := r.p.Margin(); m <= low {
		t.Fatalf("margin %v did not go up from %v", m, low)
	}
	st := r.p.Stats()
	if st.RegretRejected == 0 || st.RegretPushed == 0 {
		t.Fatalf("returns counted: %d rejected, %d pushed out", st.RegretRejected, st.RegretPushed)
	}
}

// TestTinyLFUMarginCountsItsOwnDecisions: candidates that lose at any
// margin (their estimate does not beat the victim's density) say nothing
// about the margin, however often they come back. Before stop 43 every
// rejection counted, and on traffic whose one-off keys come back now and
// then the margin fell to 0.
func TestTinyLFUMarginCountsItsOwnDecisions(t *testing.T) {
	r := newMarginRig(t)
	for i := 0; i < 8*adaptEvery; i++ {
		r.back(r.reject(false)) // lost at margin 0 too, and comes back
		if i%2 == 0 {
			r.back(r.push()) // half the pushed-out objects come back
		} else {
			r.push()
		}
	}
	r.expire()
	if m := r.p.Margin(); m != 1 {
		t.Fatalf("margin %v: moved by candidates the margin did not decide", m)
	}
}

// TestTinyLFUMarginWaitsForPushedOut: once the margin turns every
// candidate away the SSD pushes nothing out; the pushed-out objects'
// rate is then that of an old epoch, and the margin does not move on it
// however often the band's candidates come back.
func TestTinyLFUMarginWaitsForPushedOut(t *testing.T) {
	r := newMarginRig(t)
	for i := 0; i < adaptEvery; i++ { // pushed out, back as often as rejected
		k, v := r.reject(true), r.push()
		if i%2 == 0 {
			r.back(k)
			r.back(v)
		}
	}
	r.expire()
	if m := r.p.Margin(); m != 1 {
		t.Fatalf("margin %v after equal rates", m)
	}
	for i := 0; i < 8*adaptEvery; i++ { // no more pushed out; every rejected comes back
		r.back(r.reject(true))
	}
	r.expire()
	if m := r.p.Margin(); m != 1 {
		t.Fatalf("margin %v: moved while nothing was pushed out", m)
	}
}

// TestTinyLFUMarginHoldsWithinNoise: return rates that differ by less
// than the noise of the counts (two standard errors) do not move the
// margin; before stop 43 any difference did, so on a loop, where the
// candidates turned away and the objects pushed out are alike, the margin
// wandered.
func TestTinyLFUMarginHoldsWithinNoise(t *testing.T) {
	r := newMarginRig(t)
	for i := 0; i < 2*adaptEvery; i++ {
		k, v := r.reject(true), r.push()
		if i%10 < 3 { // 30% of the rejected come back
			r.back(k)
		}
		if i%10 < 2 { // 20% of the pushed out
			r.back(v)
		}
	}
	r.expire()
	if m := r.p.Margin(); m != 1 {
		t.Fatalf("margin %v: moved by 0.3 against 0.2 over %d outcomes each", m, 2*adaptEvery)
	}
}

// TestMarginMoveNeedsAClearDifference: the margin's step from the two
// return rates (the same test as the new-key window's).
func TestMarginMoveNeedsAClearDifference(t *testing.T) {
	for _, c := range []struct {
		rejRet, rejExp, pushRet, pushExp float64
		move                             int
	}{
		{30, 34, 32, 32, 0},   // noise
		{40, 24, 10, 54, -1},  // the margin's rejections come back more often
		{10, 54, 40, 24, 1},   // pushed-out objects come back more often
		{20, 0, 0, 20, 0},     // clear, too few counted
		{20, 380, 80, 320, 1}, // 0.05 against 0.2
	} {
		w := newNewKeyWindow(64)
		w.rejected.returned, w.rejected.expired = c.rejRet, c.rejExp
		w.pushed.returned, w.pushed.expired = c.pushRet, c.pushExp
		if got := w.marginMove(); got != c.move {
			t.Errorf("rejected %v of %v back, pushed %v of %v: move %d, want %d", c.rejRet, c.rejRet+c.rejExp,
				c.pushRet, c.pushRet+c.pushExp, got, c.move)
		}
	}
}

// refDecide is the admission test written out directly: no report admits;
// the candidate's SSD bytes (refCost of its key and size) beyond the
// watermark are taken from the victims in order; the victim where they run
// out must be beaten by more than the margin.
// Between the watermarks it admits, unless the room is tested (the SSD
// evicted before and the margin is above 0): the first victim must then
// be beaten by more than the margin.
func refDecide(f uint32, cost, pending int64, r *masterapi.SSDReport, margin float64) Reason {
	return refDecideRoom(f, cost, pending, r, margin, false)
}

// refCost is the file size of a bucket holding one object of size bytes
// and a key of keyLen bytes, block by block: the header block, the data's
// blocks, and the blocks of its trailer entry (24 bytes and the key) and
// footer (64 bytes).
func refCost(keyLen int, size int64) int64 {
	blocks := func(n int64) int64 { return (n + 4095) / 4096 * 4096 }
	return 4096 + blocks(size) + blocks(24+int64(keyLen)+64)
}

func refDecideRoom(f uint32, cost, pending int64, r *masterapi.SSDReport, margin float64, evicted bool) Reason {
	if r == nil {
		return AcceptNoReport
	}
	if r.High <= 0 {
		return AcceptRoom
	}
	need := r.Used + pending + cost - r.High
	if need <= 0 {
		if !evicted || margin <= 0 || len(r.Victims) == 0 || need+r.High <= r.Low {
			return AcceptRoom
		}
		if beats(f, r.Victims[0], margin) {
			return AcceptWon
		}
		return RejectLost
	}
	if len(r.Victims) == 0 {
		return RejectNoVictim
	}
	i := 0
	for freed := r.Victims[0].FileBytes; freed < need && i+1 < len(r.Victims); {
		i++
		freed += r.Victims[i].FileBytes
	}
	if beats(f, r.Victims[i], margin) {
		return AcceptWon
	}
	return RejectLost
}

// beats: f exceeds v's worth per byte of its span by more than margin.
func beats(f uint32, v masterapi.SSDVictim, margin float64) bool {
	if v.Span > 0 {
		return float64(f)*float64(v.Span) > v.Worth+margin*float64(v.Span)
	}
	return float64(f) > margin
}

func TestTinyLFUDecideMatchesReference(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		margin := float64(rapid.IntRange(0, 8).Draw(t, "margin4")) / 4
		p := fixedPolicy(margin)
		var rep *masterapi.SSDReport
		if rapid.IntRange(0, 9).Draw(t, "hasReport") > 0 {
			rep = &masterapi.SSDReport{High: rapid.Int64Range(0, 1<<20).Draw(t, "high")}
			rep.Low = rapid.Int64Range(0, rep.High).Draw(t, "low")
			rep.Used = rapid.Int64Range(0, rep.High+1<<18).Draw(t, "used")
			for n := rapid.IntRange(0, 6).Draw(t, "victims"); n > 0; n-- {
				span := rapid.Int64Range(0, 1<<16).Draw(t, "span")
				rep.Victims = append(rep.Victims, masterapi.SSDVictim{
					FileBytes: span + rapid.Int64Range(0, 1<<13).Draw(t, "overhead"),
					Span:      span,
					Worth:     float64(rapid.IntRange(0, 16*4).Draw(t, "density4")) / 4 * float64(span),
				})
			}
		}
		f := uint32(rapid.IntRange(0, 16).Draw(t, "f"))
		size := rapid.Int64Range(1, 1<<16).Draw(t, "size")
		pending := rapid.Int64Range(0, 1<<18).Draw(t, "pending")
		var st *nodeState
		if rep != nil {
			st = &nodeState{rep: *rep, pending: pending}
		}
		evicted := rapid.Bool().Draw(t, "evicted")
		if evicted {
			p.ObserveSSDEviction([]string{"gone"})
		}
		key := rapid.StringMatching(`[a-z]{1,200}`).Draw(t, "key")
		cost := ssdCost(Object{Key: key, Size: size})
		if want := refCost(len(key), size); cost != want {
			t.Fatalf("ssdCost(%d-byte key, %d bytes) = %d, want %d", len(key), size, cost, want)
		}
		got, _ := p.decide(f, size, cost, st)
		want := refDecideRoom(f, cost, pending, rep, margin, evicted)
		if got != want {
			t.Fatalf("decide = %s, reference %s (f %d size %d pending %d report %+v)", got, want, f, size, pending, rep)
		}
	})
}

// TestTinyLFUConcurrentUse: the master calls the policy from every shard at
// once, the heartbeat reports and the metrics scrape concurrently. Every
// lookup and decision is counted once.
func TestTinyLFUConcurrentUse(t *testing.T) {
	p := NewTinyLFU(DefaultTinyLFUConfig())
	p.SetPopulation(func() int64 { return 2048 })
	const workers, per = 8, 500
	done := make(chan int64, workers)
	for w := 0; w < workers; w++ {
		go func() {
			var decided int64
			for i := 0; i < per; i++ {
				k := fmt.Sprintf("w%d-%d", w, i%50)
				p.ObserveLookup(k, Outcome(i%3), obj)
				p.AtPutEnd(candidate(k))
				p.OnEvict(candidate(k))
				p.ColdPut(candidate(k))
				_ = p.EstimateBytes([]byte(k)) // the node's valuation, concurrently
				decided++
				switch i % 50 {
				case 0:
					p.ReportSSD("n1", full(float64(i%7)), i%3)
				case 1:
					p.ObserveSSDEviction([]string{k})
				case 2:
					_ = p.Stats()
					_ = p.Estimate(k)
				}
			}
			done <- decided
		}()
	}
	var decided int64
	for w := 0; w < workers; w++ {
		decided += <-done
	}
	st := p.Stats()
	if st.Lookups != workers*per {
		t.Fatalf("lookups counted %d, want %d", st.Lookups, workers*per)
	}
	if st.Accepted+st.Rejected != decided {
		t.Fatalf("decisions counted %d, want %d", st.Accepted+st.Rejected, decided)
	}
}

// TestTinyLFUColdPut: a put is cold only for a key coming back (estimated
// frequency, this access included, at least ColdPutFreq) that SSD
// admission would turn away now; a first put, a key the SSD would take,
// a node that never reported and ColdPutFreq 0 are warm.
func TestTinyLFUColdPut(t *testing.T) {
	p := NewTinyLFU(TinyLFUConfig{Margin: 1, MaxMargin: 1, MarginStep: -1, ColdPutFreq: 2})
	put := func(key string) bool {
		p.ObserveLookup(key, Miss, 0)
		p.AtPutEnd(candidate(key))
		return p.ColdPut(candidate(key))
	}
	if put("first") {
		t.Fatal("a key seen once is cold before any report")
	}
	if put("first") {
		t.Fatal("a key coming back is cold on a node that never reported")
	}
	p.ReportSSD("n1", full(8), 0)
	if put("once") {
		t.Fatal("a key seen once is cold")
	}
	if put("back") {
		t.Fatal("a key seen once (a miss and its put) is cold")
	}
	if !put("back") {
		t.Fatalf("a key coming back (estimate %d) is warm although the SSD turns it away", p.Estimate("back"))
	}
	p.ReportSSD("n1", full(0.5), 0) // the SSD would take it now
	if put("back") {
		t.Fatal("a key the SSD would admit is cold")
	}
	p.ReportSSD("n1", masterapi.SSDReport{High: 100 * obj, Used: 0}, 0) // room
	if put("back") {
		t.Fatal("a key is cold although the SSD has room")
	}
	p.ReportSSD("n1", masterapi.SSDReport{High: obj, Used: obj}, 0) // full, no victim
	if !put("back") {
		t.Fatal("a key coming back is warm although the SSD reported no victim")
	}
	if got := p.Stats().ColdPuts; got != 2 {
		t.Fatalf("ColdPuts = %d, want 2", got)
	}
	off := NewTinyLFU(TinyLFUConfig{Margin: 1})
	off.ReportSSD("n1", full(8), 0)
	for i := 0; i < 4; i++ {
		off.ObserveLookup("back", Miss, 0)
	}
	if off.ColdPut(candidate("back")) {
		t.Fatal("ColdPutFreq 0 made a put cold")
	}
}

// TestTinyLFUColdPutMatchesReference: ColdPut agrees with its definition
// over random frequencies, reports and thresholds: cold iff the threshold
// is set, the estimate reaches it, the node reported, and the reference
// admission test rejects the key as lost or without victim.
func TestTinyLFUColdPutMatchesReference(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		margin := float64(rapid.IntRange(0, 8).Draw(t, "margin4")) / 4
		cold := uint32(rapid.IntRange(0, 6).Draw(t, "coldFreq"))
		p := NewTinyLFU(TinyLFUConfig{Margin: margin, MaxMargin: margin, MarginStep: -1, ColdPutFreq: cold})
		touch(p, "k", rapid.IntRange(0, 10).Draw(t, "accesses"))
		var rep *masterapi.SSDReport
		if rapid.Bool().Draw(t, "hasReport") {
			rep = &masterapi.SSDReport{High: rapid.Int64Range(0, 8*obj).Draw(t, "high")}
			rep.Used = rapid.Int64Range(0, rep.High+2*obj).Draw(t, "used")
			for n := rapid.IntRange(0, 4).Draw(t, "victims"); n > 0; n-- {
				rep.Victims = append(rep.Victims, masterapi.SSDVictim{FileBytes: obj, Span: obj,
					Worth: float64(rapid.IntRange(0, 16*4).Draw(t, "density4")) / 4 * obj})
			}
			p.ReportSSD("n1", *rep, 0)
		}
		f := p.Estimate("k")
		want := cold > 0 && f >= cold && rep != nil
		if want {
			r := refDecide(f, refCost(len("k"), obj), 0, rep, margin)
			want = r == RejectLost || r == RejectNoVictim
		}
		if got := p.ColdPut(candidate("k")); got != want {
			t.Fatalf("ColdPut = %v, want %v (f %d, threshold %d, report %+v)", got, want, f, cold, rep)
		}
	})
}

// TestTinyLFUColdPutUnderBudget: with room on SSD but the write budget
// spent, a key coming back is cold when the budget would refuse it, warm
// after the tokens come back; asking changes no token.
func TestTinyLFUColdPutUnderBudget(t *testing.T) {
	clk := &fakeClock{t: time.Unix(1000, 0)}
	p := NewTinyLFU(TinyLFUConfig{Margin: 1, MaxMargin: 1, MarginStep: -1, WriteBudget: 16 * obj, Now: clk.now, ColdPutFreq: 2})
	p.ReportSSD("n1", masterapi.SSDReport{}, 0) // unlimited tier: only the budget limits
	touch(p, "hot", 16)
	touch(p, "back", 4)
	if p.ColdPut(candidate("back")) {
		t.Fatal("cold with the whole burst of tokens")
	}
	for i := 0; i < 14; i++ {
		if ok, why := decideOnce(t, p, "hot"); !ok {
			t.Fatalf("hot %d refused: %s", i, why)
		}
	}
	for i := 0; i < 3; i++ { // asking spends nothing
		if !p.ColdPut(candidate("back")) {
			t.Fatal("warm although the budget would refuse it")
		}
	}
	if ok, _ := decideOnce(t, p, "hot"); !ok {
		t.Fatal("ColdPut spent tokens: hot refused")
	}
	clk.t = clk.t.Add(time.Second)
	if p.ColdPut(candidate("back")) {
		t.Fatal("cold after the tokens came back")
	}
}
