package trace

import (
	"fmt"
	"math"
	"math/rand/v2"
	"sort"
)

// ranker draws ranks 0..n-1 with P(k) proportional to (k+1)^-s.
type ranker interface{ Uint64() uint64 }

// newRanker is math/rand's Zipf for s > 1 (the traces of earlier runs)
// and zipfTable otherwise (math/rand's needs s > 1).
func newRanker(r *rand.Rand, s float64, n int) ranker {
	if s > 1 {
		return rand.NewZipf(r, s, 1, uint64(n-1))
	}
	return newZipfTable(r, s, n)
}

// zipfTable draws from the cumulative distribution of Zipf(s) over n
// ranks by binary search: any s > 0.
type zipfTable struct {
	r   *rand.Rand
	cdf []float64
}

func newZipfTable(r *rand.Rand, s float64, n int) *zipfTable {
	cdf := make([]float64, n)
	sum := 0.0
	for k := range cdf {
		sum += math.Pow(float64(k+1), -s)
		cdf[k] = sum
	}
	for k := range cdf {
		cdf[k] /= sum
	}
	return &zipfTable{r: r, cdf: cdf}
}

func (z *zipfTable) Uint64() uint64 {
	u := z.r.Float64()
	k := sort.SearchFloat64s(z.cdf, u)
	return uint64(min(k, len(z.cdf)-1))
}

// TenantsConfig configures Tenants.
type TenantsConfig struct {
	// Seed makes the trace reproducible.
	Seed uint64
	// Requests is the number of requests.
	Requests int
	// BlockSize is the size of every object.
	BlockSize int64
	// ZipfKeys and ZipfS are tenant A's key set and Zipf exponent (> 0).
	ZipfKeys int
	ZipfS    float64
	// LoopKeys is tenant B's working set, read in order, over and over.
	LoopKeys int
	// ShareA is the probability that a request is tenant A's, in (0, 1).
	ShareA float64
}

// Tenants returns two tenants sharing one pool, their requests interleaved
// at random: tenant A ("a/<rank>") reads a Zipf-popular key set, tenant B
// ("l/<i>") loops over a working set in order (an agent replaying the same
// long context, a batch job re-reading its documents). A policy tuned to
// one pattern loses the other: recency keeps nothing of the loop,
// frequency ranks every loop key alike.
func Tenants(c TenantsConfig) (*Trace, error) {
	if err := checkZipfSet(c.Requests, c.BlockSize, "ZipfKeys", c.ZipfKeys, c.ZipfS); err != nil {
		return nil, err
	}
	switch {
	case c.LoopKeys <= 0:
		return nil, fmt.Errorf("%w: LoopKeys %d must be > 0", ErrBadConfig, c.LoopKeys)
	case !(c.ShareA > 0 && c.ShareA < 1):
		return nil, fmt.Errorf("%w: ShareA %g must be in (0, 1)", ErrBadConfig, c.ShareA)
	}
	r := rand.New(rand.NewPCG(c.Seed, c.Seed^0xbb67ae8584caa73b))
	z := newRanker(r, c.ZipfS, c.ZipfKeys)
	t := &Trace{Name: "tenants", Requests: make([]Request, 0, c.Requests)}
	loop := 0
	for len(t.Requests) < c.Requests {
		if r.Float64() < c.ShareA {
			t.Requests = append(t.Requests, Request{Key: fmt.Sprintf("a/%d", z.Uint64()), Size: c.BlockSize})
			continue
		}
		t.Requests = append(t.Requests, Request{Key: fmt.Sprintf("l/%d", loop), Size: c.BlockSize})
		loop = (loop + 1) % c.LoopKeys
	}
	return t, nil
}

// ShiftConfig configures Shifting.
type ShiftConfig struct {
	// Seed makes the trace reproducible.
	Seed uint64
	// Requests is the number of requests.
	Requests int
	// BlockSize is the size of every object.
	BlockSize int64
	// Keys and ZipfS are the popular set's size and Zipf exponent (> 0).
	Keys  int
	ZipfS float64
	// Phase is the number of requests between two shifts; Shift the keys
	// by which the popular set moves at each.
	Phase, Shift int
}

// Shifting returns a Zipf-popular working set that moves: every Phase
// requests the ranking slides by Shift keys, so Shift new keys become the
// most popular, every key loses Shift ranks and the least popular Shift
// keys leave ("s/<n>"; rank k of phase p is key k + p x Shift, read
// backwards: the newest keys are the hottest). New documents or sessions
// replacing old ones: frequencies learned earlier lie about the present.
func Shifting(c ShiftConfig) (*Trace, error) {
	if err := checkZipfSet(c.Requests, c.BlockSize, "Keys", c.Keys, c.ZipfS); err != nil {
		return nil, err
	}
	switch {
	case c.Phase <= 0:
		return nil, fmt.Errorf("%w: Phase %d must be > 0", ErrBadConfig, c.Phase)
	case c.Shift < 0:
		return nil, fmt.Errorf("%w: Shift %d must be >= 0", ErrBadConfig, c.Shift)
	}
	r := rand.New(rand.NewPCG(c.Seed, c.Seed^0x3c6ef372fe94f82b))
	z := newRanker(r, c.ZipfS, c.Keys)
	t := &Trace{Name: "shifting", Requests: make([]Request, 0, c.Requests)}
	for i := 0; len(t.Requests) < c.Requests; i++ {
		top := (i/c.Phase)*c.Shift + c.Keys - 1 // the hottest key of this phase
		k := top - int(z.Uint64())
		t.Requests = append(t.Requests, Request{Key: fmt.Sprintf("s/%d", k), Size: c.BlockSize})
	}
	return t, nil
}

// PrefixConfig configures Prefixes.
type PrefixConfig struct {
	// Seed makes the trace reproducible.
	Seed uint64
	// Requests is the number of requests (blocks looked up).
	Requests int
	// BlockSize is the size of every block.
	BlockSize int64
	// Systems system prompts of SystemBlocks blocks each, Zipf(ZipfS)
	// popular.
	Systems, SystemBlocks int
	// Docs documents of DocBlocks blocks each, Zipf(ZipfS) popular.
	Docs, DocBlocks int
	// ZipfS is the exponent of both popularities (> 0).
	ZipfS float64
	// QueryBlocks is the blocks of every prompt's own, never-repeated
	// question.
	QueryBlocks int
}

// Prefixes returns retrieval-augmented prompts that share prefixes: each
// prompt is a system prompt ("p<i>/<j>"), a retrieved document
// ("d<i>/<j>") and a question of its own ("q<n>/<j>", read once), looked
// up block by block in order, as a prefix cache does. Shared prefixes are
// read at every prompt that uses them, the questions once: a third of the
// blocks or more are one-hit wonders arriving together with the hot ones.
func Prefixes(c PrefixConfig) (*Trace, error) {
	switch {
	case c.Requests <= 0:
		return nil, fmt.Errorf("%w: Requests %d must be > 0", ErrBadConfig, c.Requests)
	case c.BlockSize <= 0:
		return nil, fmt.Errorf("%w: BlockSize %d must be > 0", ErrBadConfig, c.BlockSize)
	case c.Systems <= 1 || c.SystemBlocks <= 0:
		return nil, fmt.Errorf("%w: Systems %d must be > 1 and SystemBlocks %d > 0", ErrBadConfig, c.Systems, c.SystemBlocks)
	case c.Docs <= 1 || c.DocBlocks <= 0:
		return nil, fmt.Errorf("%w: Docs %d must be > 1 and DocBlocks %d > 0", ErrBadConfig, c.Docs, c.DocBlocks)
	case !(c.ZipfS > 0):
		return nil, fmt.Errorf("%w: ZipfS %g must be > 0", ErrBadConfig, c.ZipfS)
	case c.QueryBlocks < 0:
		return nil, fmt.Errorf("%w: QueryBlocks %d must be >= 0", ErrBadConfig, c.QueryBlocks)
	}
	r := rand.New(rand.NewPCG(c.Seed, c.Seed^0xa54ff53a5f1d36f1))
	sys := newRanker(r, c.ZipfS, c.Systems)
	doc := newRanker(r, c.ZipfS, c.Docs)
	t := &Trace{Name: "prefixes", Requests: make([]Request, 0, c.Requests+c.SystemBlocks+c.DocBlocks+c.QueryBlocks)}
	add := func(k string) { t.Requests = append(t.Requests, Request{Key: k, Size: c.BlockSize}) }
	for q := 0; len(t.Requests) < c.Requests; q++ {
		s, d := sys.Uint64(), doc.Uint64()
		for j := 0; j < c.SystemBlocks; j++ {
			add(fmt.Sprintf("p%d/%d", s, j))
		}
		for j := 0; j < c.DocBlocks; j++ {
			add(fmt.Sprintf("d%d/%d", d, j))
		}
		for j := 0; j < c.QueryBlocks; j++ {
			add(fmt.Sprintf("q%d/%d", q, j))
		}
	}
	t.Requests = t.Requests[:c.Requests]
	return t, nil
}

// checkZipfSet checks what a trace of a Zipf-popular key set needs: requests
// and a block size > 0, more than one key (the field keysName), and an
// exponent s > 0.
func checkZipfSet(requests int, blockSize int64, keysName string, keys int, s float64) error {
	switch {
	case requests <= 0:
		return fmt.Errorf("%w: Requests %d must be > 0", ErrBadConfig, requests)
	case blockSize <= 0:
		return fmt.Errorf("%w: BlockSize %d must be > 0", ErrBadConfig, blockSize)
	case keys <= 1:
		return fmt.Errorf("%w: %s %d must be > 1", ErrBadConfig, keysName, keys)
	case !(s > 0):
		return fmt.Errorf("%w: ZipfS %g must be > 0", ErrBadConfig, s)
	}
	return nil
}
