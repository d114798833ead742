package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"
)

// serveScale sizes the serve scenario: the DRAM budget every store gets
// and the shapes of the inference workloads.
type serveScale struct {
	dram     int64         // DRAM budget of every store
	block    int64         // vLLM block, multi-turn block (2 MiB)
	page     int64         // SGLang K and V object of a page (4 MiB each)
	chunk    int64         // LMCache chunk (32 MiB)
	vBatch   int           // vLLM blocks per batch (16)
	sBatch   int           // SGLang pages per batch get (128)
	prefix   int           // multi-turn: blocks of a prefix
	oneOff   int           // multi-turn: blocks of a one-off request
	workers  int           // concurrent workers per store
	sWorkers int           // concurrent workers of the SGLang batch get (its buffers are large)
	d        time.Duration // timed phase of a duration row
	passes   int           // runs of each workload and size per store
}

var (
	serveFull = serveScale{dram: 2 << 30, block: 2 << 20, page: 4 << 20, chunk: 32 << 20,
		vBatch: 16, sBatch: 128, prefix: 8, oneOff: 4, workers: 4, sWorkers: 2, d: 3 * time.Second, passes: 2}
	serveQuick = serveScale{dram: 64 << 20, block: 128 << 10, page: 256 << 10, chunk: 2 << 20,
		vBatch: 16, sBatch: 16, prefix: 8, oneOff: 4, workers: 2, sWorkers: 2, d: 300 * time.Millisecond, passes: 1}
)

// A working set either fits in DRAM (0.6x the budget) or is 3x it.
const (
	fitsShare = 0.6
	overShare = 3.0
)

// opStat is what one row measured: operations, the bytes they moved (for
// reads: bytes of hits only), their latencies, items asked and found.
type opStat struct {
	op         string
	ops        int
	bytes      int64
	lat        latencies
	asked      int64
	hits       int64
	failedPuts int64
	elapsed    time.Duration
	ssdBytes   int64 // SSD bytes written by the store at the end of the row
}

func (o *opStat) gbps() float64 {
	if o.elapsed <= 0 {
		return 0
	}
	return float64(o.bytes) / o.elapsed.Seconds() / 1e9
}

func (o *opStat) hitRatio() any {
	if o.asked == 0 {
		return nil
	}
	return float64(o.hits) / float64(o.asked)
}

// opResult is one operation's outcome for drive.
type opResult struct {
	bytes       int64
	asked, hits int
	failedPuts  int
}

// drive runs op on k workers; worker w's calls take indices from a
// shared counter, until n are done (n > 0) or d has passed (d > 0).
func drive(ctx context.Context, name string, k, n int, d time.Duration, op func(w, i int) (opResult, error)) (opStat, error) {
	st := opStat{op: name}
	var next atomic.Int64
	var mu sync.Mutex
	var firstErr error
	start := time.Now()
	deadline := start.Add(d)
	var wg sync.WaitGroup
	for w := range k {
		wg.Go(func() {
			var mine latencies
			var loc opStat
			for ctx.Err() == nil {
				i := int(next.Add(1) - 1)
				if (n > 0 && i >= n) || (d > 0 && time.Now().After(deadline)) {
					break
				}
				t0 := time.Now()
				r, err := op(w, i)
				if err != nil {
					mu.Lock()
					firstErr = cmpOr(firstErr, fmt.Errorf("%s: %w", name, err))
					mu.Unlock()
					return
				}
				mine = append(mine, time.Since(t0))
				loc.bytes += r.bytes
				loc.asked += int64(r.asked)
				loc.hits += int64(r.hits)
				loc.failedPuts += int64(r.failedPuts)
			}
			mu.Lock()
			st.lat = append(st.lat, mine...)
			st.bytes += loc.bytes
			st.asked += loc.asked
			st.hits += loc.hits
			st.failedPuts += loc.failedPuts
			mu.Unlock()
		})
	}
	wg.Wait()
	st.elapsed = time.Since(start)
	st.ops = len(st.lat)
	return st, cmpOr(firstErr, ctx.Err())
}

// serveRun is one store on one workload at one working-set size.
type serveRun struct {
	s    kvServer
	sc   serveScale
	ws   int64 // working-set bytes
	rows []opStat
	// ssdBase is the store's SSD bytes written when the warm-up ended:
	// rows count from it.
	ssdBase int64

	mu   sync.Mutex             // protects srcs and bufs (the maps; a worker owns its buffers)
	srcs map[int64]*valueSource // per size
	bufs map[int64][][][]byte   // per size: per worker, buffers
}

// value is the value of object id of size bytes: a window of a random
// buffer, distinct per id and checkable.
func (r *serveRun) value(size int64, id int) []byte {
	r.mu.Lock()
	defer r.mu.Unlock()
	src, ok := r.srcs[size]
	if !ok {
		src = newValueSource(int(size), uint64(size))
		r.srcs[size] = src
	}
	return src.value(id)
}

// buffers are n reusable read buffers of size for worker w.
func (r *serveRun) buffers(size int64, w, n int) [][]byte {
	r.mu.Lock()
	defer r.mu.Unlock()
	per := r.bufs[size]
	for len(per) <= w {
		per = append(per, nil)
	}
	for len(per[w]) < n {
		per[w] = append(per[w], make([]byte, size))
	}
	r.bufs[size] = per
	return per[w][:n]
}

// check compares a sample of the values read (one per call) with what
// was put.
func (r *serveRun) check(hit []bool, bufs [][]byte, size int64, ids []int, i int) error {
	j := i % len(ids)
	if hit[j] && !bytes.Equal(bufs[j], r.value(size, ids[j])) {
		return fmt.Errorf("%w: object %d of %d bytes", errVerify, ids[j], size)
	}
	return nil
}

// row records a measured row with the store's SSD bytes written so far.
func (r *serveRun) row(ctx context.Context, st opStat, err error) error {
	if err != nil {
		return err
	}
	if st.ssdBytes, err = r.s.ssdWritten(ctx); err != nil {
		return fmt.Errorf("bench: serve: SSD stats: %w", err)
	}
	st.ssdBytes -= r.ssdBase
	r.rows = append(r.rows, st)
	return nil
}

// warmKey names the i-th object of the warm-up fill.
func warmKey(i int) string { return fmt.Sprintf("warm/%d", i) }

// warm fills three quarters of the store's DRAM budget with values of
// size under keys of their own, one put each, then empties the store
// (flush), untimed. The timed puts then write into memory the store has
// touched once, as in a cache that has been serving for a while; without
// it the first put rows measured each store's page faults on fresh
// memory (the same for every store). SSD bytes the warm-up caused are
// left out of the rows (ssdBase).
func (r *serveRun) warm(ctx context.Context, size int64) error {
	n := max(1, int(r.sc.dram*3/4/size))
	_, err := drive(ctx, "warm-up", r.sc.workers, n, 0, func(w, i int) (opResult, error) {
		err := r.s.put(ctx, w, warmKey(i), r.value(size, i))
		if errors.Is(err, errNotStored) {
			return opResult{failedPuts: 1}, nil
		}
		return opResult{bytes: size}, err
	})
	if err != nil {
		return err
	}
	if err := r.s.flush(ctx); err != nil {
		return fmt.Errorf("flush: %w", err)
	}
	r.ssdBase, err = r.s.ssdWritten(ctx)
	return err
}

// keysOf names objects ids under prefix.
func keysOf(prefix string, ids []int) []string {
	ks := make([]string, len(ids))
	for i, id := range ids {
		ks[i] = fmt.Sprintf("%s/%d", prefix, id)
	}
	return ks
}

func span(lo, n int) []int {
	ids := make([]int, n)
	for i := range ids {
		ids[i] = lo + i
	}
	return ids
}

// putRange puts objects [lo, lo+n) of size one by one (row "put") or in
// batches of batch (row "batch put B").
func (r *serveRun) putRange(ctx context.Context, prefix string, size int64, lo, n, batch int) error {
	name := "put"
	if batch > 1 {
		name = fmt.Sprintf("batch put %d", batch)
	}
	st, err := drive(ctx, name, r.sc.workers, (n+batch-1)/batch, 0, func(w, i int) (opResult, error) {
		ids := span(lo+i*batch, min(batch, n-i*batch))
		keys := keysOf(prefix, ids)
		if batch == 1 {
			err := r.s.put(ctx, w, keys[0], r.value(size, ids[0]))
			if errors.Is(err, errNotStored) {
				return opResult{failedPuts: 1}, nil
			}
			return opResult{bytes: size}, err
		}
		vals := make([][]byte, len(ids))
		for j, id := range ids {
			vals[j] = r.value(size, id)
		}
		failed, err := r.s.batchPut(ctx, w, keys, vals)
		return opResult{bytes: size * int64(len(ids)-failed), failedPuts: failed}, err
	})
	return r.row(ctx, st, err)
}

// getRandom reads random objects of [0, n): one per call (row "get") or
// batches of batch consecutive ones (row "batch get B"), for the scale's
// duration.
func (r *serveRun) getRandom(ctx context.Context, prefix string, size int64, n, batch, seed int) error {
	name := "get"
	if batch > 1 {
		name = fmt.Sprintf("batch get %d", batch)
	}
	dropCache(r.s.ssdDir())
	rngs := make([]*rand.Rand, r.sc.workers)
	for w := range rngs {
		rngs[w] = rand.New(rand.NewPCG(uint64(seed), uint64(w)))
		r.buffers(size, w, batch)
	}
	st, err := drive(ctx, name, r.sc.workers, 0, r.sc.d, func(w, i int) (opResult, error) {
		ids := span(rngs[w].IntN(n/batch)*batch, batch)
		keys, bufs := keysOf(prefix, ids), r.buffers(size, w, batch)
		var hit []bool
		var err error
		if batch == 1 {
			var h bool
			h, err = r.s.get(ctx, w, keys[0], bufs[0])
			hit = []bool{h}
		} else {
			hit, err = r.s.batchGet(ctx, w, keys, bufs)
		}
		if err != nil {
			return opResult{}, err
		}
		return r.countHits(hit, size), r.check(hit, bufs, size, ids, i)
	})
	return r.row(ctx, st, err)
}

func (r *serveRun) countHits(hit []bool, size int64) opResult {
	res := opResult{asked: len(hit)}
	for _, h := range hit {
		if h {
			res.hits++
			res.bytes += size
		}
	}
	return res
}

// serveLayers is the number of layer buffers a vLLM block is gathered
// from and scattered into by tierstore (64 x 32 KiB for 2 MiB).
const serveLayers = 64

// vLLM: blocks of 2 MiB put in batches of 16 (the first quarter one by
// one), read back in batches of 16 consecutive blocks and one by one.
func serveVLLM(ctx context.Context, r *serveRun) error {
	if l, ok := r.s.(layered); ok { // tierstore: one buffer per layer, as the connector
		l.setLayers(serveLayers)
		defer l.setLayers(1)
	}
	b := r.sc.vBatch
	n := max(2*b, int(r.ws/r.sc.block)/b*b)
	q := n / 4 / b * b
	if err := r.putRange(ctx, "vllm", r.sc.block, 0, q, 1); err != nil {
		return err
	}
	if err := r.putRange(ctx, "vllm", r.sc.block, q, n-q, b); err != nil {
		return err
	}
	if err := r.getRandom(ctx, "vllm", r.sc.block, n, b, 1); err != nil {
		return err
	}
	return r.getRandom(ctx, "vllm", r.sc.block, n, 1, 2)
}

// LMCache: chunks of 32 MiB, put and read one by one.
func serveLMCache(ctx context.Context, r *serveRun) error {
	n := max(4, int(r.ws/r.sc.chunk))
	if err := r.putRange(ctx, "lmc", r.sc.chunk, 0, n, 1); err != nil {
		return err
	}
	return r.getRandom(ctx, "lmc", r.sc.chunk, n, 1, 3)
}

// SGLang: a page is a K and a V object of 4 MiB each (ids 2p, 2p+1).
// Ingest is a run of requests, each adding sBatch/4 new pages after a
// prefix: batch_exists of the objects of the request's sBatch pages (the
// prefix is found), then a batch put of the missing ones. Reads are batch
// gets of sBatch consecutive pages, three per worker.
func serveSGLang(ctx context.Context, r *serveRun) error {
	b, size := r.sc.sBatch, r.sc.page
	step := max(1, b/4)
	pages := max(2*b, int(r.ws/(2*size))) / step * step
	st, err := drive(ctx, fmt.Sprintf("exists+batch put %d", b), r.sc.sWorkers, pages/step, 0, func(w, i int) (opResult, error) {
		lo := max(0, (i+1)*step-b)
		return r.sglangIngest(ctx, w, span(2*lo, 2*((i+1)*step-lo)))
	})
	if err := r.row(ctx, st, err); err != nil {
		return err
	}
	dropCache(r.s.ssdDir())
	rngs := make([]*rand.Rand, r.sc.sWorkers)
	for w := range rngs {
		rngs[w] = rand.New(rand.NewPCG(4, uint64(w)))
	}
	st, err = drive(ctx, fmt.Sprintf("batch get %d pages", b), r.sc.sWorkers, 3*r.sc.sWorkers, 0, func(w, i int) (opResult, error) {
		ids := span(2*rngs[w].IntN(pages-b+1), 2*b)
		bufs := r.buffers(size, w, 2*b)
		hit, err := r.s.batchGet(ctx, w, keysOf("sgl", ids), bufs)
		if err != nil {
			return opResult{}, err
		}
		return r.countHits(hit, size), r.check(hit, bufs, size, ids, i)
	})
	return r.row(ctx, st, err)
}

// sglangIngest is one SGLang request's store: batch_exists of ids, then a
// batch put of those missing.
func (r *serveRun) sglangIngest(ctx context.Context, w int, ids []int) (opResult, error) {
	keys := keysOf("sgl", ids)
	have, err := r.s.batchExists(ctx, w, keys)
	if err != nil {
		return opResult{}, err
	}
	var mk []string
	var mv [][]byte
	for j, h := range have {
		if !h {
			mk, mv = append(mk, keys[j]), append(mv, r.value(r.sc.page, ids[j]))
		}
	}
	if len(mk) == 0 {
		return opResult{}, nil
	}
	failed, err := r.s.batchPut(ctx, w, mk, mv)
	return opResult{bytes: r.sc.page * int64(len(mk)-failed), failedPuts: failed}, err
}

// zipf draws ranks in [0, n) with P(k) proportional to 1/(k+1)^s (s may be
// below 1, which math/rand's Zipf does not take).
type zipf struct{ cdf []float64 }

func newZipf(n int, s float64) *zipf {
	z := &zipf{cdf: make([]float64, n)}
	sum := 0.0
	for k := range n {
		sum += 1 / math.Pow(float64(k+1), s)
		z.cdf[k] = sum
	}
	for k := range z.cdf {
		z.cdf[k] /= sum
	}
	return z
}

func (z *zipf) draw(r *rand.Rand) int {
	u := r.Float64()
	lo, hi := 0, len(z.cdf)-1
	for lo < hi {
		mid := (lo + hi) / 2
		if z.cdf[mid] < u {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	return lo
}

// Multi-turn re-reads: prefixes of 8 blocks, each put once; then requests
// that re-read a prefix drawn by Zipf(0.9) (batch get, the misses put
// back, as an engine that recomputes them does), one in five a one-off
// request of 4 new blocks (read, missed, put, never read again). The
// prefixes take the working set; the one-offs add 0.4x DRAM. The hit
// ratio counts prefix re-reads only.
const (
	zipfS       = 0.9
	oneOffShare = 0.2
)

func serveMultiTurn(ctx context.Context, r *serveRun) error {
	sc := r.sc
	ws := r.ws
	if ws < r.sc.dram {
		ws = int64(0.4 * float64(sc.dram)) // with the one-offs, 0.8x DRAM
	}
	prefixes := max(4, int(ws/(int64(sc.prefix)*sc.block)))
	if err := r.putRange(ctx, "mt", sc.block, 0, prefixes*sc.prefix, sc.prefix); err != nil {
		return err
	}
	r.rows = r.rows[:len(r.rows)-1] // the warm-up fill is not a row
	oneOffs := max(4, int(0.4*float64(sc.dram)/float64(sc.block))/sc.oneOff)
	n := int(float64(oneOffs) / oneOffShare)
	z, rng := newZipf(prefixes, zipfS), rand.New(rand.NewPCG(5, 5))
	reqs := make([][]int, n)
	next := prefixes * sc.prefix
	for i := range reqs {
		if rng.Float64() < oneOffShare {
			reqs[i], next = span(next, sc.oneOff), next+sc.oneOff
		} else {
			reqs[i] = span(z.draw(rng)*sc.prefix, sc.prefix)
		}
	}
	dropCache(r.s.ssdDir())
	st, err := drive(ctx, fmt.Sprintf("request (batch get %d, put misses)", sc.prefix), sc.workers, n, 0, func(w, i int) (opResult, error) {
		return r.multiTurnRequest(ctx, w, i, reqs[i], prefixes*sc.prefix)
	})
	return r.row(ctx, st, err)
}

func (r *serveRun) multiTurnRequest(ctx context.Context, w, i int, ids []int, firstOneOff int) (opResult, error) {
	size := r.sc.block
	keys, bufs := keysOf("mt", ids), r.buffers(size, w, len(ids))
	hit, err := r.s.batchGet(ctx, w, keys, bufs)
	if err != nil {
		return opResult{}, err
	}
	if err := r.check(hit, bufs, size, ids, i); err != nil {
		return opResult{}, err
	}
	res := opResult{}
	if ids[0] < firstOneOff {
		res = r.countHits(hit, size)
	}
	var mk []string
	var mv [][]byte
	for j, h := range hit {
		if !h {
			mk, mv = append(mk, keys[j]), append(mv, r.value(size, ids[j]))
		}
	}
	if len(mk) > 0 {
		failed, err := r.s.batchPut(ctx, w, mk, mv)
		if err != nil {
			return opResult{}, err
		}
		res.failedPuts = failed
	}
	return res, nil
}
