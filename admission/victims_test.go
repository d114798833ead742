package admission

import (
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// orderVictims drops the least recently used victim unless it is more
// frequent than the least frequent one left by more than the margin.
func TestOrderVictims(t *testing.T) {
	for _, c := range []struct {
		name   string
		f      []uint32
		margin float64
		want   []int
		swaps  [][2]int
	}{
		{"lru when no estimate stands out", []uint32{1, 1, 1}, 0, []int{0, 1, 2}, nil},
		{"the frequent one is spared", []uint32{5, 1, 3}, 1, []int{1, 2, 0}, [][2]int{{0, 1}, {0, 2}}},
		{"within the margin the lru goes (a loop's phase)", []uint32{4, 3, 3}, 1, []int{0, 1, 2}, nil},
		{"ties among the least frequent go in lru order", []uint32{6, 2, 2, 9}, 0, []int{1, 2, 0, 3}, [][2]int{{0, 1}, {0, 2}}},
		{"the margin is exceeded, not reached", []uint32{3, 1}, 2, []int{0, 1}, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			order := make([]int, len(c.f))
			swaps := orderVictims(c.f, c.margin, order, nil)
			if !slices.Equal(order, c.want) {
				t.Errorf("order %v, want %v", order, c.want)
			}
			if !slices.Equal(swaps, c.swaps) {
				t.Errorf("swaps %v, want %v", swaps, c.swaps)
			}
		})
	}
}

// The pool doubles when spared keys come back as DRAM hits before the
// dropped keys come back as misses, halves in the opposite case, stays in
// [minVictimPool, maxVictimPool], and a dropped key read from SSD settles
// nothing.
func TestVictimPoolAdapts(t *testing.T) {
	v := newVictimPool(1024)
	if v.factor() != minVictimPool {
		t.Fatalf("starts at %v, want %v", v.factor(), minVictimPool)
	}
	n := uint64(0)
	epoch := func(spared bool, o Outcome) {
		for range swapEpoch {
			n += 2
			v.swapped(n, n+1)
			if spared {
				v.lookup(n, o)
			} else {
				v.lookup(n+1, o)
			}
		}
	}
	epoch(true, Miss) // the spared key left DRAM since: nothing
	if v.factor() != minVictimPool || v.good+v.bad != 0 {
		t.Fatalf("spared keys that missed moved the pool: %v, good %d bad %d", v.factor(), v.good, v.bad)
	}
	for want := float64(minVictimPool * 2); want <= maxVictimPool; want *= 2 {
		epoch(true, DRAMHit)
		if v.factor() != want {
			t.Fatalf("after spared keys came back: %v, want %v", v.factor(), want)
		}
	}
	epoch(true, DRAMHit)
	if v.factor() != maxVictimPool {
		t.Fatalf("above the bound: %v", v.factor())
	}
	epoch(false, SSDHit) // the dropped key was kept by the SSD: nothing
	if v.factor() != maxVictimPool || v.good+v.bad != 0 {
		t.Fatalf("dropped keys read from SSD moved the pool: %v, good %d bad %d", v.factor(), v.good, v.bad)
	}
	epoch(false, Miss)
	if v.factor() != maxVictimPool/2 {
		t.Fatalf("after dropped keys missed: %v, want %v", v.factor(), maxVictimPool/2)
	}
	for range 8 {
		epoch(false, Miss)
	}
	if v.factor() != minVictimPool {
		t.Fatalf("below the bound: %v", v.factor())
	}
}

// An even epoch (within one standard deviation) leaves the pool; a key in
// a newer swap leaves its older pair unsettled; the ring forgets the
// oldest pairs.
func TestVictimPoolNoise(t *testing.T) {
	v := newVictimPool(64)
	for i := range uint64(swapEpoch) {
		v.swapped(2*i+100, 2*i+101)
		if i%2 == 0 {
			v.lookup(2*i+100, DRAMHit)
		} else {
			v.lookup(2*i+101, Miss)
		}
	}
	if v.factor() != minVictimPool || v.ups+v.downs != 0 {
		t.Fatalf("an even epoch moved the pool: %v", v.factor())
	}
	v.swapped(1, 2)
	v.swapped(1, 3) // 1 is spared again: the pair (1, 2) settles nothing
	v.lookup(2, Miss)
	if v.bad != 0 {
		t.Fatalf("a superseded pair settled: bad %d", v.bad)
	}
	v.lookup(1, DRAMHit)
	if v.good != 1 {
		t.Fatalf("good %d, want 1", v.good)
	}
	for i := range uint64(64) {
		v.swapped(1000+2*i, 1001+2*i)
	}
	v.swapped(5000, 5001) // overwrites the pair of 1000
	v.lookup(1000, DRAMHit)
	if v.good != 1 {
		t.Fatalf("a pair the ring overwrote settled: good %d", v.good)
	}
	if len(v.at) > 2*len(v.ring) {
		t.Fatalf("%d keys tracked for %d pairs", len(v.at), len(v.ring))
	}
}

// TinyLFU's OrderVictims ranks by the sketch and its swaps, settled by the
// lookups the policy observes, grow the pool; LRUVictims keeps it at 1.
func TestTinyLFUOrderVictims(t *testing.T) {
	p := NewTinyLFU(TinyLFUConfig{Margin: 1})
	for range 6 {
		p.ObserveLookup("hot", DRAMHit, 1)
	}
	keys := []string{"hot", "cold"}
	order := make([]int, 2)
	p.OrderVictims(keys, order)
	if !slices.Equal(order, []int{1, 0}) {
		t.Fatalf("order %v: the frequent key should be spared", order)
	}
	if got := p.VictimPoolFactor(); got != minVictimPool {
		t.Fatalf("pool %v before any settled swap", got)
	}
	for i := range swapEpoch {
		cold := fmt.Sprint("cold", i)
		p.OrderVictims([]string{"hot", cold}, order)
		p.ObserveLookup("hot", DRAMHit, 1)
	}
	if got := p.VictimPoolFactor(); got != 2*minVictimPool {
		t.Fatalf("pool %v after %d good swaps, want %v", got, swapEpoch, 2*minVictimPool)
	}
	if got := p.Stats().VictimPool; got != 2*minVictimPool {
		t.Fatalf("Stats.VictimPool %v", got)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(p)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, mf := range mfs {
		if mf.GetName() == "tierstore_admission_dram_victim_pool" {
			found = true
			if got := mf.GetMetric()[0].GetGauge().GetValue(); got != 2*minVictimPool {
				t.Fatalf("gauge %v, want %v", got, 2*minVictimPool)
			}
		}
	}
	if !found {
		t.Fatal("no tierstore_admission_dram_victim_pool gauge")
	}
	q := NewTinyLFU(TinyLFUConfig{LRUVictims: true})
	if got := q.VictimPoolFactor(); got != 1 {
		t.Fatalf("LRUVictims: pool %v, want 1", got)
	}
}

// OrderVictims, lookups and Stats run concurrently (the master's eviction
// rounds beside its lookups): every order is a permutation and the pool
// stays in its bounds. Run with -race.
func TestOrderVictimsConcurrent(t *testing.T) {
	p := NewTinyLFU(TinyLFUConfig{Margin: 0})
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			keys := make([]string, 32)
			order := make([]int, len(keys))
			for round := range 200 {
				for i := range keys {
					keys[i] = fmt.Sprint(g, "/", (round*7+i*13)%97)
				}
				p.OrderVictims(keys, order)
				seen := make([]bool, len(keys))
				for _, i := range order {
					if seen[i] {
						errs <- fmt.Errorf("order %v is not a permutation", order)
						return
					}
					seen[i] = true
				}
				for i := range 8 {
					o := Outcome(i % 3)
					p.ObserveLookup(keys[(i*5+round)%len(keys)], o, 1)
				}
				if f := p.Stats().VictimPool; f < minVictimPool || f > maxVictimPool {
					errs <- fmt.Errorf("pool %v out of bounds", f)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}
