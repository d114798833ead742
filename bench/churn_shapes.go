package main

import (
	"fmt"
	"math/rand/v2"

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
//   - chat-rag: two tenants in one pool whose patterns pull admission
//     opposite ways, each request one or the other at random: multi-turn
//     conversations (sz.sessions sessions, as the conversations trace:
//     recency, a turn's new blocks are read again at the session's next
//     turn) and retrieval over a Zipf(0.9) set of shapeKeys/2 blocks
//     (frequency, most new keys are tail keys read once in a long while).
//     A rule that puts new keys cold helps the second and hurts the first.

// churnShapeSeed is the seed of the shapes: 11, or --seed + 2.
func churnShapeSeed(e *env) uint64 {
	if e.seed != 0 {
		return uint64(e.seed) + 2
	}
	return 11
}

// chatRAGConfig configures chatRAG.
type chatRAGConfig struct {
	Seed      uint64
	Requests  int
	BlockSize int64
	// Sessions is the conversation tenant's session slots.
	Sessions int
	// ZipfKeys and ZipfS are the retrieval tenant's key set and exponent.
	ZipfKeys int
	ZipfS    float64
	// ShareConv is the probability that a request is the conversation
	// tenant's, in (0, 1).
	ShareConv float64
}

// chatRAG returns the chat-rag trace: trace.Conversations (keys "sys/<i>",
// "c<id>/<j>", in their order) and Zipf requests "z/<rank>" interleaved
// by a coin of probability ShareConv. Deterministic for a seed.
func chatRAG(c chatRAGConfig) (*trace.Trace, error) {
	if !(c.ShareConv > 0 && c.ShareConv < 1) {
		return nil, fmt.Errorf("%w: chat-rag: ShareConv %g must be in (0, 1)", errUsage, c.ShareConv)
	}
	conv, err := trace.Conversations(trace.ConvConfig{Seed: c.Seed, Requests: c.Requests, BlockSize: c.BlockSize, Sessions: c.Sessions})
	if err != nil {
		return nil, err
	}
	// A burst of no keys: a plain Zipf stream.
	zipf, err := trace.ZipfBursts(trace.ZipfBurstConfig{Name: "z", Seed: c.Seed + 1, Requests: c.Requests, Keys: c.ZipfKeys,
		ZipfS: c.ZipfS, BlockSize: c.BlockSize, BurstEvery: c.Requests, BurstLen: 0})
	if err != nil {
		return nil, err
	}
	r := rand.New(rand.NewPCG(c.Seed, c.Seed^0x3c6ef372fe94f82b))
	t := &trace.Trace{Name: "chat-rag", Requests: make([]trace.Request, 0, c.Requests)}
	ci, zi := 0, 0
	for len(t.Requests) < c.Requests {
		if r.Float64() < c.ShareConv {
			t.Requests = append(t.Requests, conv.Requests[ci])
			ci++
			continue
		}
		t.Requests = append(t.Requests, zipf.Requests[zi])
		zi++
	}
	return t, nil
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

// churnChatRAGConfig is the chat-rag shape's configuration.
func churnChatRAGConfig(e *env, sz churnSizes) chatRAGConfig {
	return chatRAGConfig{Seed: churnShapeSeed(e), Requests: sz.shapeRequests, BlockSize: sz.block, Sessions: sz.sessions,
		ZipfKeys: sz.shapeKeys / 2, ZipfS: 0.9, ShareConv: 0.5}
}

// churnShapes builds the five traces.
func churnShapes(e *env, sz churnSizes) ([]*trace.Trace, error) {
	zb, tn, sh, px := churnShapeConfigs(e, sz)
	cr := churnChatRAGConfig(e, sz)
	var out []*trace.Trace
	for _, mk := range []func() (*trace.Trace, error){
		func() (*trace.Trace, error) { return trace.ZipfBursts(zb) },
		func() (*trace.Trace, error) { return trace.Tenants(tn) },
		func() (*trace.Trace, error) { return trace.Shifting(sh) },
		func() (*trace.Trace, error) { return trace.Prefixes(px) },
		func() (*trace.Trace, error) { return chatRAG(cr) },
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
	cr := churnChatRAGConfig(e, sz)
	return map[string]string{
		"chat-rag": fmt.Sprintf("%d requests, %.0f%% conversations (%d sessions), the rest zipf %.1f over %d keys, seed %d",
			cr.Requests, 100*cr.ShareConv, cr.Sessions, cr.ZipfS, cr.ZipfKeys, cr.Seed),
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
