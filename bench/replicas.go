package main

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/tierstore/tierstore/client"
	"github.com/tierstore/tierstore/master"
	"github.com/tierstore/tierstore/node"
)

func init() {
	register(scenario{
		name: "replicas",
		help: "put with 2 and 3 DRAM replicas on 3 nodes against 1 replica, over loopback, measured side by side (and a raw TCP stream)",
		run:  runReplicas,
	})
}

// replicaNodes is the number of store nodes of the replicas scenario.
const replicaNodes = 3

// replicaRig is a master served over gRPC on 127.0.0.1, replicaNodes
// DRAM-only store nodes with real listeners, and remote clients: every
// replica's bytes cross loopback to its node.
type replicaRig struct {
	m      *master.Service
	srv    interface{ Stop() }
	nodes  []*node.Node
	remote []*client.Client
}

func newReplicaRig(ctx context.Context, clients int, memory int64) (_ *replicaRig, err error) {
	r := &replicaRig{}
	defer func() {
		if err != nil {
			r.close()
		}
	}()
	log := quietLogger()
	mc := master.DefaultConfig()
	mc.Logger = log
	var addr string
	if r.m, r.srv, addr, err = serveMaster(mc); err != nil {
		return nil, err
	}
	for range replicaNodes {
		nc := node.DefaultConfig()
		nc.Listen, nc.Memory, nc.Logger = "127.0.0.1:0", memory, log
		n, err := node.Start(ctx, nc, r.m)
		if err != nil {
			return nil, err
		}
		r.nodes = append(r.nodes, n)
	}
	r.remote, err = remoteClients(ctx, addr, clients)
	return r, err
}

func (r *replicaRig) close() {
	for _, c := range r.remote {
		c.Close()
	}
	for _, n := range r.nodes {
		n.Close()
	}
	if r.srv != nil {
		r.srv.Stop()
	}
	if r.m != nil {
		r.m.Close()
	}
}

// replicaRow is one line of the replicas table.
type replicaRow struct {
	name     string
	replicas int // 0: raw tcp
	fig      figure
	// x1, p50x1: throughput and p50 over the 1-replica row's, xRaw
	// throughput over raw tcp's (medians of per-pass ratios; nil: n/a).
	x1, p50x1, xRaw any
}

func runReplicas(ctx context.Context, e *env) (*result, error) {
	started := time.Now()
	d := 2 * time.Second
	if e.quick {
		d = 500 * time.Millisecond
	}
	sizes, clients := []int64{256 << 10, 1 << 20}, []int{1, 4}
	round := 64         // most puts per client and round
	if e.sizes != nil { // tests: small objects, short rows, small rounds
		sizes, d, round = e.sizes, 100*time.Millisecond, 8
	}
	rig, err := newReplicaRig(ctx, clients[len(clients)-1], 1<<30)
	if err != nil {
		return nil, fmt.Errorf("bench: replicas cluster: %w", err)
	}
	defer rig.close()
	res := &result{Options: map[string]string{
		"per_row": fmt.Sprintf("%v of timed work in %d interleaved passes; MB/s and p50 of the median pass, ratios the median of per-pass ratios", d, e2eReps),
		"cluster": fmt.Sprintf("master over gRPC on 127.0.0.1, %d DRAM-only nodes with real listeners, remote clients (no local node): every replica crosses loopback", replicaNodes),
	}}
	t := &table{Title: "put with N DRAM replicas (each on another node) against 1, same run",
		Columns: []string{"row", "size", "clients", "MB/s", "p50 ms", "x 1 replica", "p50 x 1 replica", "x raw tcp", "cpu us/MiB", "cpu x 1 replica"}}
	for _, size := range sizes {
		for _, k := range clients {
			rows, err := replicaRows(ctx, rig, size, k, d, round)
			if err != nil {
				return nil, err
			}
			for _, r := range rows {
				var cx any
				if r.replicas > 0 {
					cx = ratio(float64(r.fig.cpuPerMiB), float64(rows[1].fig.cpuPerMiB))
				}
				t.add(r.name, sizeName(size), fmt.Sprint(k), r.fig.mbps, ms(r.fig.p50), r.x1, r.p50x1, r.xRaw,
					float64(r.fig.cpuPerMiB)/1e3, cx)
			}
		}
	}
	res.Tables = []*table{t}
	res.Notes = append(res.Notes,
		"MB/s counts the value's bytes once per put, whatever the replicas: a put of 2 replicas moves twice as many bytes on the wire (written to the nodes in parallel)",
		"x 1 replica, p50 x 1 replica: this row's throughput and median put latency over the 1-replica row's of the same size and clients, medians of the per-pass ratios; cpu x 1 replica: CPU per MiB over the 1-replica row's (median passes)",
		"raw tcp: k Go senders writing the row's values back to back into k loopback connections (one per client), k receivers reading them, in the same passes",
		"cpu us/MiB: user+system CPU of the whole process (clients, nodes, master) per MiB of values put")
	res.Elapsed = time.Since(started).Seconds()
	return res, nil
}

// replicaRows measures raw tcp and puts of 1, 2 and 3 replicas of size
// bytes with k clients, interleaved in e2eReps passes; each row is its
// median pass.
func replicaRows(ctx context.Context, rig *replicaRig, size int64, k int, d time.Duration, round int) ([]replicaRow, error) {
	src := newValueSource(int(size), 11)
	vals := make([][]byte, 64)
	for i := range vals {
		vals[i] = src.value(i)
	}
	dst := make([][][]byte, k)
	for w := range dst {
		dst[w] = [][]byte{make([]byte, size)}
	}
	passes := make([][]replicaRow, 1+replicaNodes)
	for range e2eReps {
		fig, err := rawTCP(ctx, vals, dst, d/e2eReps)
		if err != nil {
			return nil, err
		}
		passes[0] = append(passes[0], replicaRow{name: "raw tcp", fig: fig})
		for n := 1; n <= replicaNodes; n++ {
			fig, err := putReplicasRound(ctx, rig, src, size, k, n, d/e2eReps, round)
			if err != nil {
				return nil, fmt.Errorf("bench: replicas put %s x%d, %d replicas: %w", sizeName(size), k, n, err)
			}
			passes[n] = append(passes[n], replicaRow{name: fmt.Sprintf("put, %d %s", n, plural(n, "replica")), replicas: n, fig: fig})
		}
	}
	perPass := func(i, base int, of func(figure) float64) any {
		var xs []float64
		for p := range passes[i] {
			if b := of(passes[base][p].fig); b > 0 {
				xs = append(xs, of(passes[i][p].fig)/b)
			}
		}
		return median(xs)
	}
	rate := func(f figure) float64 { return f.mbps }
	p50 := func(f figure) float64 { return float64(f.p50) }
	out := make([]replicaRow, len(passes))
	for i, p := range passes {
		byRate := slices.Clone(p)
		slices.SortFunc(byRate, func(a, b replicaRow) int { return cmp.Compare(a.fig.mbps, b.fig.mbps) })
		out[i] = byRate[len(byRate)/2]
		out[i].xRaw = perPass(i, 0, rate)
		if i > 0 {
			out[i].x1, out[i].p50x1 = perPass(i, 1, rate), perPass(i, 1, p50)
		}
	}
	return out, nil
}

// plural is word, with an s unless n is 1.
func plural(n int, word string) string {
	if n == 1 {
		return word
	}
	return word + "s"
}

// putReplicasRound measures k clients putting values of size bytes with n
// replicas each, in rounds of at most round puts per client (64 MiB in
// all) that are removed after each (untimed).
func putReplicasRound(ctx context.Context, rig *replicaRig, src *valueSource, size int64, k, n int, d time.Duration, round int) (figure, error) {
	perRound := min(round, max(4, int(64<<20/size)/k))
	keys := make([][]string, k)
	for w := range keys {
		for i := range perRound {
			keys[w] = append(keys[w], fmt.Sprintf("replicas/%d/%d/%d", n, w, i))
		}
	}
	opts := client.PutOptions{Replicas: n}
	op := func(w, i int) error { return rig.remote[w].PutWith(ctx, keys[w][i], src.value(w*perRound+i), opts) }
	prefix := fmt.Sprintf("^replicas/%d/", n)
	cleanup := func() error { // one call for the round's puts (untimed)
		got, err := rig.remote[0].RemoveByRegex(ctx, prefix, true)
		if err == nil && got != int64(k*perRound) {
			err = fmt.Errorf("removed %d of the round's %d objects", got, k*perRound)
		}
		return err
	}
	return measureRounds(ctx, k, perRound, d, size, op, cleanup)
}
