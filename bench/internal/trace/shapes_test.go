package trace

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

// TestShapesDeterministic: every new generator gives the same trace for a
// seed, another for another seed, and exactly Requests requests.
func TestShapesDeterministic(t *testing.T) {
	gens := map[string]func(seed uint64) (*Trace, error){
		"zipf0.9-bursts": func(s uint64) (*Trace, error) {
			return ZipfBursts(ZipfBurstConfig{Name: "zipf0.9-bursts", Seed: s, Requests: 3000, Keys: 500, ZipfS: 0.9, BlockSize: 1, BurstEvery: 400, BurstLen: 50})
		},
		"tenants": func(s uint64) (*Trace, error) {
			return Tenants(TenantsConfig{Seed: s, Requests: 3000, BlockSize: 1, ZipfKeys: 300, ZipfS: 0.9, LoopKeys: 100, ShareA: 0.5})
		},
		"shifting": func(s uint64) (*Trace, error) {
			return Shifting(ShiftConfig{Seed: s, Requests: 3000, BlockSize: 1, Keys: 300, ZipfS: 0.9, Phase: 500, Shift: 40})
		},
		"prefixes": func(s uint64) (*Trace, error) {
			return Prefixes(PrefixConfig{Seed: s, Requests: 3000, BlockSize: 1, Systems: 4, SystemBlocks: 2, Docs: 50, DocBlocks: 4, ZipfS: 0.9, QueryBlocks: 2})
		},
	}
	for name, gen := range gens {
		a, err := gen(1)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		b, _ := gen(1)
		c, _ := gen(2)
		if a.Name != name || len(a.Requests) != 3000 {
			t.Errorf("%s: name %q, %d requests", name, a.Name, len(a.Requests))
		}
		if !reflect.DeepEqual(a, b) {
			t.Errorf("%s: same seed, different traces", name)
		}
		if reflect.DeepEqual(a.Requests, c.Requests) {
			t.Errorf("%s: different seeds, same trace", name)
		}
	}
}

// TestZipfBelowOne: the table sampler follows Zipf(0.9): rank 0 is drawn
// about 2^0.9 times as often as rank 1, and every rank can be drawn.
func TestZipfBelowOne(t *testing.T) {
	tr, err := ZipfBursts(ZipfBurstConfig{Seed: 3, Requests: 200000, Keys: 64, ZipfS: 0.9, BlockSize: 1, BurstEvery: 1 << 30})
	if err != nil {
		t.Fatal(err)
	}
	n := map[string]int{}
	for _, r := range tr.Requests {
		n[r.Key]++
	}
	if got := float64(n["z/0"]) / float64(n["z/1"]); got < 1.75 || got > 1.98 {
		t.Errorf("rank 0 / rank 1 = %.3f, want about 2^0.9 = 1.866", got)
	}
	if len(n) != 64 {
		t.Errorf("%d distinct keys drawn, want 64", len(n))
	}
}

// TestShapesStructure: tenants interleaves the two tenants at about the
// share and B loops in order; shifting moves its hottest key; prefixes
// reads system prompt, document and question in order, the questions once.
func TestShapesStructure(t *testing.T) {
	tn, _ := Tenants(TenantsConfig{Seed: 5, Requests: 10000, BlockSize: 1, ZipfKeys: 300, ZipfS: 0.9, LoopKeys: 7, ShareA: 0.3})
	a, loop := 0, 0
	for _, r := range tn.Requests {
		if strings.HasPrefix(r.Key, "a/") {
			a++
			continue
		}
		if want := "l/" + itoa(loop%7); r.Key != want {
			t.Fatalf("loop request %d is %s, want %s", loop, r.Key, want)
		}
		loop++
	}
	if f := float64(a) / 10000; f < 0.27 || f > 0.33 {
		t.Errorf("tenant A's share %.3f, want about 0.3", f)
	}

	sh, _ := Shifting(ShiftConfig{Seed: 5, Requests: 20000, BlockSize: 1, Keys: 100, ZipfS: 1.2, Phase: 10000, Shift: 50})
	top := func(reqs []Request) string {
		n := map[string]int{}
		best := ""
		for _, r := range reqs {
			n[r.Key]++
			if n[r.Key] > n[best] {
				best = r.Key
			}
		}
		return best
	}
	if a, b := top(sh.Requests[:10000]), top(sh.Requests[10000:]); a != "s/99" || b != "s/149" {
		t.Errorf("hottest keys %s then %s, want s/99 then s/149", a, b)
	}

	px, _ := Prefixes(PrefixConfig{Seed: 5, Requests: 1000, BlockSize: 1, Systems: 3, SystemBlocks: 2, Docs: 20, DocBlocks: 3, ZipfS: 0.9, QueryBlocks: 2})
	seen := map[string]bool{}
	for i := 0; i+7 <= len(px.Requests); i += 7 {
		p := px.Requests[i : i+7]
		for j, want := range []string{"p", "p", "d", "d", "d", "q", "q"} {
			if !strings.HasPrefix(p[j].Key, want) {
				t.Fatalf("prompt at %d: block %d is %s, want a %s block", i, j, p[j].Key, want)
			}
		}
		for _, r := range p[5:] {
			if seen[r.Key] {
				t.Fatalf("question block %s read twice", r.Key)
			}
			seen[r.Key] = true
		}
	}
}

func TestShapesBadConfig(t *testing.T) {
	cases := []struct {
		name  string
		err   error
		field string
	}{
		{"zipf-s", func() error {
			_, e := ZipfBursts(ZipfBurstConfig{Requests: 1, Keys: 2, ZipfS: -1, BlockSize: 1, BurstEvery: 1})
			return e
		}(), "ZipfS"},
		{"tenants-share", func() error {
			_, e := Tenants(TenantsConfig{Requests: 1, BlockSize: 1, ZipfKeys: 2, ZipfS: 1, LoopKeys: 1, ShareA: 1})
			return e
		}(), "ShareA"},
		{"tenants-loop", func() error {
			_, e := Tenants(TenantsConfig{Requests: 1, BlockSize: 1, ZipfKeys: 2, ZipfS: 1, ShareA: 0.5})
			return e
		}(), "LoopKeys"},
		{"shift-phase", func() error {
			_, e := Shifting(ShiftConfig{Requests: 1, BlockSize: 1, Keys: 2, ZipfS: 1})
			return e
		}(), "Phase"},
		{"prefix-docs", func() error {
			_, e := Prefixes(PrefixConfig{Requests: 1, BlockSize: 1, Systems: 2, SystemBlocks: 1, Docs: 1, DocBlocks: 1, ZipfS: 1})
			return e
		}(), "Docs"},
	}
	for _, c := range cases {
		if !errors.Is(c.err, ErrBadConfig) || !strings.Contains(c.err.Error(), c.field) {
			t.Errorf("%s: err = %v, want ErrBadConfig naming %s", c.name, c.err, c.field)
		}
	}
}
