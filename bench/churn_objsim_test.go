package main

import (
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/tierstore/tierstore/admission"
	"github.com/tierstore/tierstore/bench/internal/belady"
	"github.com/tierstore/tierstore/bench/internal/trace"
	"github.com/tierstore/tierstore/bucket"
)

// A trace-driven model of the two tiers under tinylfu admission (stop 46):
// DRAM an LRU of blocks whose eviction rounds offer their victims to SSD
// admission (cold puts first), the SSD a set of bucket files of the real
// format's sizes under the tier's watermarks, space freed only when a
// bucket goes. Two SSD victim rules: whole buckets by worth (today's
// tinylfu+worth) and per-object victims (the candidate against the
// lowest-estimate live object on SSD, which dies in its bucket; mostly dead
// buckets are compacted, their live objects re-inserted). It is a model,
// not the store: no leases, a fixed margin unless told, no new-key window.
// TIERSTORE_OBJSIM=1 runs it.

type simBucket struct {
	id      int
	file    int64 // file bytes
	written int64 // object bytes written
	live    map[string]bool
}

type objSim struct {
	block       int64
	dramCap     int
	round       int
	high, low   int64
	limit       int64
	margin      float64
	perObject   bool
	compactFrac float64 // per-object: compact a bucket at least this dead (by object bytes)
	tieDead     bool    // per-object: among equal estimates, the most-dead bucket's object first

	sk *admission.Sketch
	sf int64 // sample factor
	// oracle: every key's request count over the whole trace, used as
	// its estimate (a perfect, static frequency).
	oracle map[string]uint32
	// past: every key's exact request count so far (no ageing, no cap):
	// the best online estimate of a stationary popularity.
	past map[string]uint32
	// vict: the per-object victim rule: "" the lowest estimate, "lru"
	// the least recently used SSD object (written or hit), "slru" the
	// least recently used of those never hit on SSD, then of all.
	vict   string
	ssdUse map[string]int64
	// dramFreq: DRAM's round victims are its lowest-estimate objects
	// (least recently used among equals; stop 45's pool 20 x).
	dramFreq bool
	ssdHit   map[string]bool

	// DRAM: LRU list (index order by last use), cold flags.
	dramUse  map[string]int64 // key -> last use (cold: negative put order)
	dramCold map[string]bool
	clock    int64

	buckets map[int]*simBucket
	where   map[string]*simBucket
	used    int64
	nextID  int
	evicted bool // an SSD eviction pushed live keys out

	written, reinserted int64
	dramHits, ssdHits   int64
	won, lost, room     int64
	killed              int64
	// Object counts: written by offload (not re-insertion), replaced (a
	// key written again while on SSD), pushed out by whole-bucket
	// evictions. Live = offloaded - replaced - killed - pushed.
	offloaded, replaced, pushed int64
}

func newObjSim(sz churnSizes, perObject bool) *objSim {
	s := &objSim{block: sz.block, dramCap: int(sz.dram / sz.block), limit: churnBucketLimit(sz),
		margin: 1, perObject: perObject, compactFrac: 0.5, tieDead: true,
		dramUse: map[string]int64{}, dramCold: map[string]bool{}, buckets: map[int]*simBucket{}, where: map[string]*simBucket{},
		ssdUse: map[string]int64{}, ssdHit: map[string]bool{}}
	s.round = (s.dramCap*5 + 99) / 100
	s.high = sz.ssd * 9 / 10
	s.low = sz.ssd * 8 / 10
	s.sf = 10
	s.sk = admission.NewSketch(1024, 10*1024)
	return s
}

func (s *objSim) est(k string) uint32 {
	if s.oracle != nil {
		return s.oracle[k]
	}
	if s.past != nil {
		return s.past[k]
	}
	return s.sk.Estimate(k)
}

func (s *objSim) fileSize(keys []string) int64 {
	var kb int64
	for _, k := range keys {
		kb += int64(len(k))
	}
	return bucket.Size(len(keys), kb, int64(len(keys))*bucket.AlignUp(s.block))
}

func (s *objSim) density(b *simBucket) float64 {
	var keys []string
	var w float64
	for k := range b.live {
		keys = append(keys, k)
		w += float64(s.est(k)) * float64(s.block)
	}
	if len(keys) == 0 {
		return 0
	}
	liveBytes := int64(len(keys)) * s.block
	span := liveBytes + max(0, b.file-s.fileSize(keys))
	return w / float64(span)
}

func (b *simBucket) mostlyDead(block int64) bool {
	return 2*int64(len(b.live))*block <= b.written
}

// victims is the eviction order: mostly dead buckets (most dead bytes
// first), then by density (oldest first among equals).
func (s *objSim) victims() []*simBucket {
	var dead, rest []*simBucket
	for _, b := range s.buckets {
		if b.mostlyDead(s.block) {
			dead = append(dead, b)
		} else {
			rest = append(rest, b)
		}
	}
	dd := map[*simBucket]float64{}
	for _, b := range rest {
		dd[b] = s.density(b)
	}
	sortBy(dead, func(a, b *simBucket) bool {
		da, db := a.written-int64(len(a.live))*s.block, b.written-int64(len(b.live))*s.block
		return da > db || da == db && a.id < b.id
	})
	sortBy(rest, func(a, b *simBucket) bool { return dd[a] < dd[b] || dd[a] == dd[b] && a.id < b.id })
	return append(dead, rest...)
}

func sortBy(v []*simBucket, less func(a, b *simBucket) bool) {
	for i := 1; i < len(v); i++ {
		for j := i; j > 0 && less(v[j], v[j-1]); j-- {
			v[j], v[j-1] = v[j-1], v[j]
		}
	}
}

func (s *objSim) cost(k string) int64 { return s.fileSize([]string{k}) }

// test is the admission test of k with pending bytes admitted this round;
// doom: per-object, kill the victim object when won.
func (s *objSim) test(k string, pending int64, doom map[string]bool, apply bool) bool {
	f := float64(s.est(k))
	after := s.used + pending + s.cost(k)
	tested := s.margin > 0 && s.evicted
	if s.perObject {
		if after <= s.low || after <= s.high && !tested {
			if apply {
				s.room++
			}
			return true
		}
		v, ve := s.lowestObject(doom)
		if v == "" || f <= float64(ve)+s.margin {
			if apply {
				s.lost++
			}
			return false
		}
		if apply {
			s.won++
			doom[v] = true
		}
		return true
	}
	over := after - s.high
	vs := s.victims()
	if over <= 0 {
		if len(vs) == 0 || after <= s.low || !tested {
			if apply {
				s.room++
			}
			return true
		}
		return s.tally(f > s.density(vs[0])/float64(s.block)*float64(s.block)+s.margin, apply)
	}
	if len(vs) == 0 {
		return false
	}
	d := s.density(vs[len(vs)-1])
	var cum int64
	for _, v := range vs {
		cum += v.file
		if cum >= over {
			d = s.density(v)
			break
		}
	}
	return s.tally(f > d+s.margin, apply)
}

// tally counts an admission test's outcome when it is applied (not only
// asked), and returns it.
func (s *objSim) tally(ok, apply bool) bool {
	if apply {
		if ok {
			s.won++
		} else {
			s.lost++
		}
	}
	return ok
}

// lowestObject is the live SSD object of the lowest estimate not in doom
// (ties: the most-dead bucket's, then the oldest bucket's).
func (s *objSim) lowestObject(doom map[string]bool) (string, uint32) {
	if s.vict == "lfulru" {
		best, be, bu := "", uint32(math.MaxUint32), int64(math.MaxInt64)
		for k := range s.where {
			if doom[k] {
				continue
			}
			e, u := s.est(k), s.ssdUse[k]
			if e < be || e == be && (u < bu || u == bu && k < best) {
				best, be, bu = k, e, u
			}
		}
		return best, be
	}
	if s.vict != "" {
		for _, probation := range []bool{true, false} {
			if s.vict == "lru" && probation {
				continue
			}
			best, bu := "", int64(math.MaxInt64)
			for k := range s.where {
				if doom[k] || probation && s.ssdHit[k] {
					continue
				}
				if u := s.ssdUse[k]; u < bu || u == bu && k < best {
					best, bu = k, u
				}
			}
			if best != "" {
				return best, s.est(best)
			}
		}
		return "", 0
	}
	best, be := "", uint32(math.MaxUint32)
	var bb *simBucket
	for k, b := range s.where {
		if doom[k] {
			continue
		}
		e := s.est(k)
		better := e < be
		if e == be && bb != nil {
			if s.tieDead {
				da, db := len(b.live), len(bb.live)
				better = da < db || da == db && (b.id < bb.id || b.id == bb.id && k < best)
			} else {
				better = b.id < bb.id || b.id == bb.id && k < best
			}
		}
		if better {
			best, be, bb = k, e, b
		}
	}
	return best, be
}

func (s *objSim) kill(k string) {
	b := s.where[k]
	delete(s.where, k)
	delete(b.live, k)
	s.killed++
	if len(b.live) == 0 {
		s.used -= b.file
		delete(s.buckets, b.id)
	}
}

// write writes keys as buckets of at most limit bytes, making room first.
func (s *objSim) write(keys []string, reinsert bool) {
	for len(keys) > 0 {
		n := len(keys)
		for n > 1 && s.fileSize(keys[:n]) > s.limit {
			n--
		}
		part := keys[:n]
		keys = keys[n:]
		size := s.fileSize(part)
		if !reinsert {
			s.makeRoom(size)
		}
		b := &simBucket{id: s.nextID, file: size, written: int64(len(part)) * s.block, live: map[string]bool{}}
		s.nextID++
		for _, k := range part {
			if old := s.where[k]; old != nil {
				s.kill(k)
				s.killed--
				if !reinsert {
					s.replaced++
				}
			}
			if !reinsert {
				s.offloaded++
			}
			b.live[k] = true
			s.where[k] = b
			if !reinsert {
				s.ssdUse[k] = s.clock
				delete(s.ssdHit, k)
			}
		}
		s.buckets[b.id] = b
		s.used += size
		s.written += size
		if reinsert {
			s.reinserted += size
		}
	}
}

// makeRoom evicts (evict to fit, the tier's rule with worth) until size
// fits under high.
func (s *objSim) makeRoom(size int64) {
	for s.used+size > s.high {
		if s.perObject && s.compactFrac < 1 {
			var d *simBucket
			var dBytes int64
			for _, b := range s.buckets {
				db := b.written - int64(len(b.live))*s.block
				if db > dBytes || db == dBytes && d != nil && b.id < d.id {
					d, dBytes = b, db
				}
			}
			if d != nil && dBytes > 0 && float64(dBytes)/float64(d.written) >= s.compactFrac {
				delete(s.buckets, d.id)
				s.used -= d.file
				var keep []string
				for k := range d.live {
					delete(s.where, k)
					keep = append(keep, k)
				}
				sortStrings(keep)
				s.write(keep, true)
				continue
			}
		}
		vs := s.victims()
		if len(vs) == 0 {
			return
		}
		v := vs[0]
		delete(s.buckets, v.id)
		s.used -= v.file
		for k := range v.live {
			delete(s.where, k)
		}
		s.pushed += int64(len(v.live))
		if len(v.live) > 0 {
			s.evicted = true
		}
	}
}

func sortStrings(v []string) {
	for i := 1; i < len(v); i++ {
		for j := i; j > 0 && v[j] < v[j-1]; j-- {
			v[j], v[j-1] = v[j-1], v[j]
		}
	}
}

func (s *objSim) request(k string, cached func() int64) {
	if s.past != nil {
		s.past[k]++
	}
	if s.sk.Add(k) {
		s.sk.SetPeriod(s.sf * max(1024, cached()))
	}
	s.clock++
	if _, ok := s.dramUse[k]; ok {
		s.dramHits++
		s.dramUse[k] = s.clock
		delete(s.dramCold, k)
		return
	}
	if s.where[k] != nil {
		s.ssdUse[k] = s.clock
		s.ssdHit[k] = true
		s.ssdHits++
		return
	}
	// Miss: put into DRAM, evicting a round first when full.
	if len(s.dramUse) >= s.dramCap {
		s.evictRound()
	}
	cold := s.est(k) >= 2 && !s.test(k, 0, map[string]bool{}, false)
	s.dramUse[k] = s.clock
	if cold {
		s.dramCold[k] = true
	}
}

func (s *objSim) evictRound() {
	type cand struct {
		k    string
		cold bool
		use  int64
	}
	var cs []cand
	for k, u := range s.dramUse {
		cs = append(cs, cand{k, s.dramCold[k], u})
	}
	// cold first (newest cold first), then least recently used.
	less := func(a, b cand) bool {
		if s.dramFreq {
			ea, eb := s.est(a.k), s.est(b.k)
			if ea != eb {
				return ea < eb
			}
		}
		if a.cold != b.cold {
			return a.cold
		}
		if a.cold {
			return a.use > b.use
		}
		return a.use < b.use || a.use == b.use && a.k < b.k
	}
	// partial selection of round smallest
	var pick []cand
	for range s.round {
		bi := -1
		for i, c := range cs {
			if bi < 0 || less(c, cs[bi]) {
				bi = i
			}
		}
		if bi < 0 {
			break
		}
		pick = append(pick, cs[bi])
		cs[bi] = cs[len(cs)-1]
		cs = cs[:len(cs)-1]
	}
	var admit []string
	var pending int64
	doom := map[string]bool{}
	for _, c := range pick {
		delete(s.dramUse, c.k)
		delete(s.dramCold, c.k)
		if s.test(c.k, pending, doom, true) {
			admit = append(admit, c.k)
			pending += s.cost(c.k)
		}
	}
	for k := range doom {
		s.kill(k)
	}
	if len(admit) > 0 {
		s.write(admit, false)
	}
}

func TestChurnObjSim(t *testing.T) {
	if os.Getenv("TIERSTORE_OBJSIM") == "" {
		t.Skip("TIERSTORE_OBJSIM=1 runs the stop 46 model")
	}
	sz := churnSizes{dram: 16 << 20, ssd: 64 << 20, block: 64 << 10, convRequests: 12000, scanPasses: 4, sessions: 200,
		loopPasses: 5, zipfKeys: 4096, burstEvery: 1000, burstLen: 384, shapeRequests: 16000, shapeKeys: 4096}
	variants := strings.Split(envOr("TIERSTORE_OBJSIM_VARIANTS", "buckets,objects"), ",")
	for _, seed := range []int64{0, 1} {
		traces, err := churnTraces(&env{seed: seed}, sz)
		if err != nil {
			t.Fatal(err)
		}
		for _, tr := range traces {
			ba, err := beladyAll(tr.Requests, sz)
			if err != nil {
				t.Fatal(err)
			}
			blocks := churnUsableBlocks(sz, meanKeyLen(tr.Requests))
			bound := float64(demandMIN(tr.Requests, blocks)) / float64(len(tr.Requests))
			line := fmt.Sprintf("seed %d %-15s", seed, tr.Name)
			for _, v := range variants {
				s := newObjSim(sz, strings.HasPrefix(v, "objects"))
				for _, opt := range strings.Split(v, ":")[1:] {
					name, val, _ := strings.Cut(opt, "=")
					x, _ := strconv.ParseFloat(val, 64)
					switch name {
					case "c":
						s.compactFrac = x
					case "m":
						s.margin = x
					case "sf":
						s.sf = int64(x)
						s.sk = admission.NewSketch(1024, s.sf*1024)
					case "oracle":
						s.oracle = map[string]uint32{}
						for _, r := range tr.Requests {
							s.oracle[r.Key]++
						}
					case "vict":
						s.vict = val
					case "dramfreq":
						s.dramFreq = true
					case "past":
						s.past = map[string]uint32{}
					case "notie":
						s.tieDead = false
					}
				}
				for _, r := range tr.Requests {
					s.request(r.Key, func() int64 { return int64(len(s.dramUse) + len(s.where)) })
				}
				h := float64(s.dramHits+s.ssdHits) / float64(len(tr.Requests))
				tail := 0 // SSD keys outside the 1163 most popular (zipf0.9-bursts' z/<rank>)
				for k := range s.where {
					if r, ok := strings.CutPrefix(k, "z/"); ok {
						if n, err := strconv.Atoi(r); err == nil && n >= 1163 {
							tail++
						}
					}
				}
				line += fmt.Sprintf(" | %s %.3f/%.3f w %.0fMiB (re %.0f) won %d lost %d room %d killed %d ssd %d tail %d",
					v, h/ba, h/bound, float64(s.written)/(1<<20), float64(s.reinserted)/(1<<20), s.won, s.lost, s.room, s.killed, len(s.where), tail)
			}
			t.Log(line)
		}
	}
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

func beladyAll(reqs []trace.Request, sz churnSizes) (float64, error) {
	b, err := belady.MIN(reqs, sz.ssd+sz.dram)
	if err != nil {
		return 0, err
	}
	return b.HitRatio(), nil
}

// check verifies the model's bookkeeping: every live key's bucket holds
// it, every bucket's live keys map back to it, no bucket is empty, no
// object leaves but by a kill, a replacement or a bucket eviction (a
// compaction loses none), the
// used bytes are the files' sum and within the capacity, and no more
// bytes are on the SSD than were written.
func (s *objSim) check(capacity int64) error {
	var files int64
	live := 0
	for id, b := range s.buckets {
		if b.id != id {
			return fmt.Errorf("bucket %d filed as %d", b.id, id)
		}
		if len(b.live) == 0 {
			return fmt.Errorf("bucket %d has no live object and was kept", id)
		}
		for k := range b.live {
			if s.where[k] != b {
				return fmt.Errorf("key %s live in bucket %d but indexed elsewhere", k, id)
			}
		}
		live += len(b.live)
		files += b.file
	}
	if live != len(s.where) {
		return fmt.Errorf("%d live objects in buckets, %d indexed", live, len(s.where))
	}
	if want := s.offloaded - s.replaced - s.killed - s.pushed; int64(live) != want {
		return fmt.Errorf("%d live objects, want %d (offloaded %d, replaced %d, killed %d, pushed out %d): objects lost or made up",
			live, want, s.offloaded, s.replaced, s.killed, s.pushed)
	}
	if files != s.used {
		return fmt.Errorf("used %d, files %d", s.used, files)
	}
	if s.used > capacity {
		return fmt.Errorf("used %d over the capacity %d", s.used, capacity)
	}
	if s.used > s.written {
		return fmt.Errorf("used %d over the bytes written %d", s.used, s.written)
	}
	return nil
}

// TestChurnObjSimInvariants runs the model at small sizes (DRAM rounds of
// 4 blocks, so that buckets hold several objects) on every trace
// with both victim rules and checks its bookkeeping after every request,
// and that per-object victims never serve a killed object: a key whose
// SSD copy died is a miss until it is written again.
func TestChurnObjSimInvariants(t *testing.T) {
	sz := churnSizes{dram: 4 << 20, ssd: 8 << 20, block: 64 << 10, convRequests: 1000, scanPasses: 2, sessions: 16,
		loopPasses: 3, zipfKeys: 512, burstEvery: 200, burstLen: 48, shapeRequests: 2000, shapeKeys: 512}
	traces, err := churnTraces(&env{}, sz)
	if err != nil {
		t.Fatal(err)
	}
	var killed, reinserted int64
	for _, tr := range traces {
		for _, perObject := range []bool{false, true} {
			s := newObjSim(sz, perObject)
			s.compactFrac = 0
			defer func() { killed, reinserted = killed+s.killed, reinserted+s.reinserted }()
			for i, r := range tr.Requests {
				ssdBefore := s.ssdHits
				onSSD := s.where[r.Key] != nil
				s.request(r.Key, func() int64 { return int64(len(s.dramUse) + len(s.where)) })
				if s.ssdHits > ssdBefore && !onSSD {
					t.Fatalf("%s objects=%v request %d: %s served from SSD, not on it", tr.Name, perObject, i, r.Key)
				}
				if err := s.check(sz.ssd); err != nil {
					t.Fatalf("%s objects=%v request %d: %v", tr.Name, perObject, i, err)
				}
			}
			if !perObject && s.killed != 0 {
				t.Fatalf("%s: whole-bucket victims killed %d objects", tr.Name, s.killed)
			}
		}
	}
	t.Cleanup(func() {
		// The per-object paths ran: objects killed, buckets compacted.
		if killed == 0 || reinserted == 0 {
			t.Errorf("per-object victims killed %d objects and re-inserted %d bytes: the paths did not run", killed, reinserted)
		}
	})
}
