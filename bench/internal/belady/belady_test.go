package belady

import (
	"container/list"
	"errors"
	"fmt"
	"testing"

	"pgregory.net/rapid"

	"github.com/tierstore/tierstore/bench/internal/trace"
)

func unit(keys ...int) []trace.Request {
	r := make([]trace.Request, len(keys))
	for i, k := range keys {
		r[i] = trace.Request{Key: fmt.Sprint(k), Size: 1}
	}
	return r
}

func TestTextbook(t *testing.T) {
	// The classic reference string: OPT with 3 frames has 7 faults, 5 hits.
	res, err := MIN(unit(1, 2, 3, 4, 1, 2, 5, 1, 2, 3, 4, 5), 3)
	if err != nil {
		t.Fatal(err)
	}
	if res.Hits != 5 || !res.Exact || res.Requests != 12 {
		t.Fatalf("got %+v, want 5 hits of 12, exact", res)
	}
}

func TestBadCapacity(t *testing.T) {
	if _, err := MIN(unit(1), 0); !errors.Is(err, ErrBadCapacity) {
		t.Fatalf("err = %v", err)
	}
}

// bruteForce is the optimal hit count of a unit-size cache with bypass, by
// exhaustive search over every admission and victim choice.
func bruteForce(keys []int, capacity int) int {
	var rec func(i int, cache map[int]bool) int
	rec = func(i int, cache map[int]bool) int {
		if i == len(keys) {
			return 0
		}
		k := keys[i]
		if cache[k] {
			return 1 + rec(i+1, cache)
		}
		best := rec(i+1, cache) // bypass
		if len(cache) < capacity {
			cache[k] = true
			best = max(best, rec(i+1, cache))
			delete(cache, k)
			return best
		}
		for v := range cache {
			if v == k {
				continue
			}
			delete(cache, v)
			cache[k] = true
			best = max(best, rec(i+1, cache))
			delete(cache, k)
			cache[v] = true
		}
		return best
	}
	return rec(0, map[int]bool{})
}

func TestMINIsOptimalForUnitSizes(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		keys := rapid.SliceOfN(rapid.IntRange(0, 4), 1, 11).Draw(t, "keys")
		capacity := rapid.IntRange(1, 3).Draw(t, "cap")
		res, err := MIN(unit(keys...), int64(capacity))
		if err != nil {
			t.Fatal(err)
		}
		if want := bruteForce(keys, capacity); int(res.Hits) != want {
			t.Fatalf("MIN hits = %d, optimum = %d", res.Hits, want)
		}
	})
}

// lruHits simulates an LRU byte cache that admits every miss.
func lruHits(reqs []trace.Request, capacity int64) int64 {
	type item struct {
		key  string
		size int64
	}
	l := list.New()
	at := map[string]*list.Element{}
	var used, hits int64
	for _, r := range reqs {
		if e, ok := at[r.Key]; ok {
			hits++
			l.MoveToFront(e)
			continue
		}
		if r.Size > capacity {
			continue
		}
		for used+r.Size > capacity {
			b := l.Back()
			it := b.Value.(item)
			used -= it.size
			delete(at, it.key)
			l.Remove(b)
		}
		at[r.Key] = l.PushFront(item{r.Key, r.Size})
		used += r.Size
	}
	return hits
}

func TestMINBeatsLRU(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		keys := rapid.SliceOfN(rapid.IntRange(0, 30), 1, 300).Draw(t, "keys")
		capacity := rapid.Int64Range(1, 20).Draw(t, "cap")
		reqs := unit(keys...)
		res, err := MIN(reqs, capacity)
		if err != nil {
			t.Fatal(err)
		}
		if l := lruHits(reqs, capacity); res.Hits < l {
			t.Fatalf("MIN hits %d < LRU hits %d", res.Hits, l)
		}
	})
}

func TestScanTwiceCapacity(t *testing.T) {
	// Reference 004: a working set twice the cache, scanned repeatedly. LRU
	// never hits; MIN keeps about half the working set for the next pass.
	tr, err := trace.Scan(trace.ScanConfig{WorkingSet: 200 << 10, ObjectSize: 1 << 10, Passes: 5})
	if err != nil {
		t.Fatal(err)
	}
	capacity := int64(100 << 10)
	if h := lruHits(tr.Requests, capacity); h != 0 {
		t.Fatalf("LRU hits = %d, want 0", h)
	}
	res, _ := MIN(tr.Requests, capacity)
	// 4 passes after the first can hit; each hits about capacity/object
	// objects (99 or 100: one slot turns over).
	if res.Hits < 4*95 || res.Hits > 4*100 {
		t.Fatalf("MIN hits = %d, want about 400", res.Hits)
	}
}

func TestVariableSizes(t *testing.T) {
	r := func(k string, n int64) trace.Request { return trace.Request{Key: k, Size: n} }
	reqs := []trace.Request{r("a", 6), r("b", 5), r("c", 5), r("a", 6), r("b", 5), r("c", 5)}
	res, err := MIN(reqs, 10)
	if err != nil {
		t.Fatal(err)
	}
	if res.Exact {
		t.Fatal("Exact with two sizes")
	}
	// Furthest-next-use keeps a, then evicts nothing for b (a is needed
	// sooner), so: a admitted, b bypassed... the heuristic gets 1 hit; the
	// true optimum (keep b and c) gets 2. This documents the approximation.
	if res.Hits != 1 {
		t.Fatalf("hits = %d, want the heuristic's 1", res.Hits)
	}
	if res.HitBytes != 6 || res.ReqBytes != 32 {
		t.Fatalf("bytes = %d/%d", res.HitBytes, res.ReqBytes)
	}
}
