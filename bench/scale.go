package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tierstore/tierstore/master"
	"github.com/tierstore/tierstore/masterapi"
)

func init() {
	register(scenario{
		name: "scale",
		help: "one in-process master filled to 1M, 10M (--scale_objects) objects of vLLM-shaped keys: RSS and heap per object, put pairs/s and lookup p99 at that size",
		run:  runScale,
	})
}

// scaleObjSize is every object's size: the master keeps the same metadata
// whatever the size, and the segment is bookkeeping only.
const scaleObjSize = 64 << 10

// scaleKey is object i's key in vLLM's layout (108 bytes: a fixed prefix
// and a 256-bit block hash in hex), made on demand so that the bench holds
// no key list: at 50M keys that list alone would be gigabytes.
func scaleKey(i int) string {
	var words [4]uint64
	for j := range words {
		words[j] = mix(uint64(4*i+j) * 0x9e3779b97f4a7c15)
	}
	return fmt.Sprintf("model@tp_rank:0@pcp0@dcp0@pp_rank:0@group:0@%016x%016x%016x%016x", words[0], words[1], words[2], words[3])
}

// scaleBudget is the master RSS issue 23 allows 50M objects.
const scaleBudget = 8 << 30

// scaleSizes parses --scale_objects ("1M,10M,50M").
func scaleSizes(s string, quick bool) ([]int, error) {
	if s == "" {
		if quick {
			return []int{100_000}, nil
		}
		return []int{1_000_000, 10_000_000}, nil
	}
	var out []int
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		mul := 1
		switch {
		case strings.HasSuffix(f, "M"):
			mul, f = 1_000_000, strings.TrimSuffix(f, "M")
		case strings.HasSuffix(f, "k"):
			mul, f = 1_000, strings.TrimSuffix(f, "k")
		}
		n, err := strconv.Atoi(f)
		if err != nil || n <= 0 {
			return nil, fmt.Errorf("%w: --scale_objects: %q is not a positive count (e.g. 1M, 500k, 20000)", errUsage, f)
		}
		out = append(out, n*mul)
	}
	return out, nil
}

// rssBytes is this process's resident set.
func rssBytes() (int64, error) {
	st, err := readProc(os.Getpid())
	return st.rss, err
}

func runScale(ctx context.Context, e *env) (*result, error) {
	sizes, err := scaleSizes(e.scaleObjects, e.quick)
	if err != nil {
		return nil, err
	}
	capRSS := e.scaleRSSCap
	if capRSS == 0 {
		capRSS = 16 << 30
	}
	probes := 200_000
	if e.quick {
		probes = 10_000
	}
	res := &result{Options: map[string]string{
		"keys":       "108 bytes, vLLM's layout (model@tp_rank:0@pcp0@dcp0@pp_rank:0@group:0@<256-bit hash hex>)",
		"object":     sizeName(scaleObjSize) + " (metadata only: the segment is bookkeeping)",
		"master":     "in-process master.Service, one segment, no monitor loop, the Go runtime's default GC (GOGC=100) as tierstore-master",
		"fill":       scaleFillNote(e.scaleFill),
		"rss_cap":    sizeName(capRSS) + " (--scale_rss_cap): filling stops there",
		"probes":     fmt.Sprint(probes),
		"gomaxprocs": fmt.Sprint(runtimeProcs()),
	}}
	t := &table{
		Title: "master at size: memory, put pairs and lookups",
		Columns: []string{"objects wanted", "objects held", "RSS GiB", "RSS B/object", "heap B/object", "objects at 8 GiB RSS",
			"fill objects/s", "put pairs/s at size", "ExistKey p50 us", "ExistKey p99 us", "GetReplicaList p50 us", "GetReplicaList p99 us",
			"RSS GiB after lookups", "RSS B/object after lookups", "heap B/object after lookups", "records", "thawed", "frozen"},
	}
	for _, n := range sizes {
		row, err := scaleOne(ctx, e, n, probes, capRSS)
		if err != nil {
			return nil, fmt.Errorf("scale %d: %w", n, err)
		}
		t.add(row...)
	}
	res.Tables = append(res.Tables, t)
	res.Notes = append(res.Notes,
		"RSS and heap per object: growth over the empty master (after a GC), divided by the objects held; key bytes included",
		"objects at 8 GiB RSS: how many objects the master held when its growth first passed 8 GiB (issue 23's budget for 50M); '-' when it never did",
		"fill objects/s: PutStart+PutEnd pairs (with --scale_fill=ssd, objects re-registered in chunks of 4096; with offload, objects put, recorded on SSD and evicted from DRAM in chunks of 4096) from 2 goroutines over the whole fill; put pairs/s at size: "+fmt.Sprint(probes)+" more pairs once the size is reached",
		"lookups: one goroutine, keys drawn at random among those held, each call timed (each grants a read lease, written into a compact record in place)",
		"after lookups: RSS (after a GC that gives free memory back to the OS) and heap over the empty master once the timed lookups are done"+lookupAllNote(e.scaleLookupAll)+", per object held (the put pairs at size included)",
		"records, thawed, frozen: the master's compact records at the end, and how many records became *objects (thawed) and *objects records (frozen) over the run")
	return res, nil
}

// scaleOne fills a fresh master with n objects (or up to capRSS) and
// measures it; the row's cells follow runScale's columns.
func scaleOne(ctx context.Context, e *env, n, probes int, capRSS int64) ([]any, error) {
	// The previous size's master is gone: hand its memory back to the OS,
	// or the new master would reuse it without growing RSS.
	debug.FreeOSMemory()
	base, err := rssBytes()
	if err != nil {
		return nil, err
	}
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	baseHeap := ms.HeapAlloc

	svc, err := newScaleMaster(ctx, n+probes, e.scaleFill)
	if err != nil {
		return nil, err
	}
	defer svc.Close()
	nHeld, atBudget, fill, err := scaleFill(ctx, e, svc, n, base, int64(baseHeap), capRSS)
	if err != nil {
		return nil, err
	}
	runtime.GC()
	rss, err := rssBytes()
	if err != nil {
		return nil, err
	}
	runtime.ReadMemStats(&ms)
	heap := int64(ms.HeapAlloc) - int64(baseHeap)
	rssPer := float64(rss-base) / float64(nHeld)
	heapPer := float64(heap) / float64(nHeld)

	atSize, err := scalePutRate(ctx, svc, n, probes)
	if err != nil {
		return nil, err
	}

	lookupRange := nHeld
	if lookupRange < 1 {
		return nil, fmt.Errorf("bench: scale: no object held")
	}
	exist, err := scaleProbe(probes, lookupRange, func(k string) error {
		ok, err := svc.ExistKey(ctx, k)
		if err == nil && !ok {
			err = fmt.Errorf("%w: ExistKey(%s) = false", errVerify, k)
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	replicas, err := scaleProbe(probes, lookupRange, func(k string) error {
		info, err := svc.GetReplicaList(ctx, k)
		if err == nil && len(info.Replicas) == 0 {
			err = fmt.Errorf("%w: no replica for %s", errVerify, k)
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	if e.scaleLookupAll {
		if err := scaleLookupAll(ctx, svc, nHeld); err != nil {
			return nil, err
		}
	}
	// The lookups' garbage (their keys) grew the heap to the collector's
	// goal: given back first, so that what stays is what the master
	// holds.
	debug.FreeOSMemory()
	rssAfter, err := rssBytes()
	if err != nil {
		return nil, err
	}
	runtime.ReadMemStats(&ms)
	heapAfterPer := float64(int64(ms.HeapAlloc)-int64(baseHeap)) / float64(nHeld+probes)
	records, thawed, frozen := svc.CompactCounts()
	var budgetCell any = "-"
	if atBudget >= 0 {
		budgetCell = atBudget
	}
	us := func(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }
	var rssCell, rssPerCell any = float64(rss-base) / (1 << 30), rssPer
	if rss <= base {
		// Not measurable: the process gave back more than the fill took
		// (a small fill in a process that held more before).
		rssCell, rssPerCell = "-", "-"
	}
	var rssAfterCell, rssAfterPerCell any = float64(rssAfter-base) / (1 << 30), float64(rssAfter-base) / float64(nHeld+probes)
	if rssAfter <= base {
		rssAfterCell, rssAfterPerCell = "-", "-"
	}
	return []any{n, nHeld, rssCell, rssPerCell, heapPer, budgetCell,
		float64(nHeld) / fill.Seconds(), atSize,
		us(exist.pct(50)), us(exist.pct(99)), us(replicas.pct(50)), us(replicas.pct(99)),
		rssAfterCell, rssAfterPerCell, heapAfterPer, records, thawed, frozen}, nil
}

// scaleFillNote says what --scale_fill filled the master with.
func scaleFillNote(fill string) string {
	switch fill {
	case "ssd":
		return "ssd: SSD-only objects re-registered by the node in chunks of 4096 (the master's compact records)"
	case "offload":
		return "offload: PutStart+PutEnd pairs in chunks of 4096 (one chunk at a time), each chunk then recorded on the node's SSD (as offloads would) and dropped from DRAM by an eviction round (eviction_ratio 1): SSD-only objects put through DRAM"
	}
	return "dram: PutStart+PutEnd pairs (DRAM objects)"
}

// lookupAllNote says what --scale_lookup_all adds to the RSS after
// lookups.
func lookupAllNote(all bool) string {
	if all {
		return " and ExistKey of every object held (--scale_lookup_all, 2 goroutines)"
	}
	return ""
}

// scaleLookupAll calls ExistKey once for each of objects 0..n-1, from 2
// goroutines.
func scaleLookupAll(ctx context.Context, svc *master.Service, n int) error {
	var next atomic.Int64
	var err error
	var mu sync.Mutex // protects err
	var wg sync.WaitGroup
	const step = 1024
	for range 2 {
		wg.Go(func() {
			for {
				lo := int(next.Add(step) - step)
				if lo >= n {
					return
				}
				for i := lo; i < min(lo+step, n); i++ {
					ok, lerr := svc.ExistKey(ctx, scaleKey(i))
					if lerr == nil && !ok {
						lerr = fmt.Errorf("%w: ExistKey(%s) = false", errVerify, scaleKey(i))
					}
					if lerr != nil {
						mu.Lock()
						if err == nil {
							err = lerr
						}
						mu.Unlock()
						return
					}
				}
			}
		})
	}
	wg.Wait()
	return err
}

// newScaleMaster starts an in-process master (no monitor loop) with one
// segment of room for total objects; with the offload fill an eviction
// round drops every DRAM replica it may.
func newScaleMaster(ctx context.Context, total int, fill string) (*master.Service, error) {
	cfg := master.DefaultConfig()
	cfg.MonitorInterval = 0
	if fill == "offload" {
		cfg.EvictionRatio = 1
	}
	cfg.Logger = slog.New(slog.DiscardHandler)
	cfg.DefaultKVLeaseTTL = time.Minute
	svc, err := master.New(cfg)
	if err != nil {
		return nil, err
	}
	if err := svc.MountSegment(ctx, masterapi.MountRequest{Node: "bench-scale", Endpoint: "127.0.0.1:1",
		Segment: "scale", Size: int64(2*total) * scaleObjSize}); err != nil {
		svc.Close()
		return nil, err
	}
	return svc, nil
}

// scalePut puts object i: a PutStart and PutEnd pair.
func scalePut(ctx context.Context, svc *master.Service, i int) error {
	k := scaleKey(i)
	rep, err := svc.PutStart(ctx, masterapi.PutStartRequest{Key: k, Size: scaleObjSize, CRC: uint32(i), PreferredNode: "bench-scale"})
	if err != nil {
		return err
	}
	return svc.PutEnd(ctx, k, rep.PutToken)
}

// scaleChunk is the objects of one re-registration chunk with
// --scale_fill=ssd (a node sends 4096).
const scaleChunk = 4096

// scaleReRegister records objects i..i+m-1 as SSD objects of the node, as
// one re-registration chunk (the master's compact records); expected is
// the whole fill's count (the node's hint).
func scaleReRegister(ctx context.Context, svc *master.Service, cols *masterapi.SSDColumns, i, m, expected int) error {
	cols.Reset()
	cols.Expected = int64(expected)
	for j := i; j < i+m; j++ {
		cols.Append([]byte(scaleKey(j)), scaleObjSize, uint32(j))
	}
	errs, err := svc.ReRegisterSSDColumns(ctx, "bench-scale", *cols)
	if err != nil {
		return err
	}
	for j, e := range errs {
		if e != nil {
			return fmt.Errorf("re-register %s: %w", scaleKey(i+j), e)
		}
	}
	return nil
}

// scaleOffloadMu makes scaleOffload's chunks one at a time: an eviction
// round would drop the DRAM-only objects of a chunk not yet recorded on
// SSD.
var scaleOffloadMu sync.Mutex

// scaleOffload puts objects i..i+m-1 (PutStart+PutEnd pairs), records
// them on the node's SSD as one re-registration chunk (each key's SSD
// replica beside its DRAM one, as its offload would) and runs an eviction
// round, which drops their DRAM replicas.
func scaleOffload(ctx context.Context, svc *master.Service, cols *masterapi.SSDColumns, i, m, expected int) error {
	scaleOffloadMu.Lock()
	defer scaleOffloadMu.Unlock()
	for j := i; j < i+m; j++ {
		if err := scalePut(ctx, svc, j); err != nil {
			return err
		}
	}
	if err := scaleReRegister(ctx, svc, cols, i, m, expected); err != nil {
		return err
	}
	svc.EvictNow()
	return nil
}

// scaleFill fills the master with objects 0..n-1 from 2 goroutines taking
// indexes in order: PutStart+PutEnd pairs (DRAM objects), or with
// --scale_fill=ssd re-registration chunks of scaleChunk (SSD-only
// objects); each time the count passes a multiple of 64k one of them
// checks RSS (over base), or the heap's growth if larger, against capRSS,
// stopping the fill, and against the 8 GiB budget. It returns how many
// objects are held (exactly 0..held-1: a goroutine checks the stop before
// it takes an index or a chunk and puts every index it takes below n), how many were
// held when RSS first passed the budget (-1: never), and the fill's time.
func scaleFill(ctx context.Context, e *env, svc *master.Service, n int, base, baseHeap, capRSS int64) (held int, atBudget int64, took time.Duration, err error) {
	var next, nHeld, budget atomic.Int64
	budget.Store(-1)
	var stop atomic.Bool
	var mu sync.Mutex // protects err
	bar := e.progress(fmt.Sprintf("scale fill %d", n), int64(n))
	t0 := time.Now()
	var wg sync.WaitGroup
	ssd, offload := e.scaleFill == "ssd", e.scaleFill == "offload"
	step := int64(1)
	if ssd || offload {
		step = scaleChunk
	}
	for range 2 {
		wg.Go(func() {
			var cols masterapi.SSDColumns
			for !stop.Load() {
				i := int(next.Add(step) - step)
				if i >= n {
					return
				}
				m := min(int(step), n-i)
				var perr error
				switch {
				case ssd:
					perr = scaleReRegister(ctx, svc, &cols, i, m, n)
				case offload:
					perr = scaleOffload(ctx, svc, &cols, i, m, n)
				default:
					perr = scalePut(ctx, svc, i)
				}
				if perr != nil {
					mu.Lock()
					if err == nil {
						err = perr
					}
					mu.Unlock()
					stop.Store(true)
					return
				}
				h := nHeld.Add(int64(m))
				bar.Add(m)
				if h%(64<<10) < int64(m) {
					rss, rerr := rssBytes()
					if rerr == nil && rss-base >= scaleBudget && budget.Load() < 0 {
						budget.Store(h)
					}
					// The cap also counts the heap's growth: a process
					// that filled a master before (tests) may reuse
					// memory without growing its RSS.
					var ms runtime.MemStats
					runtime.ReadMemStats(&ms)
					if rerr == nil && max(rss-base, int64(ms.HeapAlloc)-baseHeap) >= capRSS {
						stop.Store(true)
					}
				}
			}
		})
	}
	wg.Wait()
	took = time.Since(t0)
	bar.Finish()
	return int(nHeld.Load()), budget.Load(), took, err
}

// scalePutRate puts probes more objects (n..n+probes-1) into the filled
// master from 2 goroutines and returns the pairs per second.
func scalePutRate(ctx context.Context, svc *master.Service, n, probes int) (float64, error) {
	t1 := time.Now()
	var err error
	var mu sync.Mutex // protects err
	var wg sync.WaitGroup
	var next atomic.Int64
	for range 2 {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= probes {
					return
				}
				if perr := scalePut(ctx, svc, n+i); perr != nil {
					mu.Lock()
					if err == nil {
						err = perr
					}
					mu.Unlock()
					return
				}
			}
		})
	}
	wg.Wait()
	return float64(probes) / time.Since(t1).Seconds(), err
}

// scaleProbe times probes calls of f on keys drawn among objects 0..n-1
// (a fixed stride walk, so that every run draws the same keys). The key is
// made before the clock starts.
func scaleProbe(probes, n int, f func(key string) error) (latencies, error) {
	lat := make(latencies, 0, probes)
	stride := 2654435761 % n
	if stride == 0 {
		stride = 1
	}
	i := 0
	for range probes {
		i = (i + stride) % n
		k := scaleKey(i)
		t0 := time.Now()
		if err := f(k); err != nil {
			return nil, err
		}
		lat = append(lat, time.Since(t0))
	}
	return lat, nil
}
