package admission

import (
	"container/heap"
	"fmt"
	"math"
	"math/rand/v2"
	"sort"
	"testing"

	"github.com/tierstore/tierstore/masterapi"
)

// A two-tier store in miniature, to judge the policy on a whole trace:
// DRAM holds simDRAM objects in the master's order (warm puts and hits at
// the back, cold puts at the front, the front evicted first); a DRAM
// victim the policy admits is written to the SSD's open bucket of
// simBucket objects; the SSD evicts whole buckets, the one of least worth
// first (the "worth" bucket policy; ties: the least recently read), once
// past its high watermark and until it is under it again (what the node
// does with --bucket_eviction=worth, tier.Options.EvictToFit); every
// request is followed by a fresh SSD report. Every object has one size; a lookup that misses is put.

const (
	simDRAM   = 32
	simBucket = 16
	simHigh   = 8 * simBucket // objects
	simLow    = 7 * simBucket
)

type simStore struct {
	p       Policy
	dram    []string // front: next victim
	inDRAM  map[string]bool
	ssd     map[string]*simBucketT // key -> its bucket
	open    *simBucketT
	sealed  []*simBucketT // least recently read first
	writes  int64
	hits    int64
	lookups int64
}

type simBucketT struct{ keys map[string]bool }

func newSimStore(p Policy) *simStore {
	return &simStore{p: p, inDRAM: map[string]bool{}, ssd: map[string]*simBucketT{},
		open: &simBucketT{keys: map[string]bool{}}}
}

func (s *simStore) obj(k string) Object {
	return Object{Key: k, Size: obj, InDRAM: s.inDRAM[k], OnSSD: s.ssd[k] != nil, Node: "n"}
}

func (s *simStore) used() int64 {
	n := len(s.open.keys)
	for range s.sealed {
		n += simBucket
	}
	return int64(n) * obj
}

// density is a bucket's worth per byte of its span (simBucket objects).
func (s *simStore) density(b *simBucketT, est func(string) uint32) float64 {
	v := 0.0
	for k := range b.keys {
		v += float64(est(k))
	}
	return v / simBucket
}

// victims is the SSD's eviction order: repeatedly the one of least worth
// of the buckets not yet taken (ties: the least recently read).
func (s *simStore) victims(est func(string) uint32) []*simBucketT {
	rest := append([]*simBucketT(nil), s.sealed...)
	var out []*simBucketT
	for len(rest) > 0 {
		best := 0
		for i := 1; i < len(rest); i++ {
			if s.density(rest[i], est) < s.density(rest[best], est) {
				best = i
			}
		}
		out = append(out, rest[best])
		rest = append(rest[:best], rest[best+1:]...)
	}
	return out
}

func (s *simStore) report() {
	t, ok := s.p.(*TinyLFU)
	if !ok {
		return
	}
	r := masterapi.SSDReport{High: simHigh * obj, Low: simLow * obj, Used: s.used()}
	for _, b := range s.victims(t.Estimate) {
		r.Victims = append(r.Victims, masterapi.SSDVictim{FileBytes: simBucket * obj, Span: simBucket * obj,
			Worth: s.density(b, t.Estimate) * simBucket * obj})
	}
	t.ReportSSD("n", r, 0)
}

func (s *simStore) touchBucket(b *simBucketT) {
	for i, x := range s.sealed {
		if x == b {
			s.sealed = append(append(s.sealed[:i:i], s.sealed[i+1:]...), b)
			return
		}
	}
}

func (s *simStore) evictSSD() {
	est := func(string) uint32 { return 0 }
	if t, ok := s.p.(*TinyLFU); ok {
		est = t.Estimate
	}
	for s.used() > simHigh*obj && len(s.sealed) > 0 {
		for _, b := range s.victims(est) {
			if s.used() <= simHigh*obj {
				break
			}
			var keys []string
			for k := range b.keys {
				keys = append(keys, k)
				delete(s.ssd, k)
			}
			sort.Strings(keys)
			for i, x := range s.sealed {
				if x == b {
					s.sealed = append(s.sealed[:i], s.sealed[i+1:]...)
					break
				}
			}
			if e, ok := s.p.(interface{ ObserveSSDEviction([]string) }); ok {
				e.ObserveSSDEviction(keys)
			}
		}
	}
}

func (s *simStore) writeSSD(k string) {
	s.writes++
	s.open.keys[k] = true
	s.ssd[k] = s.open
	if len(s.open.keys) == simBucket {
		s.sealed = append(s.sealed, s.open)
		s.open = &simBucketT{keys: map[string]bool{}}
	}
	s.evictSSD()
}

func (s *simStore) request(k string) {
	s.lookups++
	t, _ := s.p.(*TinyLFU)
	switch {
	case s.inDRAM[k]:
		s.hits++
		if t != nil {
			t.ObserveLookup(k, DRAMHit, obj)
		}
		for i, x := range s.dram {
			if x == k {
				s.dram = append(append(s.dram[:i:i], s.dram[i+1:]...), k)
				break
			}
		}
		return
	case s.ssd[k] != nil:
		s.hits++
		if t != nil {
			t.ObserveLookup(k, SSDHit, obj)
		}
		s.touchBucket(s.ssd[k])
		return
	}
	if t != nil {
		t.ObserveLookup(k, Miss, 0)
	}
	s.inDRAM[k] = true
	o := s.obj(k)
	if s.p.AtPutEnd(o) {
		s.writeSSD(k)
	}
	cold := false
	if c, ok := s.p.(ColdPutter); ok {
		cold = c.ColdPut(s.obj(k))
	}
	if cold {
		s.dram = append([]string{k}, s.dram...)
	} else {
		s.dram = append(s.dram, k)
	}
	for len(s.dram) > simDRAM {
		v := s.dram[0]
		s.dram = s.dram[1:]
		o := s.obj(v)
		admit := s.p.OnEvict(o)
		delete(s.inDRAM, v)
		if admit {
			s.writeSSD(v)
		}
	}
	s.report()
}

// scanBurstTrace is Zipf(0.9) over keys keys, a burst of burst one-off
// keys every every requests.
func scanBurstTrace(seed uint64, n, keys, every, burst int) []string {
	r := rand.New(rand.NewPCG(seed, seed^0x5bd1e995))
	cdf, sum := zipfCDF(keys)
	var out []string
	b := 0
	for len(out) < n {
		if len(out)%(every+burst) == every {
			for i := 0; i < burst; i++ {
				out = append(out, fmt.Sprintf("b%d", b))
				b++
			}
			continue
		}
		k := sort.SearchFloat64s(cdf, r.Float64()*sum)
		out = append(out, fmt.Sprintf("z%d", k))
	}
	return out[:n]
}

// beladyHits is Belady's MIN with bypass over reqs for a cache of
// capacity objects: a miss is cached only if it is used again sooner
// than some resident, which it then replaces (the resident used furthest
// in the future).
func beladyHits(reqs []string, capacity int) int64 {
	next := make([]int, len(reqs))
	last := map[string]int{}
	for i := len(reqs) - 1; i >= 0; i-- {
		next[i] = math.MaxInt
		if j, ok := last[reqs[i]]; ok {
			next[i] = j
		}
		last[reqs[i]] = i
	}
	res := map[string]*minEntry{}
	h := &minHeap{}
	var hits int64
	for i, k := range reqs {
		if e := res[k]; e != nil {
			hits++
			e.next = next[i]
			heap.Fix(h, e.pos)
			continue
		}
		if next[i] == math.MaxInt {
			continue
		}
		if h.Len() == capacity {
			if (*h)[0].next <= next[i] {
				continue
			}
			delete(res, heap.Pop(h).(*minEntry).key)
		}
		e := &minEntry{key: k, next: next[i]}
		heap.Push(h, e)
		res[k] = e
	}
	return hits
}

type minEntry struct {
	key       string
	next, pos int
}

type minHeap []*minEntry

func (h minHeap) Len() int           { return len(h) }
func (h minHeap) Less(i, j int) bool { return h[i].next > h[j].next }
func (h minHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].pos, h[j].pos = i, j
}
func (h *minHeap) Push(x any) { e := x.(*minEntry); e.pos = len(*h); *h = append(*h, e) }
func (h *minHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	*h = old[:len(old)-1]
	return e
}

func simRun(p Policy, reqs []string) *simStore {
	s := newSimStore(p)
	s.report()
	for _, k := range reqs {
		s.request(k)
	}
	return s
}

// simTinyLFU is the policy for the room test's comparison: new keys
// enter warm (WarmNewKeys), so that only the room test differs.
func simTinyLFU(freeRoom bool) *TinyLFU {
	c := DefaultTinyLFUConfig()
	c.MinPopulation = simDRAM + simHigh
	c.FreeRoom = freeRoom
	c.WarmNewKeys = true
	return NewTinyLFU(c)
}

// simWindow is the default policy (the new-key window on), or with every
// new key warm.
func simWindow(warmNewKeys bool) *TinyLFU {
	c := DefaultTinyLFUConfig()
	c.MinPopulation = simDRAM + simHigh
	c.WarmNewKeys = warmNewKeys
	return NewTinyLFU(c)
}

// tenantsTrace is two tenants at random: Zipf(0.9) over keys keys, and a
// loop over loop keys.
func tenantsTrace(seed uint64, n, keys, loop int) []string {
	r := rand.New(rand.NewPCG(seed, seed^0x2545f4914f6cdd1d))
	cdf, sum := zipfCDF(keys)
	var out []string
	l := 0
	for len(out) < n {
		if r.IntN(2) == 0 {
			out = append(out, fmt.Sprintf("a%d", sort.SearchFloat64s(cdf, r.Float64()*sum)))
			continue
		}
		out = append(out, fmt.Sprintf("l%d", l))
		l = (l + 1) % loop
	}
	return out
}

// recencyTrace is a stream of new keys, each read again a few requests
// after its first read (a conversation's turn read at the next), beside
// Zipf(0.9) over keys keys.
func recencyTrace(seed uint64, n, keys int) []string {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	cdf, sum := zipfCDF(keys)
	var out []string
	again := map[int][]string{}
	fresh := 0
	for i := 0; len(out) < n; i++ {
		out = append(out, again[i]...)
		delete(again, i)
		switch r.IntN(3) {
		case 0:
			k := fmt.Sprintf("n%d", fresh)
			fresh++
			out = append(out, k)
			at := i + 2 + r.IntN(2*simDRAM)
			again[at] = append(again[at], k)
		default:
			out = append(out, fmt.Sprintf("z%d", sort.SearchFloat64s(cdf, r.Float64()*sum)))
		}
	}
	return out[:n]
}

// TestNewKeyWindowAgainstWarm replays, through the miniature store, two
// tenants (a Zipf set and a loop larger than the SSD's share of it: new
// keys are a loop's first pass and Zipf tail keys, which come back later
// than a DRAM residency) and a recency trace (new keys read again within a
// DRAM residency): the new-key window puts new keys cold on the first and
// gets more hits than every new key warm, and keeps them warm enough on
// the second not to lose hits.
func TestNewKeyWindowAgainstWarm(t *testing.T) {
	for _, seed := range []uint64{1, 2, 3} {
		reqs := tenantsTrace(seed, 16000, 512, 3*(simDRAM+simHigh)/4)
		opt := beladyHits(reqs, simDRAM+simHigh)
		win := simRun(simWindow(false), reqs)
		warm := simRun(simWindow(true), reqs)
		ws := win.p.(*TinyLFU).Stats()
		t.Logf("tenants seed %d: MIN %d; window %d (%.3f of MIN, %d cold new puts, return rates %.3f new, %.3f pushed, horizon %.0f), warm %d (%.3f)",
			seed, opt, win.hits, float64(win.hits)/float64(opt), ws.ColdNewPuts, ws.NewKeysReturn, ws.PushedReturn, ws.WindowHorizon,
			warm.hits, float64(warm.hits)/float64(opt))
		if win.hits <= warm.hits {
			t.Errorf("tenants seed %d: the window got %d hits, every new key warm %d", seed, win.hits, warm.hits)
		}
		if ws.ColdNewPuts == 0 {
			t.Errorf("tenants seed %d: no new key was put cold", seed)
		}
		reqs = recencyTrace(seed, 16000, 512)
		opt = beladyHits(reqs, simDRAM+simHigh)
		win = simRun(simWindow(false), reqs)
		warm = simRun(simWindow(true), reqs)
		ws = win.p.(*TinyLFU).Stats()
		t.Logf("recency seed %d: MIN %d; window %d (%.3f of MIN, %d cold new puts, return rates %.3f new, %.3f pushed, horizon %.0f), warm %d (%.3f)",
			seed, opt, win.hits, float64(win.hits)/float64(opt), ws.ColdNewPuts, ws.NewKeysReturn, ws.PushedReturn, ws.WindowHorizon,
			warm.hits, float64(warm.hits)/float64(opt))
		if float64(win.hits) < 0.99*float64(warm.hits) {
			t.Errorf("recency seed %d: the window got %d hits, below 0.99 x every new key warm (%d)", seed, win.hits, warm.hits)
		}
	}
}

// TestTinyLFUScanBurstAgainstMIN replays seeded scan-burst traces (Zipf
// 0.9 over 1024 keys, a burst of 96 one-off keys, more than DRAM holds,
// every 400 requests) through the miniature store: tinylfu keeps at least
// 0.75 of Belady's MIN at the SSD's high watermark plus DRAM (computed
// here, on the same trace), more than tinylfu without the room test
// (FreeRoom), and writes less to the SSD than admitting every DRAM victim
// (OnEvict, itself below eager's writes). The adaptive margin stays above
// 0: the one-off keys of a burst lose at any margin and do not move it.
func TestTinyLFUScanBurstAgainstMIN(t *testing.T) {
	for _, seed := range []uint64{1, 2, 3} {
		reqs := scanBurstTrace(seed, 12000, 1024, 400, 96)
		opt := beladyHits(reqs, simDRAM+simHigh)
		tiny := simRun(simTinyLFU(false), reqs)
		free := simRun(simTinyLFU(true), reqs)
		all := simRun(OnEvict{}, reqs)
		t.Logf("seed %d: MIN %d hits; tinylfu %d (%.3f of MIN, %d writes), free room %d (%.3f, %d writes), on-evict %d (%.3f, %d writes)",
			seed, opt, tiny.hits, float64(tiny.hits)/float64(opt), tiny.writes, free.hits, float64(free.hits)/float64(opt), free.writes,
			all.hits, float64(all.hits)/float64(opt), all.writes)
		if float64(tiny.hits) < 0.75*float64(opt) {
			t.Errorf("seed %d: tinylfu %d hits, below 0.75 x MIN (%d)", seed, tiny.hits, opt)
		}
		if tiny.hits <= free.hits {
			t.Errorf("seed %d: tinylfu %d hits, no more than without the room test (%d)", seed, tiny.hits, free.hits)
		}
		if m := tiny.p.(*TinyLFU).Margin(); m <= 0 {
			t.Errorf("seed %d: the margin fell to %v on a scan-burst trace: the room between the watermarks is free again", seed, m)
		}
		if tiny.writes > all.writes {
			t.Errorf("seed %d: tinylfu wrote %d objects to SSD, on-evict %d", seed, tiny.writes, all.writes)
		}
	}
}

// zipfCDF is the cumulative weight of Zipf(0.9) over keys keys, and its
// total: a key drawn is sort.SearchFloat64s(cdf, u*sum) for u uniform.
func zipfCDF(keys int) ([]float64, float64) {
	cdf := make([]float64, keys)
	sum := 0.0
	for k := range cdf {
		sum += math.Pow(float64(k+1), -0.9)
		cdf[k] = sum
	}
	return cdf, sum
}
