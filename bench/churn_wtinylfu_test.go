package main

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/tierstore/tierstore/bench/internal/belady"
	"github.com/tierstore/tierstore/bench/internal/trace"
)

// TestWTinyLFUReference: the single-tier W-TinyLFU is an online policy,
// so Belady's MIN (with bypass) at the same capacity bounds it on random
// traces; on a loop larger than the cache it keeps a fixed part (LRU
// keeps nothing), and a burst of one-off keys does not flush its main
// cache of popular keys.
func TestWTinyLFUReference(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 20; i++ {
		var reqs []trace.Request
		keys := 5 + r.IntN(60)
		for j := 0; j < 2000; j++ {
			reqs = append(reqs, trace.Request{Key: fmt.Sprint(r.IntN(keys) * r.IntN(keys) % keys), Size: 1})
		}
		capacity := 2 + r.IntN(30)
		m, err := belady.MIN(reqs, int64(capacity))
		if err != nil {
			t.Fatal(err)
		}
		if h := wtinyLFUHits(reqs, capacity); h > m.Hits {
			t.Fatalf("trace %d: W-TinyLFU %d hits above MIN's %d at capacity %d", i, h, m.Hits, capacity)
		}
	}
	loop, _ := trace.Loop(trace.ScanConfig{WorkingSet: 150, ObjectSize: 1, Passes: 10})
	if h := wtinyLFUHits(loop.Requests, 100); h < 8*50 {
		t.Fatalf("loop of 150 over 100 slots, 10 passes: %d hits, want a fixed part of at least 50 a pass after the first two", h)
	}
	var zb []trace.Request
	for pass := 0; pass < 50; pass++ {
		for k := 0; k < 20; k++ {
			zb = append(zb, trace.Request{Key: fmt.Sprint("hot", k), Size: 1})
		}
		for k := 0; k < 200; k++ {
			zb = append(zb, trace.Request{Key: fmt.Sprint("once", pass, "/", k), Size: 1})
		}
	}
	if h := wtinyLFUHits(zb, 100); h < 45*20 {
		t.Fatalf("20 hot keys between bursts of 200 one-off keys, 100 slots: %d hits, want the hot keys kept", h)
	}
}
