package main

// EXPERIMENT (not for commit).

import (
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/tierstore/tierstore/eviction"
	"github.com/tierstore/tierstore/tier"
)

func init() {
	if v, err := strconv.Atoi(os.Getenv("TIERSTORE_EXP_JUNK")); err == nil {
		eviction.ExpJunk = uint32(v)
	}
}

func expRanks(emb *churnStack, trace string) {
	edges := []int{250, 500, 750, 1000, 1163, 1500, 2000, 3000, 5000}
	h := make([]int, len(edges)+1)
	other := 0
	_ = emb.eng.Keys(func(k []byte, _ tier.KeyInfo) bool {
		ks := string(k)
		i := strings.LastIndexByte(ks, '/')
		if !strings.HasPrefix(ks, "z/") && !strings.HasPrefix(ks, "a/") {
			other++
			return true
		}
		r, _ := strconv.Atoi(ks[i+1:])
		j := 0
		for j < len(edges) && r >= edges[j] {
			j++
		}
		h[j]++
		return true
	})
	type bk struct{ n, junk, est int }
	bs := map[uint64]*bk{}
	pol, _ := emb.m.Policy().(interface{ Estimate(string) uint32 })
	_ = emb.eng.Keys(func(k []byte, ki tier.KeyInfo) bool {
		b := bs[ki.Bucket]
		if b == nil {
			b = &bk{}
			bs[ki.Bucket] = b
		}
		b.n++
		ks := string(k)
		r, _ := strconv.Atoi(ks[strings.LastIndexByte(ks, '/')+1:])
		if r >= 1163 || !(strings.HasPrefix(ks, "z/") || strings.HasPrefix(ks, "a/")) {
			b.junk++
		}
		if pol != nil {
			b.est += int(pol.Estimate(ks))
		}
		return true
	})
	sizes := map[int]int{}
	for _, b := range bs {
		sizes[b.n]++
	}
	fmt.Fprintf(os.Stderr, "%s SSD buckets %d by size %v\n", trace, len(bs), sizes)
	for id, b := range bs {
		if b.n >= 8 {
			fmt.Fprintf(os.Stderr, "  bucket %d n %d junk %d mean est %.2f\n", id, b.n, b.junk, float64(b.est)/float64(b.n))
		}
	}
	fmt.Fprintf(os.Stderr, "%s SSD ranks <%v: %v other %d\n", trace, edges, h, other)
}
