package belady

import (
	"container/heap"
	"fmt"
	"math"

	"github.com/tierstore/tierstore/bench/internal/trace"
)

// Result is the outcome of simulating MIN over a trace.
type Result struct {
	Capacity  int64
	Requests  int64
	Hits      int64
	ReqBytes  int64 // bytes requested
	HitBytes  int64 // bytes requested that were hits
	Admitted  int64 // objects inserted into the cache
	Evictions int64 // residents evicted to make room
	// Exact is true when every request had the same size, so Hits is the
	// proven optimum.
	Exact bool
}

// HitRatio is Hits / Requests (0 for an empty trace).
func (r Result) HitRatio() float64 {
	if r.Requests == 0 {
		return 0
	}
	return float64(r.Hits) / float64(r.Requests)
}

// ByteHitRatio is HitBytes / ReqBytes (0 for an empty trace).
func (r Result) ByteHitRatio() float64 {
	if r.ReqBytes == 0 {
		return 0
	}
	return float64(r.HitBytes) / float64(r.ReqBytes)
}

const never = math.MaxInt

type entry struct {
	id   int32
	size int64
	next int // index of the next request of this key, or never
	pos  int // index in the heap
}

// farthest is a max-heap of residents by next use.
type farthest []*entry

func (h farthest) Len() int           { return len(h) }
func (h farthest) Less(i, j int) bool { return h[i].next > h[j].next }
func (h farthest) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].pos = i
	h[j].pos = j
}
func (h *farthest) Push(x any) {
	e := x.(*entry)
	e.pos = len(*h)
	*h = append(*h, e)
}
func (h *farthest) Pop() any {
	old := *h
	e := old[len(old)-1]
	*h = old[:len(old)-1]
	return e
}

// MIN simulates Belady's MIN with bypass for reqs and a cache of capacity
// bytes. See the package doc for exactness.
func MIN(reqs []trace.Request, capacity int64) (Result, error) {
	if capacity <= 0 {
		return Result{}, fmt.Errorf("%w: got %d", ErrBadCapacity, capacity)
	}
	res := Result{Capacity: capacity, Exact: true}
	// Intern keys and compute next-use indexes in one backward pass.
	ids := make(map[string]int32, len(reqs)/2)
	keyID := make([]int32, len(reqs))
	for i, r := range reqs {
		id, ok := ids[r.Key]
		if !ok {
			id = int32(len(ids))
			ids[r.Key] = id
		}
		keyID[i] = id
		if r.Size != reqs[0].Size {
			res.Exact = false
		}
	}
	next := make([]int, len(reqs))
	last := make([]int, len(ids))
	for i := range last {
		last[i] = never
	}
	for i := len(reqs) - 1; i >= 0; i-- {
		next[i] = last[keyID[i]]
		last[keyID[i]] = i
	}

	resident := make([]*entry, len(ids))
	var h farthest
	var used int64
	var popped []*entry
	for i, r := range reqs {
		res.Requests++
		res.ReqBytes += r.Size
		id := keyID[i]
		if e := resident[id]; e != nil {
			res.Hits++
			res.HitBytes += r.Size
			if next[i] == never {
				heap.Remove(&h, e.pos)
				used -= e.size
				resident[id] = nil
				continue
			}
			e.next = next[i]
			heap.Fix(&h, e.pos)
			continue
		}
		if next[i] == never || r.Size > capacity {
			continue // bypass: no later use, or never fits
		}
		free := capacity - used
		popped = popped[:0]
		for free < r.Size && h.Len() > 0 && h[0].next > next[i] {
			e := heap.Pop(&h).(*entry)
			popped = append(popped, e)
			free += e.size
		}
		if free < r.Size {
			for _, e := range popped {
				heap.Push(&h, e)
			}
			continue // bypass: only nearer-needed residents could make room
		}
		for _, e := range popped {
			used -= e.size
			resident[e.id] = nil
		}
		res.Evictions += int64(len(popped))
		e := &entry{id: id, size: r.Size, next: next[i]}
		heap.Push(&h, e)
		resident[id] = e
		used += r.Size
		res.Admitted++
	}
	return res, nil
}
