package main

import (
	"fmt"

	"github.com/tierstore/tierstore/bench/internal/trace"
)

// The churn traces beyond the first five, of shapes a KV-cache pool sees
// and that no policy was tuned to (issue 23, item 5). Their sizes follow
// the cache's: cacheBlocks is DRAM+SSD in blocks (1280 by default, 80
// with --quick), sz.shapeKeys the key set of a Zipf-popular tenant (4096,
// 256).
//
//   - zipf0.9-bursts: Zipf(0.9) over shapeKeys keys (a flat popularity:
//     the cache holds a fifth of the keys), interrupted every 3/16 of the
//     requests (3000) by a burst of 0.4 x cacheBlocks (512) keys read once.
//   - tenants: two tenants in one pool, each request one or the other at
//     random: Zipf(0.9) over shapeKeys/2 keys, and a loop over 3/4 of
//     cacheBlocks read in order.
//   - shifting: Zipf(0.9) over shapeKeys/2 keys whose ranking slides by an
//     eighth of the set every eighth of the trace (new keys enter hottest).
//   - prefixes: retrieval prompts of a system prompt (8 of 4 blocks), a
//     document (shapeKeys/8 of 8 blocks), both Zipf(0.9) popular, and 4
//     blocks of a question read once.

// churnShapeSeed is the seed of the shapes: 11, or --seed + 2.
func churnShapeSeed(e *env) uint64 {
	if e.seed != 0 {
		return uint64(e.seed) + 2
	}
	return 11
}

func churnShapeConfigs(e *env, sz churnSizes) (trace.ZipfBurstConfig, trace.TenantsConfig, trace.ShiftConfig, trace.PrefixConfig) {
	seed := churnShapeSeed(e)
	cache := int((sz.dram + sz.ssd) / sz.block)
	n := sz.shapeRequests
	zb := trace.ZipfBurstConfig{Name: "zipf0.9-bursts", Seed: seed, Requests: n, Keys: sz.shapeKeys, ZipfS: 0.9,
		BlockSize: sz.block, BurstEvery: n * 3 / 16, BurstLen: cache * 2 / 5}
	tn := trace.TenantsConfig{Seed: seed, Requests: n, BlockSize: sz.block, ZipfKeys: sz.shapeKeys / 2, ZipfS: 0.9,
		LoopKeys: cache * 3 / 4, ShareA: 0.5}
	sh := trace.ShiftConfig{Seed: seed, Requests: n, BlockSize: sz.block, Keys: sz.shapeKeys / 2, ZipfS: 0.9,
		Phase: n / 8, Shift: sz.shapeKeys / 16}
	px := trace.PrefixConfig{Seed: seed, Requests: n, BlockSize: sz.block, Systems: 8, SystemBlocks: 4,
		Docs: sz.shapeKeys / 8, DocBlocks: 8, ZipfS: 0.9, QueryBlocks: 4}
	return zb, tn, sh, px
}

// churnShapes builds the four traces.
func churnShapes(e *env, sz churnSizes) ([]*trace.Trace, error) {
	zb, tn, sh, px := churnShapeConfigs(e, sz)
	var out []*trace.Trace
	for _, mk := range []func() (*trace.Trace, error){
		func() (*trace.Trace, error) { return trace.ZipfBursts(zb) },
		func() (*trace.Trace, error) { return trace.Tenants(tn) },
		func() (*trace.Trace, error) { return trace.Shifting(sh) },
		func() (*trace.Trace, error) { return trace.Prefixes(px) },
	} {
		t, err := mk()
		if err != nil {
			return nil, err
		}
		out = append(out, t)
	}
	return out, nil
}

// churnShapeOptions describes the shapes for the run's header.
func churnShapeOptions(e *env, sz churnSizes) map[string]string {
	zb, tn, sh, px := churnShapeConfigs(e, sz)
	return map[string]string{
		zb.Name: fmt.Sprintf("%d requests, %d keys zipf %.1f, a burst of %d one-off keys every %d, seed %d",
			zb.Requests, zb.Keys, zb.ZipfS, zb.BurstLen, zb.BurstEvery, zb.Seed),
		"tenants": fmt.Sprintf("%d requests, %.0f%% zipf %.1f over %d keys, the rest a loop over %d blocks, seed %d",
			tn.Requests, 100*tn.ShareA, tn.ZipfS, tn.ZipfKeys, tn.LoopKeys, tn.Seed),
		"shifting": fmt.Sprintf("%d requests, zipf %.1f over %d keys sliding by %d every %d requests, seed %d",
			sh.Requests, sh.ZipfS, sh.Keys, sh.Shift, sh.Phase, sh.Seed),
		"prefixes": fmt.Sprintf("%d requests, prompts of %d system prompts x %d blocks + %d documents x %d blocks (zipf %.1f) + %d one-off blocks, seed %d",
			px.Requests, px.Systems, px.SystemBlocks, px.Docs, px.DocBlocks, px.ZipfS, px.QueryBlocks, px.Seed),
	}
}
