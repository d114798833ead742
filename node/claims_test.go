package node

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"pgregory.net/rapid"
)

// claimModel is the obvious implementation of the claim rules: an unsorted
// list of claims, scanned in full by every operation.
type claimModel struct {
	cl    []claim
	limit int
	floor uint64
}

func (m *claimModel) claim(a, b int64, g uint64) error {
	if g == 0 {
		return ErrNoPutToken
	}
	if g <= m.floor {
		return ErrRangeNotOwned
	}
	for _, c := range m.cl {
		if c.start < b && a < c.end && c.token > g {
			return ErrRangeNotOwned
		}
	}
	if a >= b {
		return nil
	}
	var next []claim
	for _, c := range m.cl {
		if c.end <= a || c.start >= b {
			next = append(next, c)
			continue
		}
		if c.start < a {
			next = append(next, claim{c.start, a, c.token})
		}
		if c.end > b {
			next = append(next, claim{b, c.end, c.token})
		}
	}
	m.cl = append(next, claim{a, b, g})
	if len(m.cl) > m.limit {
		var toks []uint64
		for _, c := range m.cl {
			toks = append(toks, c.token)
		}
		slices.Sort(toks)
		thr := toks[len(toks)/4]
		m.floor = max(m.floor, thr)
		m.cl = slices.DeleteFunc(m.cl, func(c claim) bool { return c.token <= thr })
	}
	return nil
}

func (m *claimModel) sorted() []claim {
	out := slices.Clone(m.cl)
	slices.SortFunc(out, func(x, y claim) int { return int(x.start - y.start) })
	return out
}

// checkClaimsShape: chunks non-empty and at most claimChunk long, claims
// non-empty, sorted, disjoint, n right.
func checkClaimsShape(c *claims) error {
	n := 0
	var prev *claim
	for _, ch := range c.chunks {
		if len(ch) == 0 || len(ch) > claimChunk {
			return fmt.Errorf("chunk of %d claims", len(ch))
		}
		for i := range ch {
			cl := ch[i]
			if cl.start >= cl.end || cl.token == 0 {
				return fmt.Errorf("bad claim %+v", cl)
			}
			if prev != nil && prev.end > cl.start {
				return fmt.Errorf("claims %+v and %+v overlap or are out of order", *prev, cl)
			}
			prev = &ch[i]
			n++
		}
	}
	if n != c.n {
		return fmt.Errorf("n = %d, %d claims held", c.n, n)
	}
	return nil
}

// Issue 9 item 1 (invariant 8): the claim table answers every write as the
// obvious model does, and holds the same claims, including across the
// shedding of old claims when the limit is reached.
func TestClaimsMatchModel(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		size := rapid.Int64Range(16, 8192).Draw(t, "size")
		limit := rapid.IntRange(4, 1200).Draw(t, "limit")
		c := newClaims(limit)
		m := &claimModel{limit: limit}
		var token uint64
		ops := rapid.IntRange(1, 1500).Draw(t, "ops")
		for i := 0; i < ops; i++ {
			a := rapid.Int64Range(0, size-1).Draw(t, "a")
			b := a + rapid.Int64Range(0, min(size-a, 96)).Draw(t, "len")
			var g uint64
			switch rapid.IntRange(0, 9).Draw(t, "kind") {
			case 0: // untokened
			case 1, 2: // a late writer: an older token
				if token > 0 {
					g = rapid.Uint64Range(1, token).Draw(t, "old")
				}
			default: // the next put
				token++
				g = token
			}
			got, want := c.claim(a, b, g), m.claim(a, b, g)
			if (got == nil) != (want == nil) || want != nil && !errors.Is(got, want) {
				t.Fatalf("op %d: claim [%d,%d) token %d: got %v, model %v", i, a, b, g, got, want)
			}
			if err := checkClaimsShape(c); err != nil {
				t.Fatalf("op %d: %v", i, err)
			}
			if all, mod := c.all(), m.sorted(); !slices.Equal(all, mod) {
				t.Fatalf("op %d: claims\n%v\nmodel\n%v", i, all, mod)
			}
			if c.floor != m.floor {
				t.Fatalf("op %d: floor %d, model %d", i, c.floor, m.floor)
			}
		}
	})
}

// The table stays within its limit: a long run of distinct small puts
// sheds old claims instead of growing.
func TestClaimsBounded(t *testing.T) {
	c := newClaims(claimsLimit(1 << 20))
	for g := uint64(1); g <= 100000; g++ {
		off := int64(g*64) % (1 << 20)
		if err := c.claim(off, off+64, g); err != nil {
			t.Fatalf("put %d: %v", g, err)
		}
		if c.n > c.limit {
			t.Fatalf("%d claims, limit %d", c.n, c.limit)
		}
	}
	if c.floor == 0 {
		t.Fatal("nothing was shed")
	}
	if err := c.claim(0, 64, c.floor); !errors.Is(err, ErrRangeNotOwned) {
		t.Fatalf("a put older than the shed ones: %v", err)
	}
}

// Many claims (several chunks) and writes that span chunk boundaries,
// against the model.
func TestClaimsManyChunksMatchModel(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	const size = 1 << 16
	c := newClaims(3000)
	m := &claimModel{limit: 3000}
	var token uint64
	maxChunks := 0
	for i := 0; i < 30000; i++ {
		a := r.Int64N(size)
		n := r.Int64N(48) + 1
		if r.IntN(50) == 0 {
			n = r.Int64N(8192) + 1 // spans many claims, often several chunks
		}
		b := min(a+n, size)
		g := token + 1
		if r.IntN(5) == 0 && token > 0 {
			g = r.Uint64N(token) + 1
		} else {
			token++
		}
		got, want := c.claim(a, b, g), m.claim(a, b, g)
		if (got == nil) != (want == nil) {
			t.Fatalf("op %d: claim [%d,%d) token %d: got %v, model %v", i, a, b, g, got, want)
		}
		maxChunks = max(maxChunks, len(c.chunks))
		if i%500 == 0 || i == 29999 {
			if err := checkClaimsShape(c); err != nil {
				t.Fatalf("op %d: %v", i, err)
			}
			if !slices.Equal(c.all(), m.sorted()) {
				t.Fatalf("op %d: claims differ from the model", i)
			}
		}
	}
	if maxChunks < 4 {
		t.Fatalf("at most %d chunks: the test does not exercise the chunked list", maxChunks)
	}
}
