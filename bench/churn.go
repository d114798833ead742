package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/tierstore/tierstore/admission"
	"github.com/tierstore/tierstore/bench/internal/belady"
	"github.com/tierstore/tierstore/bench/internal/trace"
	"github.com/tierstore/tierstore/bucket"
	"github.com/tierstore/tierstore/embedded"
	"github.com/tierstore/tierstore/internal/errcode"
	"github.com/tierstore/tierstore/master"

	"github.com/tierstore/tierstore/node"
)

func init() {
	register(scenario{
		name: "churn",
		help: "hit ratio and SSD writes per admission+eviction policy on scan, loop, conversation, mixed, zipf-burst, tenant, shifting, prefix and chat-rag traces, vs Belady's MIN, the two-tier bound and a one-tier W-TinyLFU",
		run:  runChurn,
	})
}

// churnPolicy is one admission (master flags) + eviction (node bucket
// policy) combination.
type churnPolicy struct {
	name      string
	onEvict   bool
	threshold int64
	eviction  string
	// admission is offload_admission_policy ("": Mooncake's flags decide).
	admission string
	// promote is dram_promotion_min_freq (0: no promotion).
	promote int64
	// budget is ssd_write_budget in MB/s (0: none).
	budget float64
	// reinsert: the node re-inserts the hot objects of SSD eviction
	// victims (reinsertRule with its defaults).
	reinsert bool
}

var churnPolicies = []churnPolicy{
	{name: "eager+lru", eviction: "lru"},
	{name: "eager+fifo", eviction: "fifo"},
	{name: "on-evict+lru", onEvict: true, eviction: "lru"},
	{name: "read>=2+lru", threshold: 2, eviction: "lru"},
	{name: "eager+lru2", eviction: "lru2"},
	{name: "read>=2+lru2", threshold: 2, eviction: "lru2"},
	{name: "tinylfu+lru", admission: admission.PolicyTinyLFU, eviction: "lru"},
	{name: "tinylfu+worth", admission: admission.PolicyTinyLFU, eviction: "worth"},
	{name: "tinylfu+worth+promote", admission: admission.PolicyTinyLFU, eviction: "worth", promote: churnPromoteFreq},
	{name: "tinylfu+worth+budget", admission: admission.PolicyTinyLFU, eviction: "worth", budget: churnBudget},
	{name: "tinylfu+worth+reinsert", admission: admission.PolicyTinyLFU, eviction: "worth", reinsert: true},
}

// churnBudget is the ssd_write_budget (MB/s) of the budgeted policy: about
// half of what tinylfu writes per second of replay on the development
// machine, so that it binds.
const churnBudget = 10

// churnPromoteFreq is the dram_promotion_min_freq of the promoting policy.
const churnPromoteFreq = 8

// churnBaseline and churnCandidate are the policies the goals compare.
const (
	churnBaseline  = "eager+lru"
	churnCandidate = "tinylfu+worth"
)

type churnSizes struct {
	dram, ssd, block int64
	convRequests     int
	scanPasses       int
	sessions         int
	loopPasses       int
	zipfKeys         int
	burstEvery       int
	burstLen         int
	// The shapes of churn_shapes.go (zipf0.9-bursts, tenants, shifting,
	// prefixes, chat-rag): requests per trace and the key set of one Zipf
	// tenant.
	shapeRequests int
	shapeKeys     int
}

type churnFigures struct {
	trace, policy                      string
	requests                           int64
	dramHits, ssdHits, misses          int64
	getErrors, putFailures, putRetries int64
	ssdWritten, ssdRead                int64
	reinserted                         int64 // SSD bytes written by reinsertion
	bucketEvictions, evictedKeys       int64
	dramEvictions                      int64
	offloaded                          int64
	objectsLoaded, promotions          int64
	admitted, rejected                 int64
	elapsed                            time.Duration
}

func (f churnFigures) ssdHitRatio() float64 { return float64(f.ssdHits) / float64(f.requests) }
func (f churnFigures) hitRatio() float64 {
	return float64(f.dramHits+f.ssdHits) / float64(f.requests)
}
func (f churnFigures) dramHitRatio() float64 { return float64(f.dramHits) / float64(f.requests) }

// writeAmp is SSD bytes written per byte written by offload (reinsertion
// and leased objects kept at eviction add the rest).
func (f churnFigures) writeAmp() float64 {
	if f.ssdWritten <= f.reinserted {
		return math.NaN()
	}
	return float64(f.ssdWritten) / float64(f.ssdWritten-f.reinserted)
}

// ssdReadsPerRequest counts every object the tier loaded (hits, and the
// node's own checks) per request.
func (f churnFigures) ssdReadsPerRequest() float64 {
	return float64(f.objectsLoaded) / float64(f.requests)
}

// writtenPerRead is SSD bytes written per byte read (NaN: nothing read).
func (f churnFigures) writtenPerRead() float64 {
	if f.ssdRead == 0 {
		return math.NaN()
	}
	return float64(f.ssdWritten) / float64(f.ssdRead)
}

func runChurn(ctx context.Context, e *env) (*result, error) {
	start := time.Now()
	sz := churnSizes{dram: 16 << 20, ssd: 64 << 20, block: 64 << 10, convRequests: 12000, scanPasses: 4, sessions: 200,
		loopPasses: 5, zipfKeys: 4096, burstEvery: 1000, burstLen: 384, shapeRequests: 16000, shapeKeys: 4096}
	if e.quick {
		sz = churnSizes{dram: 1 << 20, ssd: 4 << 20, block: 64 << 10, convRequests: 400, scanPasses: 2, sessions: 16,
			loopPasses: 3, zipfKeys: 256, burstEvery: 100, burstLen: 24, shapeRequests: 400, shapeKeys: 256}
	}
	traces, err := churnTraces(e, sz)
	if err != nil {
		return nil, err
	}
	convSeed, zipfSeed := churnSeeds(e)
	res := &result{Options: map[string]string{
		"dram":          fmtBytes(sz.dram),
		"ssd_capacity":  fmtBytes(sz.ssd),
		"block":         sizeName(sz.block),
		"scan":          fmt.Sprintf("working set %s x %d passes", fmtBytes(2*sz.ssd), sz.scanPasses),
		"loop":          fmt.Sprintf("working set %s (1.25 x DRAM+SSD) x %d passes", fmtBytes(loopSet(sz)), sz.loopPasses),
		"conversations": fmt.Sprintf("%d requests, %d sessions, zipf 1.2, seed %d", sz.convRequests, sz.sessions, convSeed),
		"mixed":         "conversations + 50% one-hit-wonder requests",
		"zipf-bursts":   fmt.Sprintf("%d requests, %d keys zipf 1.1, a burst of %d one-off keys every %d, seed %d", sz.convRequests, sz.zipfKeys, sz.burstLen, sz.burstEvery, zipfSeed),
		"mode":          "master+node+client in one process, pwrite backend, SSD report every heartbeat",
	}}
	for name, desc := range churnShapeOptions(e, sz) {
		res.Options[name] = desc
	}
	tt, bounds, err := churnBounds(traces, sz)
	if err != nil {
		return nil, err
	}
	figs, err := churnReplays(ctx, e, traces, sz, res)
	if err != nil {
		return nil, err
	}
	res.Tables = append(res.Tables, tt, churnTable(figs, bounds), churnGoals(figs, bounds))
	res.Notes = append(res.Notes,
		"a request is a Get; a miss is followed by a Put of the block (prefix-cache replay); SSD W/R '-' means nothing was read from SSD",
		"dram hit: requests served from DRAM; SSD reads/req: objects the tier loaded per request",
		"put retries: Puts refused with NO_AVAILABLE_HANDLE (DRAM full of objects pinned by offload tasks), retried once after the offload queue drained; put fails: still refused",
		fmt.Sprintf("the replayer runs the node's heartbeat (SSD report, sketch, offload until the queue is empty) after every request and moves the master's clock %v a request: admission decisions, not offload lag or the scheduler, decide the figures, and one seed gives one answer (but for tinylfu+worth+budget, whose budget is in MB per second of wall time)", churnTick),
		"Belady's MIN is exact for single-size traces; for variable sizes it is the furthest-next-use heuristic (see bench/internal/belady)",
		"MIN(DRAM+SSD) treats DRAM and SSD as one cache of their summed size; the tier keeps 10% of its capacity free (high watermark 0.9), so the reachable bound is lower (docs/bench/bench.md)")
	res.Elapsed = time.Since(start).Seconds()
	res.charts = func(dir string) ([]string, error) { return churnCharts(dir, traces, figs, bounds) }
	return res, nil
}

// loopSet is the loop trace's working set: 1.25 x DRAM+SSD, whole blocks.
func loopSet(sz churnSizes) int64 { return (sz.dram + sz.ssd) * 5 / 4 / sz.block * sz.block }

// churnTraces builds the generated traces and the --trace file's, keeping
// those TIERSTORE_CHURN_TRACES names (comma-separated; all when unset).
func churnTraces(e *env, sz churnSizes) ([]*trace.Trace, error) {
	var traces []*trace.Trace
	add := func(t *trace.Trace, err error) error {
		if err == nil {
			traces = append(traces, t)
		}
		return err
	}
	convSeed, zipfSeed := churnSeeds(e)
	conv := trace.ConvConfig{Seed: convSeed, Requests: sz.convRequests, BlockSize: sz.block, Sessions: sz.sessions}
	for _, err := range []error{
		add(trace.Scan(trace.ScanConfig{WorkingSet: 2 * sz.ssd, ObjectSize: sz.block, Passes: sz.scanPasses})),
		add(trace.Loop(trace.ScanConfig{WorkingSet: loopSet(sz), ObjectSize: sz.block, Passes: sz.loopPasses})),
		add(trace.Conversations(conv)),
		add(trace.Mixed(conv)),
		add(trace.ZipfBursts(trace.ZipfBurstConfig{Seed: zipfSeed, Requests: sz.convRequests, Keys: sz.zipfKeys,
			BlockSize: sz.block, BurstEvery: sz.burstEvery, BurstLen: sz.burstLen})),
	} {
		if err != nil {
			return nil, err
		}
	}
	shapes, err := churnShapes(e, sz)
	if err != nil {
		return nil, err
	}
	traces = append(traces, shapes...)
	if e.traceFile != "" {
		tf, err := trace.ReadFile(e.traceFile)
		if err != nil {
			return nil, fmt.Errorf("%w: --trace: %v", errUsage, err)
		}
		traces = append(traces, tf)
	}
	keep := envSet("TIERSTORE_CHURN_TRACES")
	if keep == nil {
		return traces, nil
	}
	out := traces[:0]
	for _, t := range traces {
		if keep[t.Name] || strings.HasPrefix(t.Name, "file:") {
			out = append(out, t)
		}
	}
	return out, nil
}

// churnSeeds are the seeds of the conversations (and mixed) and the
// zipf-bursts traces: 42 and 7, or --seed and --seed+1.
func churnSeeds(e *env) (conv, zipf uint64) {
	if e.seed != 0 {
		return uint64(e.seed), uint64(e.seed) + 1
	}
	return 42, 7
}

// envFloat reads a number from the environment (0: unset or invalid).
func envFloat(name string) float64 {
	v, err := strconv.ParseFloat(os.Getenv(name), 64)
	if err != nil {
		return 0
	}
	return v
}

// churnBucketLimit is the replays' --bucket_size_limit: an eighth of the
// SSD (node.DerivedBucketSizeLimit's rule for a small SSD), or the SSD
// over TIERSTORE_CHURN_BUCKETS (a development knob: how the bucket count
// moves the figures; a deployment's SSD holds thousands of the default
// 256 MiB buckets).
func churnBucketLimit(sz churnSizes) int64 {
	n := int64(envFloat("TIERSTORE_CHURN_BUCKETS"))
	if n < 1 {
		n = 8
	}
	return sz.ssd / n &^ (bucket.Align - 1)
}

// envSet reads a comma-separated list from the environment (nil: unset).
// The churn scenario's development filters: TIERSTORE_CHURN_TRACES and
// TIERSTORE_CHURN_POLICIES.
func envSet(name string) map[string]bool {
	v := strings.TrimSpace(os.Getenv(name))
	if v == "" {
		return nil
	}
	m := map[string]bool{}
	for _, s := range strings.Split(v, ",") {
		m[strings.TrimSpace(s)] = true
	}
	return m
}

// churnBound is a trace's bounds: Belady's MIN at the SSD's and at
// DRAM+SSD's capacity, and the two-tier bound (churn_bound.go): hit ratio
// of MIN without bypass at the blocks the two tiers hold (tiers, tierBlocks).
type churnBound struct {
	ssd, all   belady.Result
	tiers      float64
	tierBlocks int
	// wtinylfu is the hit ratio of the single-tier W-TinyLFU reference at
	// tierBlocks (churn_wtinylfu.go).
	wtinylfu float64
}

// churnBounds computes Belady's MIN per trace at the SSD and the DRAM+SSD
// capacity, and the traces table.
func churnBounds(traces []*trace.Trace, sz churnSizes) (*table, map[string]churnBound, error) {
	tt := &table{
		Title: "traces",
		Columns: []string{"trace", "requests", "unique keys", "unique MiB", "MIN ssd hit", "MIN dram+ssd hit", "MIN exact",
			"two-tier bound (blocks)", "two-tier bound hit", "W-TinyLFU 1 tier hit", "W-TinyLFU of MIN"},
	}
	bounds := map[string]churnBound{}
	for _, tr := range traces {
		st := tr.Stats()
		bs, err := belady.MIN(tr.Requests, sz.ssd)
		if err != nil {
			return nil, nil, err
		}
		ba, err := belady.MIN(tr.Requests, sz.ssd+sz.dram)
		if err != nil {
			return nil, nil, err
		}
		b := churnBound{ssd: bs, all: ba, tierBlocks: churnUsableBlocks(sz, meanKeyLen(tr.Requests))}
		b.tiers = float64(demandMIN(tr.Requests, b.tierBlocks)) / float64(max(1, len(tr.Requests)))
		b.wtinylfu = float64(wtinyLFUHits(tr.Requests, b.tierBlocks)) / float64(max(1, len(tr.Requests)))
		bounds[tr.Name] = b
		exact := "yes"
		if !bs.Exact {
			exact = "no (heuristic)"
		}
		tt.add(tr.Name, st.Requests, st.UniqueKeys, float64(st.UniqueBytes)/(1<<20), bs.HitRatio(), ba.HitRatio(), exact,
			b.tierBlocks, b.tiers, b.wtinylfu, ratio(b.wtinylfu, ba.HitRatio()))
	}
	return tt, bounds, nil
}

// churnReplays replays every trace under every policy (those
// TIERSTORE_CHURN_POLICIES names, all when unset).
func churnReplays(ctx context.Context, e *env, traces []*trace.Trace, sz churnSizes, res *result) ([]churnFigures, error) {
	var figs []churnFigures
	keep := envSet("TIERSTORE_CHURN_POLICIES")
	if keep == nil && e.quick {
		keep = churnQuickPolicies
	}
	unsupported := map[string]bool{}
	for _, tr := range traces {
		for _, p := range churnPolicies {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			if unsupported[p.name] || (keep != nil && !keep[p.name]) {
				continue
			}
			dir := filepath.Join(e.dir, fmt.Sprintf("%s-%s", sanitize(tr.Name), sanitize(p.name)))
			f, err := replay(ctx, e, tr, p, sz, dir)
			if errors.Is(err, node.ErrBadConfig) {
				// The node does not offer this policy (yet): say so, go on.
				unsupported[p.name] = true
				res.Notes = append(res.Notes, fmt.Sprintf("policy %s skipped: %v", p.name, err))
				continue
			}
			if err != nil {
				return nil, fmt.Errorf("%s %s: %w", tr.Name, p.name, err)
			}
			figs = append(figs, f)
		}
	}
	if len(figs) == 0 {
		return nil, fmt.Errorf("%w: the node refused every policy: %s", errUnavailable, strings.Join(res.Notes, "; "))
	}
	return figs, nil
}

// churnTable is the per-policy replay table.
func churnTable(figs []churnFigures, bounds map[string]churnBound) *table {
	t := &table{
		Title: "replay per policy (hit ratios are per request; 'of MIN' = hit ratio / Belady's MIN at the same capacity)",
		Columns: []string{"trace", "policy", "ssd hit", "ssd of MIN", "overall hit", "overall of MIN", "overall of two-tier bound", "dram hit",
			"SSD reads/req", "promotions", "SSD W/R bytes", "SSD MiB written", "reinserted MiB", "write amp", "admitted", "rejected", "bucket evictions", "keys evicted",
			"DRAM evictions", "put retries", "put fails"},
	}
	for _, f := range figs {
		b := bounds[f.trace]
		t.add(f.trace, f.policy, f.ssdHitRatio(), ratio(f.ssdHitRatio(), b.ssd.HitRatio()),
			f.hitRatio(), ratio(f.hitRatio(), b.all.HitRatio()), ratio(f.hitRatio(), b.tiers), f.dramHitRatio(), f.ssdReadsPerRequest(),
			f.promotions, f.writtenPerRead(), float64(f.ssdWritten)/(1<<20), float64(f.reinserted)/(1<<20), f.writeAmp(), f.admitted, f.rejected,
			f.bucketEvictions, f.evictedKeys, f.dramEvictions, f.putRetries, f.putFailures)
	}
	return t
}

// churnGoals checks the admission goals per trace: the candidate's overall
// hit ratio at least 0.9 x MIN(DRAM+SSD), never more than 2 points below
// the baseline, and no more SSD bytes written than the baseline.
func churnGoals(figs []churnFigures, bounds map[string]churnBound) *table {
	t := &table{
		Title: fmt.Sprintf("goals: %s against Belady's MIN(DRAM+SSD) and %s", churnCandidate, churnBaseline),
		Columns: []string{"trace", "overall of MIN", ">= 0.9", "overall of two-tier bound", "W-TinyLFU 1 tier of MIN", "overall hit", churnBaseline + " overall", "at most 2 points below",
			"MiB written / " + churnBaseline + "'s", "<= 1", "ssd of MIN", "SSD W/R bytes"},
	}
	find := func(tr, p string) (churnFigures, bool) {
		for _, f := range figs {
			if f.trace == tr && f.policy == p {
				return f, true
			}
		}
		return churnFigures{}, false
	}
	yes := func(ok bool) string {
		if ok {
			return "yes"
		}
		return "NO"
	}
	for _, f := range figs {
		if f.policy != churnCandidate {
			continue
		}
		b := bounds[f.trace]
		base, ok := find(f.trace, churnBaseline)
		of := f.hitRatio() / b.all.HitRatio()
		ofb, wt := ratio(f.hitRatio(), b.tiers), ratio(b.wtinylfu, b.all.HitRatio())
		if !ok {
			t.add(f.trace, of, yes(of >= 0.9), ofb, wt, f.hitRatio(), nil, "-", nil, "-", ratio(f.ssdHitRatio(), b.ssd.HitRatio()), f.writtenPerRead())
			continue
		}
		w := float64(f.ssdWritten) / float64(max(base.ssdWritten, 1))
		t.add(f.trace, of, yes(of >= 0.9), ofb, wt, f.hitRatio(), base.hitRatio(), yes(f.hitRatio() >= base.hitRatio()-0.02),
			w, yes(f.ssdWritten <= base.ssdWritten),
			ratio(f.ssdHitRatio(), b.ssd.HitRatio()), f.writtenPerRead())
	}
	return t
}

// churnQuickPolicies are the policies --quick replays: one of each code
// path (eager, read-count, tinylfu with worth eviction, promotion, write
// budget), so that the smoke test runs in its time bound under -race.
var churnQuickPolicies = map[string]bool{"eager+lru": true, "read>=2+lru": true, "tinylfu+worth": true,
	"tinylfu+worth+promote": true, "tinylfu+worth+budget": true}

// churnCharted are the policies the charts show (the palette repeats
// beyond five); the tables have them all.
var churnCharted = map[string]bool{"eager+lru": true, "on-evict+lru": true, "read>=2+lru": true,
	"tinylfu+lru": true, "tinylfu+worth": true}

// churnCharts draws the SSD and overall hit ratio per policy and trace.
func churnCharts(dir string, traces []*trace.Trace, figs []churnFigures, bounds map[string]churnBound) ([]string, error) {
	var files []string
	var groups []string
	for _, tr := range traces {
		groups = append(groups, tr.Name)
	}
	for _, which := range []string{"ssd", "overall"} {
		pick := func(f churnFigures) float64 {
			if which == "overall" {
				return f.hitRatio()
			}
			return f.ssdHitRatio()
		}
		var ss []series
		for _, p := range churnPolicies {
			if !churnCharted[p.name] {
				continue
			}
			s := series{name: p.name}
			found := false
			for _, tr := range traces {
				v := math.NaN()
				for _, f := range figs {
					if f.trace == tr.Name && f.policy == p.name {
						v, found = pick(f), true
					}
				}
				s.values = append(s.values, v)
			}
			if found {
				ss = append(ss, s)
			}
		}
		ref := refLine{name: "Belady MIN"}
		for _, tr := range traces {
			b := bounds[tr.Name]
			v := b.ssd.HitRatio()
			if which == "overall" {
				v = b.all.HitRatio()
			}
			ref.values = append(ref.values, v)
		}
		path := filepath.Join(dir, "churn-"+which+"-hit.png")
		title := "churn: SSD hit ratio per policy vs Belady's MIN (SSD capacity)"
		if which == "overall" {
			title = "churn: overall hit ratio per policy vs Belady's MIN (DRAM+SSD capacity)"
		}
		if err := groupedBars(path, title, "hit ratio", groups, ss, []refLine{ref}); err != nil {
			return nil, err
		}
		files = append(files, path)
	}
	return files, nil
}

func sanitize(s string) string {
	b := []byte(s)
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-') {
			b[i] = '_'
		}
	}
	if len(b) > 40 {
		b = b[len(b)-40:]
	}
	return string(b)
}

// replay runs tr through a fresh master+node+client configured for policy
// p.
func replay(ctx context.Context, e *env, tr *trace.Trace, p churnPolicy, sz churnSizes, dir string) (churnFigures, error) {
	f := churnFigures{trace: tr.Name, policy: p.name}
	if err := mkdir(dir); err != nil {
		return f, err
	}
	var ri *churnReinsert
	if p.reinsert {
		ri = &churnReinsert{objSize: sz.block}
		// Development knob: the reinsertion's MinFreq.
		if v, err := strconv.ParseUint(os.Getenv("TIERSTORE_CHURN_REINSERT_FREQ"), 10, 32); err == nil {
			ri.rule.MinFreq = uint32(v)
		}
	}
	cfg := churnConfig(p, sz, dir)
	clock := master.NewManualClock(time.Unix(0, 0))
	cfg.Master.Clock = clock
	emb, err := startChurnStack(ctx, cfg, ri)
	if err != nil {
		return f, err
	}
	defer emb.Close()
	rp := &replayer{emb: emb, f: &f, vs: newValueSource(int(sz.block), 99), block: sz.block}
	if os.Getenv("TIERSTORE_CHURN_DEBUG") != "" {
		rp.byPrefix = map[string]*[3]int64{}
	}
	// A user trace may give one key several sizes; the stored object then
	// answers with its own size.
	for _, r := range tr.Requests {
		if r.Size != sz.block {
			rp.varSizes = true
			break
		}
	}
	bar := e.progress(fmt.Sprintf("churn %s %s", tr.Name, p.name), int64(len(tr.Requests)))
	defer bar.Finish()
	t0 := time.Now()
	for i, r := range tr.Requests {
		if i%256 == 0 && ctx.Err() != nil {
			return f, ctx.Err()
		}
		if err := rp.request(ctx, i, r); err != nil {
			return f, err
		}
		// The node's heartbeat, after every request, on the replayer's
		// goroutine (churnConfig: no ticks, no wakes).
		if err := drainOffload(ctx, emb); err != nil {
			return f, err
		}
		clock.Advance(churnTick)
		bar.Add(1)
	}
	if err := drainOffload(ctx, emb); err != nil {
		return f, err
	}
	f.elapsed = time.Since(t0)
	for _, pre := range slices.Sorted(maps.Keys(rp.byPrefix)) {
		c := rp.byPrefix[pre]
		fmt.Fprintf(os.Stderr, "%s %s prefix %s: dram %d ssd %d miss %d\n", tr.Name, f.policy, pre, c[0], c[1], c[2])
	}
	return f, collectChurnFigures(ctx, emb, &f)
}

// churnConfig is the embedded configuration of one replay.
func churnConfig(p churnPolicy, sz churnSizes, dir string) embedded.Config {
	quiet := slog.New(slog.DiscardHandler)
	cfg := embedded.DefaultConfig()
	cfg.Master.Logger = quiet
	cfg.Master.EnableOffload = true
	cfg.Master.OffloadOnEvict = p.onEvict
	cfg.Master.OffloadReadAdmissionThreshold = p.threshold
	cfg.Master.AdmissionFlags.Policy = p.admission
	cfg.Master.AdmissionFlags.PromoteMinFreq = p.promote
	cfg.Master.AdmissionFlags.WriteBudgetMBps = p.budget
	// Development knobs (tuning the tinylfu defaults).
	if v, err := strconv.ParseFloat(os.Getenv("TIERSTORE_CHURN_MARGIN"), 64); err == nil {
		cfg.Master.AdmissionFlags.Margin = v
	}
	if v, err := strconv.ParseInt(os.Getenv("TIERSTORE_CHURN_SAMPLE"), 10, 64); err == nil {
		cfg.Master.AdmissionFlags.SampleFactor = v
	}
	if v := envFloat("TIERSTORE_CHURN_EVICTION_RATIO"); v > 0 {
		cfg.Master.EvictionRatio = v
	}
	if v, err := strconv.ParseInt(os.Getenv("TIERSTORE_CHURN_COLDPUT"), 10, 64); err == nil {
		cfg.Master.AdmissionFlags.ColdPutMinFreq = v
	}
	cfg.Master.MonitorInterval = 0 // eviction happens inline at PutStart
	// Leases on the replay's clock (replay: churnTick a request): the
	// objects of the last 10 requests.
	cfg.Master.DefaultKVLeaseTTL = time.Millisecond
	// A put that finds DRAM pinned by offload tasks fails at once; the
	// replayer runs the heartbeat and retries (no one else offloads).
	cfg.Master.PutStartMaxWait = 0
	cfg.Node.Logger = quiet
	cfg.Node.Memory = sz.dram
	cfg.Node.SSDDir = dir
	cfg.Node.SSDCapacity = sz.ssd
	cfg.Node.Backend = "pwrite"
	cfg.Node.BucketEviction = p.eviction
	cfg.Node.BucketSizeLimit = churnBucketLimit(sz)
	// The replayer runs the node's heartbeat itself after every request
	// (drainOffload): no tick, no wake, so that the admission decisions,
	// the SSD reports and the sketch transfers happen at the same points
	// of the trace in every run.
	cfg.Node.HeartbeatInterval = time.Hour
	cfg.Node.OffloadWake = false
	cfg.Node.ReconcileInterval = time.Hour
	return cfg
}

// replayer replays one request at a time and counts into f.
type replayer struct {
	emb      *churnStack
	f        *churnFigures
	vs       *valueSource
	block    int64
	varSizes bool
	// byPrefix counts dram hits, ssd hits and misses per key prefix (up
	// to the first '/'), printed with TIERSTORE_CHURN_DEBUG.
	byPrefix map[string]*[3]int64
}

// countPrefix adds one outcome (0 dram hit, 1 ssd hit, 2 miss) of key.
func (rp *replayer) countPrefix(key string, outcome int) {
	if rp.byPrefix == nil {
		return
	}
	p, _, _ := strings.Cut(key, "/")
	c := rp.byPrefix[p]
	if c == nil {
		c = new([3]int64)
		rp.byPrefix[p] = c
	}
	c[outcome]++
}

// request replays request i: a Get, and on a miss a Put.
func (rp *replayer) request(ctx context.Context, i int, r trace.Request) error {
	c, f := rp.emb.c, rp.f
	f.requests++
	before := c.ReadStats()
	v, err := c.Get(ctx, r.Key)
	if err == nil {
		after := c.ReadStats()
		if int64(len(v)) != r.Size && !rp.varSizes {
			return fmt.Errorf("%w: %s: %d bytes, want %d", errVerify, r.Key, len(v), r.Size)
		}
		if after.LocalSSD+after.RemoteSSD > before.LocalSSD+before.RemoteSSD {
			rp.countPrefix(r.Key, 1)
			f.ssdHits++ // promotion, if due, is the master's and node's (node/admission.go)
			return nil
		}
		rp.countPrefix(r.Key, 0)
		f.dramHits++
		return nil
	}
	rp.countPrefix(r.Key, 2)
	f.misses++
	if !errors.Is(err, errcode.ErrObjectNotFound) {
		f.getErrors++
	}
	val := rp.vs.value(i)
	if r.Size != rp.block {
		val = make([]byte, r.Size)
	}
	err = c.Put(ctx, r.Key, val)
	if errors.Is(err, errcode.ErrNoAvailableHandle) {
		// DRAM is full of objects pinned by offload tasks (on-evict keeps
		// victims until they reach SSD): let offload catch up and retry
		// once, as a client backing off would.
		f.putRetries++
		if derr := drainOffload(ctx, rp.emb); derr != nil {
			return derr
		}
		err = c.Put(ctx, r.Key, val)
	}
	if err != nil && !errors.Is(err, errcode.ErrObjectExists) {
		f.putFailures++
	}
	return nil
}

// collectChurnFigures adds the node's, tier's and master's counters to f.
func collectChurnFigures(ctx context.Context, emb *churnStack, f *churnFigures) error {
	ns := emb.node.Stats()
	f.ssdWritten = ns.Tier.BytesWritten
	f.ssdRead = ns.Tier.BytesRead
	f.reinserted = ns.Tier.ReinsertedBytes
	f.objectsLoaded = ns.Tier.ObjectsLoaded
	f.bucketEvictions = ns.Tier.Evictions
	f.evictedKeys = ns.Tier.EvictedKeys
	f.offloaded = ns.OffloadPersisted
	ms, err := emb.m.Stats(ctx)
	if err != nil {
		return err
	}
	f.dramEvictions = ms.Evictions
	f.promotions = ms.Promotions
	f.admitted = ms.OffloadQueuedTot
	if p, ok := emb.m.Policy().(*admission.TinyLFU); ok {
		st := p.Stats()
		f.admitted, f.rejected = st.Accepted, st.Rejected
		if os.Getenv("TIERSTORE_CHURN_DEBUG") != "" {
			fmt.Fprintf(os.Stderr, "%s %s: %+v used=%d\n", f.trace, f.policy, st, ns.Tier.BytesUsed)
		}
	}
	return nil
}

// churnTick is how far the master's clock (a master.ManualClock) moves
// per request: the replay's time, the same in every run. The wall clock
// moved about 60 to 160 us per request in the replays before it.
const churnTick = 100 * time.Microsecond

// drainOffload runs the node's heartbeat (one offload round after the
// other, each carrying the SSD report, taking sketch chunks and
// promotions) until the master has no offload task queued or in flight.
// The replayer calls it after every request: the node has no heartbeat of
// its own (churnConfig), so nothing depends on the scheduler.
func drainOffload(ctx context.Context, emb *churnStack) error {
	for range 1000 {
		emb.node.OffloadNow()
		st, err := emb.m.Stats(ctx)
		if err != nil {
			return err
		}
		if st.OffloadQueued == 0 && st.OffloadInFlight == 0 {
			return nil
		}
	}
	return fmt.Errorf("offload queue did not drain in 1000 heartbeats")
}
