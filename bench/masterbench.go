package main

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tierstore/tierstore/master"
	"github.com/tierstore/tierstore/masterapi"
	"github.com/tierstore/tierstore/mastergrpc"
)

func init() {
	register(scenario{
		name: "master",
		help: "master lookups and put pairs per second, in-process and over gRPC on 127.0.0.1",
		run:  runMaster,
	})
}

// masterOp is one measured operation kind: do performs op number i and
// returns how many keys it covered.
type masterOp struct {
	name    string
	workers int
	ops     int
	do      func(ctx context.Context, api masterapi.API, i int, r *rand.Rand) (int, error)
}

// masterSizes: objects put, lookups made, keys per batch lookup, and each
// phase's time budget.
type masterSizes struct {
	objects, lookups, batch int
	budget                  time.Duration
}

const masterObjSize = 64 << 10

func runMaster(ctx context.Context, e *env) (*result, error) {
	sz := masterSizes{objects: 200_000, lookups: 200_000, batch: 1000, budget: 15 * time.Second}
	if e.quick {
		sz.objects, sz.lookups, sz.budget = 10_000, 10_000, time.Second
	}
	cfg := master.DefaultConfig()
	cfg.MonitorInterval = 0 // no background loop: nothing but the measured calls
	cfg.Logger = slog.New(slog.DiscardHandler)
	cfg.DefaultKVLeaseTTL = time.Minute
	svc, remote, stop, err := startBenchMaster(ctx, cfg, sz)
	if err != nil {
		return nil, err
	}
	defer stop()
	res := &result{Options: map[string]string{
		"objects":    fmt.Sprint(sz.objects),
		"lookups":    fmt.Sprint(sz.lookups),
		"batch":      fmt.Sprint(sz.batch),
		"object":     sizeName(masterObjSize),
		"budget":     sz.budget.String(),
		"shards":     fmt.Sprint(cfg.Shards),
		"grpc":       "loopback 127.0.0.1, one connection",
		"gomaxprocs": fmt.Sprint(runtimeProcs()),
	}}
	t := &table{
		Title:   "master operations (keys/s counts every key of a batch)",
		Columns: []string{"operation", "mode", "workers", "keys", "keys/s", "calls/s", "p50 us", "p99 us"},
	}
	for _, mode := range []struct {
		name    string
		api     masterapi.API
		seg     string
		workers int
	}{
		{"in-process", svc, "inproc", 4},
		{"gRPC", remote, "grpc", 16},
	} {
		if err := measureMode(ctx, e, t, mode.name, mode.api, mode.seg, mode.workers, sz); err != nil {
			return nil, err
		}
	}
	res.Tables = append(res.Tables, t)
	res.Notes = append(res.Notes, "each phase stops at its count or its time budget, whichever comes first; keys shows how many were done")
	return res, nil
}

// startBenchMaster starts an in-process master with two segments, one per
// mode, each big enough for every object (the allocator does bookkeeping
// only, no memory is touched), serves it over gRPC on loopback and dials it.
func startBenchMaster(ctx context.Context, cfg master.Config, sz masterSizes) (*master.Service, *mastergrpc.Client, func(), error) {
	svc, err := master.New(cfg)
	if err != nil {
		return nil, nil, nil, err
	}
	segSize := int64(4*sz.objects) * masterObjSize
	for _, seg := range []string{"inproc", "grpc"} {
		if err := svc.MountSegment(ctx, masterapi.MountRequest{Node: "bench-" + seg, Endpoint: "127.0.0.1:1",
			Segment: seg, Size: segSize}); err != nil {
			svc.Close()
			return nil, nil, nil, err
		}
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		svc.Close()
		return nil, nil, nil, err
	}
	srv := master.NewServer(svc)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(lis) }()
	stopServer := func() {
		srv.Stop()
		<-served
		svc.Close()
	}
	remote, err := mastergrpc.Dial(ctx, lis.Addr().String())
	if err != nil {
		stopServer()
		return nil, nil, nil, err
	}
	return svc, remote, func() { remote.Close(); stopServer() }, nil
}

// measureMode runs the put phase, then the lookup phases, of one mode and
// adds a row per operation to t.
func measureMode(ctx context.Context, e *env, t *table, name string, api masterapi.API, seg string, workers int, sz masterSizes) error {
	keyList := make([]string, sz.objects)
	for i := range keyList {
		keyList[i] = fmt.Sprintf("%s/obj/%09d", seg, i)
	}
	// Lookups pick among the keys the put phase stored within its budget.
	// Workers take indexes in order but finish out of order, so the stored
	// ones need not be a prefix: each put marks its own index (distinct
	// elements, no lock needed).
	stored := make([]bool, sz.objects)
	var present []int
	ops := masterOps(keyList, "bench-"+seg, workers, sz, stored, func(r *rand.Rand) int { return present[r.IntN(len(present))] })
	for _, op := range ops {
		f, err := measureMasterOp(ctx, e, api, op, sz.budget)
		if err != nil {
			return fmt.Errorf("%s %s: %w", name, op.name, err)
		}
		if op.ops == sz.objects && op.name[:3] == "put" {
			for i, ok := range stored {
				if ok {
					present = append(present, i)
				}
			}
			if len(present) == 0 {
				return fmt.Errorf("%s: no put finished within %v", name, sz.budget)
			}
		}
		t.add(op.name, name, op.workers, f.keys, f.keysPerSec, f.callsPerSec, f.p50, f.p99)
	}
	return nil
}

// masterOps are the measured operations of one mode: put pairs (marking
// stored[i]), then ExistKey, GetReplicaList and batch lookups of keys
// drawn by rnd among the stored ones.
func masterOps(keyList []string, node string, workers int, sz masterSizes, stored []bool, rnd func(*rand.Rand) int) []masterOp {
	key := func(i int) string { return keyList[i] }
	return []masterOp{
		{"put pair (PutStart+PutEnd)", workers, sz.objects, func(ctx context.Context, api masterapi.API, i int, r *rand.Rand) (int, error) {
			rep, err := api.PutStart(ctx, masterapi.PutStartRequest{Key: key(i), Size: masterObjSize, CRC: uint32(i), PreferredNode: node})
			if err != nil {
				return 0, err
			}
			if err := api.PutEnd(ctx, key(i), rep.PutToken); err != nil {
				return 0, err
			}
			stored[i] = true
			return 1, nil
		}},
		{"ExistKey", workers, sz.lookups, func(ctx context.Context, api masterapi.API, i int, r *rand.Rand) (int, error) {
			k := key(rnd(r))
			ok, err := api.ExistKey(ctx, k)
			if err == nil && !ok {
				err = fmt.Errorf("%w: ExistKey(%s) = false", errVerify, k)
			}
			return 1, err
		}},
		{"GetReplicaList", workers, sz.lookups, func(ctx context.Context, api masterapi.API, i int, r *rand.Rand) (int, error) {
			k := key(rnd(r))
			info, err := api.GetReplicaList(ctx, k)
			if err == nil && len(info.Replicas) == 0 {
				err = fmt.Errorf("%w: no replica for %s", errVerify, k)
			}
			return 1, err
		}},
		{fmt.Sprintf("BatchGetReplicaList x%d", sz.batch), workers, sz.lookups / sz.batch, func(ctx context.Context, api masterapi.API, i int, r *rand.Rand) (int, error) {
			keys := make([]string, sz.batch)
			for j := range keys {
				keys[j] = key(rnd(r))
			}
			rs, err := api.BatchGetReplicaList(ctx, keys)
			if err != nil {
				return 0, err
			}
			for _, r := range rs {
				if r.Err != nil {
					return 0, r.Err
				}
			}
			return len(rs), nil
		}},
	}
}

type opFigures struct {
	keys                    int64
	keysPerSec, callsPerSec float64
	p50, p99                float64
}

func measureMasterOp(ctx context.Context, e *env, api masterapi.API, op masterOp, budget time.Duration) (opFigures, error) {
	var f opFigures
	ctx, cancel := context.WithTimeout(ctx, budget+10*time.Second)
	defer cancel()
	deadline := time.Now().Add(budget)
	var next, keys, calls atomic.Int64
	var mu sync.Mutex // protects lat and firstErr
	var lat latencies
	var firstErr error
	bar := e.progress("master "+op.name, int64(op.ops))
	var wg sync.WaitGroup
	t0 := time.Now()
	for w := 0; w < op.workers; w++ {
		wg.Add(1)
		go func(seed uint64) {
			defer wg.Done()
			r := rand.New(rand.NewPCG(seed, 3))
			var mine latencies
			for {
				i := int(next.Add(1) - 1)
				if i >= op.ops || time.Now().After(deadline) {
					break
				}
				c0 := time.Now()
				n, err := op.do(ctx, api, i, r)
				// Sample latency (every call up to 64k per worker).
				if len(mine) < 1<<16 {
					mine = append(mine, time.Since(c0))
				}
				if err != nil {
					mu.Lock()
					if firstErr == nil {
						firstErr = err
					}
					mu.Unlock()
					break
				}
				keys.Add(int64(n))
				calls.Add(1)
				bar.Add(1)
			}
			mu.Lock()
			lat = append(lat, mine...)
			mu.Unlock()
		}(uint64(w))
	}
	wg.Wait()
	el := time.Since(t0)
	bar.Finish()
	if firstErr != nil {
		return f, firstErr
	}
	f.keys = keys.Load()
	f.keysPerSec = float64(f.keys) / el.Seconds()
	f.callsPerSec = float64(calls.Load()) / el.Seconds()
	f.p50 = float64(lat.pct(50)) / float64(time.Microsecond)
	f.p99 = float64(lat.pct(99)) / float64(time.Microsecond)
	return f, nil
}
