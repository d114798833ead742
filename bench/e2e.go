package main

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/tierstore/tierstore/client"
	"github.com/tierstore/tierstore/internal/wire"
)

func init() {
	register(scenario{
		name: "e2e",
		help: "client -> node over loopback (put, get dram, get ssd, batch get) as ratios to a raw TCP stream and tier.Load, measured in the same run",
		run:  runE2E,
	})
}

// e2e goals (docs/benchmarks.md, e2e section).
const (
	goalDRAM     = 0.5  // remote Get from DRAM and Put, 1 MiB: x raw tcp
	goalBatch    = 0.7  // batch get dram: x raw tcp
	goalBatchPut = 0.8  // batch put of 16 and of 128 objects: x raw tcp
	goalSSD      = 0.8  // remote Get from SSD: x tier.Load of the same objects
	goalEmbedded = 3000 // embedded Get from DRAM, 1 MiB: MB/s
)

const e2eObjects = 64 // objects per population (and per batch)

// e2eRow is one line of the e2e table.
type e2eRow struct {
	name    string
	size    int64
	clients int
	fig     figure
	xRaw    any // x raw tcp (nil: n/a)
	xLoad   any // x tier.Load (nil: n/a)
	xCPU    any // raw tcp's CPU per MiB / this row's (nil: n/a)
	goal    string
	met     any // "yes", "no"; nil without a goal
}

// e2eSizeRun holds what one object size needs across rows.
type e2eSizeRun struct {
	rig      *e2eRig
	size     int64
	dramKeys []string
	dramVals [][]byte
	ssdKeys  []string
	ssdVals  [][]byte
	d        time.Duration
	// src: e2eObjects separate copies of the DRAM values (what the raw
	// TCP sender sends, as the node sends them from its segment); dst:
	// e2eObjects buffers per client, for BatchGetInto and the raw TCP
	// receivers.
	src [][]byte
	dst [][][]byte
}

func runE2E(ctx context.Context, e *env) (*result, error) {
	started := time.Now()
	d := 2 * time.Second
	if e.quick {
		d = 500 * time.Millisecond
	}
	sizes := []int64{256 << 10, 1 << 20}
	clients := []int{1, 4}
	if e.sizes != nil { // tests: small objects, short rows
		sizes, d = e.sizes, 100*time.Millisecond
	}
	rig, err := newE2ERig(ctx, e.dir, clients[len(clients)-1], 1<<30)
	if err != nil {
		return nil, fmt.Errorf("bench: e2e cluster: %w", err)
	}
	defer rig.close()
	res := &result{Options: map[string]string{
		"per_row":   fmt.Sprintf("%v of timed work in %d interleaved passes; MB/s and p50 of the median pass, ratios the median of per-pass ratios", d, e2eReps),
		"objects":   fmt.Sprintf("%d per size in DRAM, %d on SSD (uring, O_DIRECT); batch = %d keys", e2eObjects, e2eObjects, e2eObjects),
		"master":    "gRPC on 127.0.0.1 (every Put asks it; a Get asks it unless the client's replica-location cache holds the key, as a real client does)",
		"node_data": fmt.Sprintf("framed TCP data plane on the node's gRPC port, %d connections per client", wire.DefaultConnsPerNode),
	}}
	t := &table{Title: "end to end over loopback, as ratios to a raw TCP stream (and tier.Load for SSD reads) of the same run",
		Columns: []string{"row", "size", "clients", "MB/s", "p50 ms", "x raw tcp", "x tier.Load", "cpu us/MiB", "cpu x raw tcp", "goal", "met"}}
	for _, size := range sizes {
		sr := &e2eSizeRun{rig: rig, size: size, d: d}
		if err := sr.populate(ctx, clients[len(clients)-1]); err != nil {
			return nil, err
		}
		for _, k := range clients {
			rows, err := sr.rows(ctx, k)
			for _, r := range rows {
				t.add(r.name, sizeName(r.size), fmt.Sprint(r.clients), r.fig.mbps, ms(r.fig.p50), r.xRaw, r.xLoad,
					float64(r.fig.cpuPerMiB)/1e3, r.xCPU, r.goal, r.met)
			}
			if err != nil {
				return nil, err
			}
		}
		if err := sr.cleanup(ctx); err != nil {
			return nil, err
		}
	}
	res.Tables = []*table{t}
	res.Notes = append(res.Notes,
		"raw tcp (the ratio base): k Go senders write the 64 objects of the row's size, from 64 separate buffers as the node's segment holds them, back to back into k loopback connections; k Go receivers read them into 64 buffers each (the batch rows' working set); measured in this process, in the same passes as the rows it divides",
		"raw tcp (1 buffer each side): the same from one buffer into one buffer, everything in cache: what the socket moves when memory is not in the way (not a ratio base)",
		"get rows use GetInto with one reusable buffer per client (the value is read from the socket straight into it); batch get dram = BatchGetInto of 64 keys into 64 buffers",
		"embedded get dram: master, node and client in one process, no socket (GetInto through client.Config.LocalNode)",
		"cpu us/MiB: user+system CPU of the whole process (client, node, master, or the raw sender and receiver) per MiB moved, median pass; cpu x raw tcp = raw tcp's over the row's. Unlike MB/s it hardly depends on what else the machine runs: on loopback both ends share the CPUs, so when they are the limit, MB/s follows it")
	res.Elapsed = time.Since(started).Seconds()
	return res, nil
}

func (sr *e2eSizeRun) populate(ctx context.Context, clients int) error {
	var err error
	defer func() {
		for _, v := range sr.dramVals {
			sr.src = append(sr.src, bytes.Clone(v))
		}
		sr.dst = make([][][]byte, clients)
		for w := range sr.dst {
			for range e2eObjects {
				sr.dst[w] = append(sr.dst[w], make([]byte, sr.size))
			}
		}
	}()
	if sr.dramKeys, sr.dramVals, err = sr.rig.populate(ctx, "dram/", e2eObjects, sr.size, false); err != nil {
		return fmt.Errorf("bench: e2e DRAM objects: %w", err)
	}
	if sr.ssdKeys, sr.ssdVals, err = sr.rig.populate(ctx, ssdPrefix, e2eObjects, sr.size, true); err != nil {
		return fmt.Errorf("bench: e2e SSD objects: %w", err)
	}
	return nil
}

func (sr *e2eSizeRun) cleanup(ctx context.Context) error {
	for _, k := range append(sr.dramKeys, sr.ssdKeys...) {
		if err := sr.rig.remote[0].Remove(ctx, k, true); err != nil {
			return err
		}
	}
	return nil
}

// e2eReps is how many times each row is measured, interleaved with the
// others (raw tcp first in each pass), for a share of the row's time: on a
// shared machine the load drifts, so a row is compared with the baseline
// of its own pass, and the median over the passes is reported.
const e2eReps = 5

// rows measures every row of one size with k clients in e2eReps passes
// over all of them. A row's MB/s and p50 are those of its median pass;
// its ratios are the medians of the per-pass ratios.
func (sr *e2eSizeRun) rows(ctx context.Context, k int) ([]e2eRow, error) {
	ms := []func(context.Context, int) (e2eRow, error){
		sr.rawTCP, sr.rawTCPHot, sr.put, sr.batchPut16, sr.batchPut128, sr.getDRAM, sr.batchGetDRAM, sr.tierLoad, sr.getSSD, sr.embeddedGet,
	}
	const rawIdx, loadIdx = 0, 7
	passes := make([][]e2eRow, len(ms))
	for range e2eReps {
		for i, m := range ms {
			r, err := m(ctx, k)
			if err != nil {
				return nil, fmt.Errorf("bench: e2e %s %s x%d: %w", r.name, sizeName(sr.size), k, err)
			}
			passes[i] = append(passes[i], r)
		}
	}
	perPass := func(i, base int) any {
		var xs []float64
		for p := range passes[i] {
			if b := passes[base][p].fig.mbps; b > 0 {
				xs = append(xs, passes[i][p].fig.mbps/b)
			}
		}
		return median(xs)
	}
	// CPU per MiB: the median pass of each, raw's over the row's (higher
	// is better, like the other ratios).
	cpuOf := func(i int) float64 {
		xs := make([]float64, len(passes[i]))
		for p, r := range passes[i] {
			xs[p] = float64(r.fig.cpuPerMiB)
		}
		m, _ := median(xs).(float64)
		return m
	}
	out := make([]e2eRow, len(ms))
	for i, p := range passes {
		byRate := slices.Clone(p)
		slices.SortFunc(byRate, func(a, b e2eRow) int { return cmp.Compare(a.fig.mbps, b.fig.mbps) })
		out[i] = byRate[len(byRate)/2]
		out[i].xRaw, out[i].xLoad, out[i].xCPU = perPass(i, rawIdx), nil, ratio(cpuOf(rawIdx), cpuOf(i))
		out[i].fig.cpuPerMiB = time.Duration(cpuOf(i))
		if i == loadIdx || out[i].name == "get ssd" {
			out[i].xLoad = perPass(i, loadIdx)
		}
		if i == loadIdx || out[i].name == "embedded get dram" {
			out[i].xRaw = nil
		}
		sr.judge(&out[i])
	}
	return out, nil
}

// median of xs, nil when empty.
func median(xs []float64) any {
	if len(xs) == 0 {
		return nil
	}
	slices.Sort(xs)
	return xs[len(xs)/2]
}

// judge sets a row's goal and whether its figures meet it.
func (sr *e2eSizeRun) judge(r *e2eRow) {
	switch {
	case r.name == "embedded get dram":
		if sr.size == 1<<20 {
			r.goal = fmt.Sprintf(">= %d MB/s", goalEmbedded)
			r.met = yesNo(r.fig.mbps >= goalEmbedded)
		}
	case r.name == "get ssd":
		verdict(r, r.xLoad, goalSSD, "tier.Load")
	case strings.HasPrefix(r.name, "batch get dram"):
		verdict(r, r.xRaw, goalBatch, "raw tcp")
	case strings.HasPrefix(r.name, "batch put"):
		verdict(r, r.xRaw, goalBatchPut, "raw tcp")
	case sr.size == 1<<20 && (r.name == "put" || r.name == "get dram"):
		verdict(r, r.xRaw, goalDRAM, "raw tcp")
	}
}

func (sr *e2eSizeRun) rawTCP(ctx context.Context, k int) (e2eRow, error) {
	fig, err := rawTCP(ctx, sr.src, sr.dst[:k], sr.d/e2eReps)
	return e2eRow{name: "raw tcp", size: sr.size, clients: k, fig: fig}, err
}

// rawTCPHot is raw tcp from one buffer into one buffer, all in cache: what
// the socket moves when memory is not in the way (not a ratio base).
func (sr *e2eSizeRun) rawTCPHot(ctx context.Context, k int) (e2eRow, error) {
	dst := make([][][]byte, k)
	for w := range dst {
		dst[w] = sr.dst[w][:1]
	}
	fig, err := rawTCP(ctx, sr.src[:1], dst, sr.d/e2eReps)
	return e2eRow{name: "raw tcp (1 buffer each side)", size: sr.size, clients: k, fig: fig}, err
}

// verdict fills goal and met for a ratio goal.
func verdict(r *e2eRow, x any, goal float64, what string) {
	r.goal = fmt.Sprintf(">= %.1fx %s", goal, what)
	if f, ok := x.(float64); ok {
		r.met = yesNo(f >= goal)
	}
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

func (sr *e2eSizeRun) put(ctx context.Context, k int) (e2eRow, error) {
	r := e2eRow{name: "put", size: sr.size, clients: k}
	perRound := min(64, max(4, int(64<<20/sr.size)/k))
	src := newValueSource(int(sr.size), 7)
	keys := make([][]string, k)
	for w := range keys {
		for i := range perRound {
			keys[w] = append(keys[w], fmt.Sprintf("put/%d/%d", w, i))
		}
	}
	op := func(w, i int) error { return sr.rig.remote[w].Put(ctx, keys[w][i], src.value(w*perRound+i)) }
	cleanup := func() error {
		for w := range keys {
			for _, key := range keys[w] {
				if err := sr.rig.remote[w].Remove(ctx, key, true); err != nil {
					return err
				}
			}
		}
		return nil
	}
	var err error
	r.fig, err = measureRounds(ctx, k, perRound, sr.d/e2eReps, sr.size, op, cleanup)
	return r, err
}

func (sr *e2eSizeRun) batchPut16(ctx context.Context, k int) (e2eRow, error) {
	return sr.batchPut(ctx, k, 16)
}

func (sr *e2eSizeRun) batchPut128(ctx context.Context, k int) (e2eRow, error) {
	return sr.batchPut(ctx, k, 128)
}

// batchPut measures k clients each storing n objects with one BatchPut
// per round (fresh keys; removed, untimed, between rounds).
func (sr *e2eSizeRun) batchPut(ctx context.Context, k, n int) (e2eRow, error) {
	r := e2eRow{name: fmt.Sprintf("batch put (%d x %s)", n, sizeName(sr.size)), size: sr.size, clients: k}
	src := newValueSource(int(sr.size), 11)
	keys := make([][]string, k)
	vals := make([][][]byte, k)
	for w := range keys {
		for i := range n {
			keys[w] = append(keys[w], fmt.Sprintf("bput/%d/%d", w, i))
			vals[w] = append(vals[w], src.value(w*n+i))
		}
	}
	op := func(w, _ int) error { return errors.Join(sr.rig.remote[w].BatchPut(ctx, keys[w], vals[w])...) }
	cleanup := func() error {
		for w := range keys {
			if err := errors.Join(sr.rig.remote[w].BatchRemove(ctx, keys[w], true)...); err != nil {
				return err
			}
		}
		return nil
	}
	var err error
	r.fig, err = measureRounds(ctx, k, 1, sr.d/e2eReps, sr.size*int64(n), op, cleanup)
	return r, err
}

// getInto measures k clients calling GetInto on keys in random order,
// each with one reusable buffer; every 16th read is compared with vals.
func (sr *e2eSizeRun) getInto(ctx context.Context, k int, clients []*client.Client, keys []string, vals [][]byte) (figure, error) {
	bufs := make([][]byte, k)
	rngs := make([]*rand.Rand, k)
	for w := range bufs {
		bufs[w] = make([]byte, sr.size)
		rngs[w] = rand.New(rand.NewPCG(uint64(w), 3))
	}
	return measure(ctx, k, sr.d/e2eReps, sr.size, func(w, i int) error {
		j := rngs[w].IntN(len(keys))
		n, err := clients[w%len(clients)].GetInto(ctx, keys[j], bufs[w])
		if err != nil || n != int(sr.size) {
			return fmt.Errorf("get %s: %d bytes, %w", keys[j], n, err)
		}
		if i%16 == 0 {
			return verifyEach(bufs[w], vals[j], keys[j])
		}
		return nil
	})
}

func (sr *e2eSizeRun) getDRAM(ctx context.Context, k int) (e2eRow, error) {
	r := e2eRow{name: "get dram", size: sr.size, clients: k}
	var err error
	r.fig, err = sr.getInto(ctx, k, sr.rig.remote, sr.dramKeys, sr.dramVals)
	return r, err
}

func (sr *e2eSizeRun) getSSD(ctx context.Context, k int) (e2eRow, error) {
	r := e2eRow{name: "get ssd", size: sr.size, clients: k}
	var err error
	r.fig, err = sr.getInto(ctx, k, sr.rig.remote, sr.ssdKeys, sr.ssdVals)
	return r, err
}

func (sr *e2eSizeRun) embeddedGet(ctx context.Context, k int) (e2eRow, error) {
	r := e2eRow{name: "embedded get dram", size: sr.size, clients: k}
	var err error
	r.fig, err = sr.getInto(ctx, k, []*client.Client{sr.rig.embeded}, sr.dramKeys, sr.dramVals)
	return r, err
}

// tierLoad: k goroutines calling tier.Load of one key of the SSD objects,
// on the node's own engine: the floor a remote SSD Get builds on.
func (sr *e2eSizeRun) tierLoad(ctx context.Context, k int) (e2eRow, error) {
	r := e2eRow{name: "tier.Load", size: sr.size, clients: k}
	rngs := make([]*rand.Rand, k)
	for w := range rngs {
		rngs[w] = rand.New(rand.NewPCG(uint64(w), 5))
	}
	var err error
	r.fig, err = measure(ctx, k, sr.d/e2eReps, sr.size, func(w, i int) error {
		j := rngs[w].IntN(len(sr.ssdKeys))
		lr := sr.rig.eng.Load(ctx, [][]byte{[]byte(sr.ssdKeys[j])})
		if lr[0].Err != nil {
			return lr[0].Err
		}
		if i%16 == 0 {
			return verifyEach(lr[0].Value, sr.ssdVals[j], sr.ssdKeys[j])
		}
		return nil
	})
	return r, err
}

func (sr *e2eSizeRun) batchGetDRAM(ctx context.Context, k int) (e2eRow, error) {
	r := e2eRow{name: fmt.Sprintf("batch get dram (%d x %s)", e2eObjects, sizeName(sr.size)), size: sr.size, clients: k}
	bufs := sr.dst
	var err error
	r.fig, err = measure(ctx, k, sr.d/e2eReps, sr.size*int64(len(sr.dramKeys)), func(w, i int) error {
		ns, errs := sr.rig.remote[w].BatchGetInto(ctx, sr.dramKeys, bufs[w])
		for j, e := range errs {
			if e != nil || ns[j] != int(sr.size) {
				return fmt.Errorf("batch item %s: %d bytes, %w", sr.dramKeys[j], ns[j], e)
			}
		}
		if i%4 == 0 {
			return verifyEach(bufs[w][i%len(bufs[w])], sr.dramVals[i%len(bufs[w])], sr.dramKeys[i%len(bufs[w])])
		}
		return nil
	})
	return r, err
}
