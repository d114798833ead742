package main

import (
	"container/heap"

	"github.com/tierstore/tierstore/bench/internal/trace"
	"github.com/tierstore/tierstore/bucket"
)

// The two-tier bound. Belady's MIN (bench/internal/belady) is the optimum
// of one cache of DRAM+SSD bytes that may decline to cache a missed object
// (bypass). The two tiers can do neither:
//   - every miss is put, so it enters DRAM (demand paging, no bypass);
//   - they do not hold DRAM+SSD bytes of objects: the SSD tier evicts at
//     its high watermark and every bucket file carries a header and a
//     trailer, and the master keeps an eviction round (eviction_ratio of
//     DRAM) rotating for the puts of misses.
//
// churnUsableBlocks is what the two tiers can hold of one-block objects;
// demandMIN is Belady's MIN without bypass at that many objects: no online
// policy of this store, whatever its admission, beats it. It is a bound of
// the store's layout, not a goal of the issue (whose goals are against
// MIN(DRAM+SSD) with bypass).

// churnUsableBlocks is the objects of one block the two tiers hold at
// most: DRAM less one eviction round (5%), plus the SSD's high watermark
// (90%) filled with full buckets of keyLen-byte keys.
func churnUsableBlocks(sz churnSizes, keyLen int64) int {
	dram := sz.dram / sz.block
	dram -= (dram*5 + 99) / 100
	limit := churnBucketLimit(sz)
	per := 0
	for bucket.Size(per+1, int64(per+1)*keyLen, int64(per+1)*bucket.AlignUp(sz.block)) <= limit {
		per++
	}
	if per == 0 {
		return int(dram)
	}
	full := bucket.Size(per, int64(per)*keyLen, int64(per)*bucket.AlignUp(sz.block))
	high := sz.ssd * 9 / 10
	ssd := high / full * int64(per)
	if rest := high % full; rest > 0 {
		n := 0
		for bucket.Size(n+1, int64(n+1)*keyLen, int64(n+1)*bucket.AlignUp(sz.block)) <= rest {
			n++
		}
		ssd += int64(n)
	}
	return int(dram + ssd)
}

// meanKeyLen is the mean key length of reqs (1 at least).
func meanKeyLen(reqs []trace.Request) int64 {
	var n int64
	for _, r := range reqs {
		n += int64(len(r.Key))
	}
	return max(1, n/int64(max(1, len(reqs))))
}

// demandMIN is the hit count of Belady's MIN without bypass for a cache of
// n objects: every miss is inserted, evicting the resident whose next use
// is furthest (one never used again first). Sizes are ignored (one slot
// per object; exact for one-block traces).
func demandMIN(reqs []trace.Request, n int) int64 {
	const never = int(^uint(0) >> 1)
	next := make([]int, len(reqs))
	last := map[string]int{}
	for i := len(reqs) - 1; i >= 0; i-- {
		next[i] = never
		if j, ok := last[reqs[i].Key]; ok {
			next[i] = j
		}
		last[reqs[i].Key] = i
	}
	res := map[string]*demandEntry{}
	var h demandHeap
	var hits int64
	for i, r := range reqs {
		if e := res[r.Key]; e != nil {
			hits++
			e.next = next[i]
			heap.Fix(&h, e.pos)
			continue
		}
		if n <= 0 {
			continue
		}
		if h.Len() == n {
			e := heap.Pop(&h).(*demandEntry)
			delete(res, e.key)
		}
		e := &demandEntry{key: r.Key, next: next[i]}
		heap.Push(&h, e)
		res[r.Key] = e
	}
	return hits
}

type demandEntry struct {
	key       string
	next, pos int
}

// demandHeap is a max-heap of residents by next use.
type demandHeap []*demandEntry

func (h demandHeap) Len() int           { return len(h) }
func (h demandHeap) Less(i, j int) bool { return h[i].next > h[j].next }
func (h demandHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].pos, h[j].pos = i, j
}
func (h *demandHeap) Push(x any) {
	e := x.(*demandEntry)
	e.pos = len(*h)
	*h = append(*h, e)
}
func (h *demandHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	*h = old[:len(old)-1]
	return e
}
