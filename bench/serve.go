package main

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

func init() {
	register(scenario{
		name: "serve",
		help: "tierstore (master + node processes) vs memcached+extstore and Redis on vLLM, SGLang, LMCache and multi-turn workloads, same DRAM and SSD budgets",
		run:  runServe,
	})
}

// serveWorkload is one inference-shaped workload.
type serveWorkload struct {
	name string
	run  func(ctx context.Context, r *serveRun) error
	// value is the size of the workload's values at a scale (the warm-up
	// fill's, serveRun.warm).
	value func(sc serveScale) int64
}

var serveWorkloads = []serveWorkload{
	{"vllm", serveVLLM, func(sc serveScale) int64 { return sc.block }},
	{"sglang", serveSGLang, func(sc serveScale) int64 { return sc.page }},
	{"lmcache", serveLMCache, func(sc serveScale) int64 { return sc.chunk }},
	{"multi-turn", serveMultiTurn, func(sc serveScale) int64 { return sc.block }},
}

// serveCell is what one store measured on one workload at one size.
type serveCell struct {
	workload, size, store string
	rows                  []opStat
}

func runServe(ctx context.Context, e *env) (*result, error) {
	started := time.Now()
	sc := serveFull
	if e.quick {
		sc = serveQuick
	}
	bin := filepath.Join(e.dir, "bin")
	if err := buildBinaries(ctx, bin); err != nil {
		return nil, err
	}
	res := &result{Options: map[string]string{
		"dram":      fmtBytes(sc.dram) + " per store (tierstore --memory, memcached -m, redis maxmemory allkeys-lru)",
		"ssd":       fmtBytes(4*sc.dram) + " (tierstore --ssd_capacity, memcached ext_path size; redis none)",
		"sizes":     fmt.Sprintf("working set %.1fx DRAM (fits) and %.0fx DRAM", fitsShare, overShare),
		"workers":   fmt.Sprintf("%d per store (%d for the SGLang batch get)", sc.workers, sc.sWorkers),
		"passes":    fmt.Sprintf("%d per workload and size, the stores' order rotated each pass; rows merged", sc.passes),
		"tierstore": "master --enable_offload --offload_admission_policy=tinylfu; node --bucket_eviction=worth --heartbeat_interval=100ms (uring, O_DIRECT)",
	}}
	var cells []serveCell
	skip := map[string]bool{}
	only := func(env, name string) bool {
		v := os.Getenv(env)
		return v == "" || slices.Contains(strings.Split(v, ","), name)
	}
	if os.Getenv("TIERSTORE_SERVE_NOCACHE") != "" {
		res.Options["tierstore"] += "; client replica-location cache off (TIERSTORE_SERVE_NOCACHE)"
	}
	for _, wl := range serveWorkloads {
		if !only("TIERSTORE_SERVE_WORKLOADS", wl.name) {
			continue
		}
		for _, size := range []struct {
			name  string
			share float64
		}{{"fits", fitsShare}, {"3x", overShare}} {
			if !only("TIERSTORE_SERVE_SIZES", size.name) {
				continue
			}
			got, err := servePasses(ctx, e, bin, wl, sc, size.name, int64(size.share*float64(sc.dram)), skip, res)
			if err != nil {
				return nil, err
			}
			cells = append(cells, got...)
		}
	}
	res.Tables = []*table{serveTable(cells)}
	res.Notes = append(res.Notes, serveNotes(sc)...)
	res.charts = func(dir string) ([]string, error) { return serveCharts(dir, cells) }
	res.Elapsed = time.Since(started).Seconds()
	return res, nil
}

// servePasses runs one workload at one size on every store, sc.passes
// times, the stores' order rotated from pass to pass so that a load that
// drifts during the run weighs on each store alike; a store's rows are
// its passes merged (mergeOps). A store whose binary is missing is
// skipped (one note) from then on.
func servePasses(ctx context.Context, e *env, bin string, wl serveWorkload, sc serveScale, size string, ws int64, skip map[string]bool, res *result) ([]serveCell, error) {
	runs := map[string][][]opStat{}
	for pass := range sc.passes {
		for k := range serveStores {
			kind := serveStores[(k+pass)%len(serveStores)]
			if skip[kind.name] {
				continue
			}
			rows, err := serveOne(ctx, e.dir, bin, kind, wl, sc, ws)
			if errors.Is(err, errUnavailable) {
				skip[kind.name] = true
				res.Notes = append(res.Notes, fmt.Sprintf("%s: skipped: %v", kind.name, err))
				fmt.Fprintf(e.stderr, "serve: %s skipped: %v\n", kind.name, err)
				continue
			}
			if err != nil {
				return nil, fmt.Errorf("bench: serve %s %s %s: %w", wl.name, size, kind.name, err)
			}
			runs[kind.name] = append(runs[kind.name], rows)
		}
	}
	var cells []serveCell
	for _, kind := range serveStores {
		if r, ok := runs[kind.name]; ok {
			cells = append(cells, serveCell{wl.name, size, kind.name, mergeOps(r)})
		}
	}
	return cells, nil
}

// mergeOps merges the rows of several passes of one store, row by row:
// operations, bytes, time, hits and latencies add up (GB/s is then the
// passes' bytes over their time), SSD bytes are the passes' mean.
func mergeOps(passes [][]opStat) []opStat {
	out := slices.Clone(passes[0])
	for _, p := range passes[1:] {
		for i := range out {
			if i >= len(p) || p[i].op != out[i].op {
				continue
			}
			o := &out[i]
			o.ops += p[i].ops
			o.bytes += p[i].bytes
			o.lat = append(slices.Clone(o.lat), p[i].lat...)
			o.asked += p[i].asked
			o.hits += p[i].hits
			o.failedPuts += p[i].failedPuts
			o.elapsed += p[i].elapsed
			o.ssdBytes += p[i].ssdBytes
		}
	}
	for i := range out {
		out[i].ssdBytes /= int64(len(passes))
	}
	return out
}

// serveOne starts a fresh store, runs one workload on it and stops it.
func serveOne(ctx context.Context, dir, bin string, kind serveStoreKind, wl serveWorkload, sc serveScale, ws int64) ([]opStat, error) {
	sdir, err := os.MkdirTemp(dir, "store-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(sdir)
	b := serveBudget{dram: sc.dram, ssd: 4 * sc.dram, maxValue: max(sc.chunk, sc.page, sc.block), workers: max(sc.workers, sc.sWorkers)}
	s, err := kind.start(ctx, sdir, bin, b)
	if err != nil {
		return nil, err
	}
	defer s.close()
	r := &serveRun{s: s, sc: sc, ws: ws, srcs: map[int64]*valueSource{}, bufs: map[int64][][][]byte{}}
	if err := r.warm(ctx, wl.value(sc)); err != nil {
		return nil, fmt.Errorf("bench: serve: warm-up of %s: %w", kind.name, err)
	}
	err = wl.run(ctx, r)
	return r.rows, err
}

// serveTable is one row per store, workload, size and operation, with
// tierstore's ratios to each peer on its own rows and the goal it is
// judged by.
func serveTable(cells []serveCell) *table {
	t := &table{Title: "inference workloads over loopback, same DRAM (and SSD) budget; tierstore's ratios to each peer from the same run",
		Columns: []string{"workload", "working set", "store", "op", "GB/s", "p50 ms", "p99 ms", "hit ratio", "SSD MiB written", "put failures", "x memcached", "x redis", "goal", "met"}}
	find := func(wl, size, store, op string) *opStat {
		for i := range cells {
			c := &cells[i]
			if c.workload != wl || c.size != size || c.store != store {
				continue
			}
			for j := range c.rows {
				if c.rows[j].op == op {
					return &c.rows[j]
				}
			}
		}
		return nil
	}
	for _, c := range cells {
		for i := range c.rows {
			o := &c.rows[i]
			var xm, xr any
			goal, met := "", any(nil)
			if c.store == "tierstore" {
				mc, rd := find(c.workload, c.size, "memcached+extstore", o.op), find(c.workload, c.size, "redis", o.op)
				xm, xr = peerRatio(o, mc), peerRatio(o, rd)
				goal, met = serveGoal(c.size, o, mc, rd)
			}
			t.add(c.workload, c.size, c.store, o.op, o.gbps(), ms(o.lat.pct(50)), ms(o.lat.pct(99)), o.hitRatio(),
				float64(o.ssdBytes)/(1<<20), o.failedPuts, xm, xr, goal, met)
		}
	}
	return t
}

func peerRatio(o, p *opStat) any {
	if p == nil {
		return nil
	}
	return ratio(o.gbps(), p.gbps())
}

// serveGoal judges a tierstore row (issue: side by side with the stores
// users would pick instead). Fits: GB/s >= each peer's, for every
// operation. 3x DRAM, reads: hit ratio >= 2x the peer's (>= 0.9 where
// the peer's is above 0.45) and GB/s of hits >= the peer's.
func serveGoal(size string, o *opStat, peers ...*opStat) (string, any) {
	var ps []*opStat
	for _, p := range peers {
		if p != nil {
			ps = append(ps, p)
		}
	}
	if len(ps) == 0 {
		return "", nil
	}
	ok := true
	if size == "fits" {
		for _, p := range ps {
			ok = ok && o.gbps() >= p.gbps()
		}
		return "GB/s >= each peer", yesNo(ok)
	}
	if o.asked == 0 {
		return "", nil
	}
	h, _ := o.hitRatio().(float64)
	for _, p := range ps {
		ph, _ := p.hitRatio().(float64)
		want := 2 * ph
		if ph > 0.45 {
			want = math.Min(want, 0.9)
		}
		ok = ok && h >= want && o.gbps() >= p.gbps()
	}
	return "hits >= 2x peer's (0.9 if peer > 0.45), GB/s >= peer's", yesNo(ok)
}

func serveNotes(sc serveScale) []string {
	return []string{
		fmt.Sprintf("vllm: %s blocks, the first quarter put one by one, the rest in batches of %d; batch get of %d consecutive blocks and single gets at random. tierstore gathers each block from %d layer buffers and scatters it back into them (PutParts, BatchPutParts, GetIntoParts, BatchGetIntoParts), as the connector's batch_put_from_multi_buffers and batch_get_into_multi_buffers; the peers move it as one value", sizeName(sc.block), sc.vBatch, sc.vBatch, serveLayers),
		fmt.Sprintf("sglang: pages of a K and a V object of %s each; ingest = requests of %d new pages after a prefix: batch_exists of the %d pages' objects, then a batch put of the missing ones; batch get of %d consecutive pages (%d objects), 3 per worker", sizeName(sc.page), max(1, sc.sBatch/4), sc.sBatch, sc.sBatch, 2*sc.sBatch),
		fmt.Sprintf("lmcache: %s chunks, put and read one by one", sizeName(sc.chunk)),
		fmt.Sprintf("multi-turn: prefixes of %d blocks of %s put once, then requests re-reading a prefix drawn by Zipf(%.1f) (batch get, misses put back), one in %.0f a one-off request of %d new blocks (read, put, never read again; 0.4x DRAM in all); fits = prefixes of 0.4x DRAM; hit ratio of prefix re-reads only", sc.prefix, sizeName(sc.block), zipfS, 1/oneOffShare, sc.oneOff),
		"GB/s: bytes put, or bytes of hits read, per second of the row's wall time over all workers; p50/p99 per operation (a batch is one); hit ratio: items found / items asked; SSD MiB written: the store's own count at the end of the row (tierstore node tier bytes written, memcached extstore_bytes_written), cumulative over the rows of one store start, counted from the end of its warm-up",
		"clients: tierstore's Go client (one per worker, GetInto/BatchGetInto into reused buffers); memcached: github.com/bradfitz/gomemcache (Set per item: it has no multi-set; GetMulti), batch_exists as pipelined meta mg without flags; redis: github.com/redis/go-redis/v9 (pipelined SET/GET/EXISTS, in parts of at most 64 MiB). Peer values are copied into the same reused buffers. Every 1 in N reads is compared with the bytes put",
		"every store is started fresh per workload and size, on 127.0.0.1, one after the other, then warmed up untimed: 3/4 of its DRAM budget put in values of the workload's size under keys of their own, then emptied (tierstore RemoveAll, memcached flush_all, Redis FLUSHALL), so that the timed puts write into memory the store has touched once, as a serving cache does; the page cache of each store's SSD files is dropped before every read phase (memcached's extstore file is buffered I/O: its reads may still be served from the page cache; tierstore reads with O_DIRECT)",
	}
}

// serveCharts: GB/s per operation and store, one chart per working-set
// size, and the hit ratios of the 3x reads.
func serveCharts(dir string, cells []serveCell) ([]string, error) {
	stores := []string{}
	for _, c := range cells {
		if !contains(stores, c.store) {
			stores = append(stores, c.store)
		}
	}
	var files []string
	for _, size := range []string{"fits", "3x"} {
		var groups []string
		vals := map[string]map[string]float64{}
		hits := map[string]map[string]float64{}
		for _, c := range cells {
			if c.size != size {
				continue
			}
			for _, o := range c.rows {
				g := c.workload + "\n" + shortOp(o.op)
				if !contains(groups, g) {
					groups = append(groups, g)
					vals[g], hits[g] = map[string]float64{}, map[string]float64{}
				}
				vals[g][c.store] = o.gbps()
				if h, ok := o.hitRatio().(float64); ok {
					hits[g][c.store] = h
				}
			}
		}
		if len(groups) == 0 {
			continue
		}
		mk := func(groups []string, m map[string]map[string]float64) []series {
			var ss []series
			for _, s := range stores {
				v := make([]float64, len(groups))
				for i, g := range groups {
					x, ok := m[g][s]
					if !ok {
						x = math.NaN()
					}
					v[i] = x
				}
				ss = append(ss, series{name: s, values: v})
			}
			return ss
		}
		p := filepath.Join(dir, "serve-"+size+"-gbps.png")
		if err := groupedBars(p, "working set "+size+" DRAM: GB/s per operation", "GB/s", groups, mk(groups, vals), nil); err != nil {
			return files, err
		}
		files = append(files, p)
		var reads []string // the groups that read (puts have no hit ratio)
		for _, g := range groups {
			if len(hits[g]) > 0 {
				reads = append(reads, g)
			}
		}
		if size == "3x" && len(reads) > 0 {
			p := filepath.Join(dir, "serve-3x-hits.png")
			if err := groupedBars(p, "working set 3x DRAM: hit ratio", "hit ratio", reads, mk(reads, hits), nil); err != nil {
				return files, err
			}
			files = append(files, p)
		}
	}
	return files, nil
}

// shortOp is an operation's chart label.
func shortOp(op string) string {
	switch {
	case strings.HasPrefix(op, "exists+"):
		return "ingest"
	case strings.HasPrefix(op, "request"):
		return "request"
	}
	op, _, _ = strings.Cut(op, " pages")
	return strings.ReplaceAll(op, "batch ", "b.")
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}
