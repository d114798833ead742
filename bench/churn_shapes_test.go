package main

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/tierstore/tierstore/bench/internal/trace"
)

// TestChatRAGShape: the chat-rag trace is the conversations trace, in its
// order, interleaved with Zipf keys at the share asked for; the same seed
// gives the same trace, another seed another one.
func TestChatRAGShape(t *testing.T) {
	c := chatRAGConfig{Seed: 5, Requests: 6000, BlockSize: 64 << 10, Sessions: 32, ZipfKeys: 512, ZipfS: 0.9, ShareConv: 0.3}
	tr, err := chatRAG(c)
	if err != nil {
		t.Fatal(err)
	}
	if tr.Name != "chat-rag" || len(tr.Requests) != c.Requests {
		t.Fatalf("name %q, %d requests; want chat-rag, %d", tr.Name, len(tr.Requests), c.Requests)
	}
	conv, err := trace.Conversations(trace.ConvConfig{Seed: c.Seed, Requests: c.Requests, BlockSize: c.BlockSize, Sessions: c.Sessions})
	if err != nil {
		t.Fatal(err)
	}
	var fromConv []trace.Request
	zipfKeys := map[string]bool{}
	for _, r := range tr.Requests {
		if r.Size != c.BlockSize {
			t.Fatalf("request %v: size %d, want %d", r, r.Size, c.BlockSize)
		}
		if strings.HasPrefix(r.Key, "z/") {
			zipfKeys[r.Key] = true
			continue
		}
		fromConv = append(fromConv, r)
	}
	if !reflect.DeepEqual(fromConv, conv.Requests[:len(fromConv)]) {
		t.Error("the conversation tenant's requests are not the conversations trace in its order")
	}
	if share := float64(len(fromConv)) / float64(c.Requests); share < 0.27 || share > 0.33 {
		t.Errorf("conversation share %.3f, want about %.2f", share, c.ShareConv)
	}
	if len(zipfKeys) > c.ZipfKeys || len(zipfKeys) < c.ZipfKeys/4 {
		t.Errorf("%d distinct Zipf keys of %d", len(zipfKeys), c.ZipfKeys)
	}
	again, err := chatRAG(c)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(again.Requests, tr.Requests) {
		t.Error("the same seed gave another trace")
	}
	c.Seed++
	other, err := chatRAG(c)
	if err != nil {
		t.Fatal(err)
	}
	if reflect.DeepEqual(other.Requests, tr.Requests) {
		t.Error("another seed gave the same trace")
	}
	for _, share := range []float64{0, 1, -0.5} {
		c.ShareConv = share
		if _, err := chatRAG(c); !errors.Is(err, errUsage) {
			t.Errorf("ShareConv %v: %v, want errUsage", share, err)
		}
	}
}

// The debug counts per key prefix (TIERSTORE_CHURN_DEBUG) split each
// outcome by the key's part before its first '/'.
func TestCountPrefix(t *testing.T) {
	rp := &replayer{byPrefix: map[string]*[3]int64{}}
	for _, c := range []struct {
		key     string
		outcome int
	}{{"l/1", 0}, {"l/2", 2}, {"a/7", 1}, {"a/7", 1}, {"plain", 2}} {
		rp.countPrefix(c.key, c.outcome)
	}
	want := map[string][3]int64{"l": {1, 0, 1}, "a": {0, 2, 0}, "plain": {0, 0, 1}}
	if len(rp.byPrefix) != len(want) {
		t.Fatalf("prefixes %v, want %v", rp.byPrefix, want)
	}
	for p, w := range want {
		if got := rp.byPrefix[p]; got == nil || *got != w {
			t.Errorf("prefix %s: %v, want %v", p, got, w)
		}
	}
	(&replayer{}).countPrefix("l/1", 0) // off without TIERSTORE_CHURN_DEBUG: no map, no panic
}
