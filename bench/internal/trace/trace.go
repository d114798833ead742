package trace

import (
	"bufio"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
)

// Request is one access: a lookup of Key, stored with Size bytes on a miss.
type Request struct {
	Key  string
	Size int64
}

// Trace is a named sequence of requests.
type Trace struct {
	Name     string
	Requests []Request
}

// Stats summarises a trace.
type Stats struct {
	Requests    int
	UniqueKeys  int
	UniqueBytes int64 // sum of the first-seen size of every distinct key
	TotalBytes  int64 // sum of the size of every request
}

// Stats computes the summary of t.
func (t *Trace) Stats() Stats {
	seen := make(map[string]struct{}, len(t.Requests)/2)
	var s Stats
	s.Requests = len(t.Requests)
	for _, r := range t.Requests {
		s.TotalBytes += r.Size
		if _, ok := seen[r.Key]; !ok {
			seen[r.Key] = struct{}{}
			s.UniqueBytes += r.Size
		}
	}
	s.UniqueKeys = len(seen)
	return s
}

// ScanConfig configures Scan.
type ScanConfig struct {
	// WorkingSet is the total bytes of distinct objects scanned per pass.
	WorkingSet int64
	// ObjectSize is the size of each object.
	ObjectSize int64
	// Passes is the number of sequential passes.
	Passes int
}

// Scan returns Passes sequential passes over WorkingSet/ObjectSize objects,
// keys "scan/000000", "scan/000001", ... in the same order every pass.
func Scan(c ScanConfig) (*Trace, error) { return passes("scan", c) }

// Loop is Scan under the name "loop", keys "loop/000000", ...: the churn
// benchmark sizes it a little larger than DRAM and SSD together, where Scan
// is twice the SSD.
func Loop(c ScanConfig) (*Trace, error) { return passes("loop", c) }

func passes(name string, c ScanConfig) (*Trace, error) {
	if c.ObjectSize <= 0 {
		return nil, fmt.Errorf("%w: ObjectSize %d must be > 0", ErrBadConfig, c.ObjectSize)
	}
	if c.WorkingSet < c.ObjectSize {
		return nil, fmt.Errorf("%w: WorkingSet %d must be >= ObjectSize %d", ErrBadConfig, c.WorkingSet, c.ObjectSize)
	}
	if c.Passes <= 0 {
		return nil, fmt.Errorf("%w: Passes %d must be > 0", ErrBadConfig, c.Passes)
	}
	n := int(c.WorkingSet / c.ObjectSize)
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("%s/%06d", name, i)
	}
	t := &Trace{Name: name, Requests: make([]Request, 0, n*c.Passes)}
	for p := 0; p < c.Passes; p++ {
		for _, k := range keys {
			t.Requests = append(t.Requests, Request{Key: k, Size: c.ObjectSize})
		}
	}
	return t, nil
}

// ConvConfig configures Conversations and Mixed.
type ConvConfig struct {
	// Seed makes the trace reproducible.
	Seed uint64
	// Requests is the number of requests to emit (the trace is cut there).
	Requests int
	// BlockSize is the size of every block (one KV-cache block = one object).
	BlockSize int64
	// Sessions is the number of concurrent conversation slots; a slot's
	// popularity follows Zipf(ZipfS) by slot rank.
	Sessions int
	// ZipfS is the Zipf exponent (> 1). Default 1.2.
	ZipfS float64
	// PrefixBlocks is the length in blocks of the system prefix shared by
	// every session. Default 4.
	PrefixBlocks int
	// TurnBlocks is the number of blocks each turn appends to a
	// conversation (user message and answer). Default 2.
	TurnBlocks int
	// MaxTurns ends a conversation; its slot restarts as a new conversation
	// with fresh keys. Default 8.
	MaxTurns int
	// OneHitFraction (Mixed only) is the fraction of requests that are
	// one-hit wonders, emitted in bursts of OneHitBurst blocks. Default 0.5
	// and 8.
	OneHitFraction float64
	OneHitBurst    int
}

func (c *ConvConfig) defaults() error {
	if c.ZipfS == 0 {
		c.ZipfS = 1.2
	}
	if c.PrefixBlocks == 0 {
		c.PrefixBlocks = 4
	}
	if c.TurnBlocks == 0 {
		c.TurnBlocks = 2
	}
	if c.MaxTurns == 0 {
		c.MaxTurns = 8
	}
	if c.OneHitFraction == 0 {
		c.OneHitFraction = 0.5
	}
	if c.OneHitBurst == 0 {
		c.OneHitBurst = 8
	}
	switch {
	case c.Requests <= 0:
		return fmt.Errorf("%w: Requests %d must be > 0", ErrBadConfig, c.Requests)
	case c.BlockSize <= 0:
		return fmt.Errorf("%w: BlockSize %d must be > 0", ErrBadConfig, c.BlockSize)
	case c.Sessions <= 0:
		return fmt.Errorf("%w: Sessions %d must be > 0", ErrBadConfig, c.Sessions)
	case c.ZipfS <= 1:
		return fmt.Errorf("%w: ZipfS %g must be > 1", ErrBadConfig, c.ZipfS)
	case c.PrefixBlocks < 0:
		return fmt.Errorf("%w: PrefixBlocks %d must be >= 0", ErrBadConfig, c.PrefixBlocks)
	case c.TurnBlocks <= 0:
		return fmt.Errorf("%w: TurnBlocks %d must be > 0", ErrBadConfig, c.TurnBlocks)
	case c.MaxTurns <= 0:
		return fmt.Errorf("%w: MaxTurns %d must be > 0", ErrBadConfig, c.MaxTurns)
	case c.OneHitFraction < 0 || c.OneHitFraction >= 1:
		return fmt.Errorf("%w: OneHitFraction %g must be in [0, 1)", ErrBadConfig, c.OneHitFraction)
	case c.OneHitBurst <= 0:
		return fmt.Errorf("%w: OneHitBurst %d must be > 0", ErrBadConfig, c.OneHitBurst)
	}
	return nil
}

// Conversations returns a multi-turn conversation trace. Each step picks a
// session slot by Zipf popularity and emits its next prompt: the shared
// prefix blocks "sys/<i>", then the conversation's blocks "c<id>/<j>" for
// every block of the history plus the TurnBlocks new ones, in order, as a
// prefix cache looks them up.
func Conversations(c ConvConfig) (*Trace, error) {
	if err := c.defaults(); err != nil {
		return nil, err
	}
	t := &Trace{Name: "conversations"}
	g := newConvGen(c)
	for len(t.Requests) < c.Requests {
		g.turn(&t.Requests)
	}
	t.Requests = t.Requests[:c.Requests]
	return t, nil
}

// Mixed returns Conversations interleaved with one-hit wonders: before each
// prompt, with the probability that makes OneHitFraction of all requests
// one-hit, a burst of OneHitBurst never-repeated blocks "ohw/<n>".
func Mixed(c ConvConfig) (*Trace, error) {
	if err := c.defaults(); err != nil {
		return nil, err
	}
	t := &Trace{Name: "mixed"}
	g := newConvGen(c)
	var oneHit, conv int
	n := 0
	for len(t.Requests) < c.Requests {
		// Keep the running share of one-hit requests at OneHitFraction.
		if float64(oneHit) < c.OneHitFraction*float64(oneHit+conv) {
			for i := 0; i < c.OneHitBurst; i++ {
				t.Requests = append(t.Requests, Request{Key: fmt.Sprintf("ohw/%d", n), Size: c.BlockSize})
				n++
			}
			oneHit += c.OneHitBurst
			continue
		}
		before := len(t.Requests)
		g.turn(&t.Requests)
		conv += len(t.Requests) - before
	}
	t.Requests = t.Requests[:c.Requests]
	return t, nil
}

// ZipfBurstConfig configures ZipfBursts.
type ZipfBurstConfig struct {
	// Seed makes the trace reproducible.
	Seed uint64
	// Requests is the number of requests (bursts included).
	Requests int
	// Keys is the number of keys of the Zipf-popular set.
	Keys int
	// Name is the trace's name. Default "zipf-bursts".
	Name string
	// ZipfS is the Zipf exponent (> 0). Default 1.1. Exponents above 1
	// draw with math/rand's Zipf, the others from the cumulative
	// distribution (zipfTable): the traces of exponents above 1 stay those
	// of earlier runs.
	ZipfS float64
	// BlockSize is the size of every object.
	BlockSize int64
	// BurstEvery is the number of Zipf requests between two bursts.
	BurstEvery int
	// BurstLen is the number of one-off keys in a burst.
	BurstLen int
}

// ZipfBursts returns requests to Keys keys "z/<rank>" drawn from a Zipf
// popularity, interrupted every BurstEvery requests by a burst of
// BurstLen keys "b/<n>" that are requested once and never again (a batch
// job or a one-off long document passing through the cache).
func ZipfBursts(c ZipfBurstConfig) (*Trace, error) {
	if c.ZipfS == 0 {
		c.ZipfS = 1.1
	}
	if c.Name == "" {
		c.Name = "zipf-bursts"
	}
	if err := checkZipfSet(c.Requests, c.BlockSize, "Keys", c.Keys, c.ZipfS); err != nil {
		return nil, err
	}
	switch {
	case c.BurstEvery <= 0:
		return nil, fmt.Errorf("%w: BurstEvery %d must be > 0", ErrBadConfig, c.BurstEvery)
	case c.BurstLen < 0:
		return nil, fmt.Errorf("%w: BurstLen %d must be >= 0", ErrBadConfig, c.BurstLen)
	}
	r := rand.New(rand.NewPCG(c.Seed, c.Seed^0x6a09e667f3bcc909))
	z := newRanker(r, c.ZipfS, c.Keys)
	t := &Trace{Name: c.Name, Requests: make([]Request, 0, c.Requests)}
	burst, since := 0, 0
	for len(t.Requests) < c.Requests {
		if since == c.BurstEvery {
			for i := 0; i < c.BurstLen; i++ {
				t.Requests = append(t.Requests, Request{Key: fmt.Sprintf("b/%d", burst), Size: c.BlockSize})
				burst++
			}
			since = 0
			continue
		}
		t.Requests = append(t.Requests, Request{Key: fmt.Sprintf("z/%d", z.Uint64()), Size: c.BlockSize})
		since++
	}
	t.Requests = t.Requests[:c.Requests]
	return t, nil
}

type convGen struct {
	c      ConvConfig
	zipf   *rand.Zipf
	id     []int // conversation id per slot
	turns  []int // turns done per slot
	nextID int
}

func newConvGen(c ConvConfig) *convGen {
	r := rand.New(rand.NewPCG(c.Seed, c.Seed^0x9e3779b97f4a7c15))
	g := &convGen{
		c:     c,
		zipf:  rand.NewZipf(r, c.ZipfS, 1, uint64(c.Sessions-1)),
		id:    make([]int, c.Sessions),
		turns: make([]int, c.Sessions),
	}
	for i := range g.id {
		g.id[i] = i
	}
	g.nextID = c.Sessions
	return g
}

func (g *convGen) turn(out *[]Request) {
	s := int(g.zipf.Uint64())
	for i := 0; i < g.c.PrefixBlocks; i++ {
		*out = append(*out, Request{Key: fmt.Sprintf("sys/%d", i), Size: g.c.BlockSize})
	}
	g.turns[s]++
	blocks := g.turns[s] * g.c.TurnBlocks
	for j := 0; j < blocks; j++ {
		*out = append(*out, Request{Key: fmt.Sprintf("c%d/%d", g.id[s], j), Size: g.c.BlockSize})
	}
	if g.turns[s] >= g.c.MaxTurns {
		g.id[s] = g.nextID
		g.nextID++
		g.turns[s] = 0
	}
}

// ReadFile reads a trace file (see the package doc for the format).
func ReadFile(path string) (*Trace, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("trace: open %s: %w", path, err)
	}
	defer f.Close()
	t, err := Read(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	t.Name = "file:" + path
	return t, nil
}

// Read parses a trace from r.
func Read(r io.Reader) (*Trace, error) {
	t := &Trace{Name: "file"}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	line := 0
	for sc.Scan() {
		line++
		s := strings.TrimSpace(sc.Text())
		if s == "" || strings.HasPrefix(s, "#") {
			continue
		}
		f := strings.Fields(s)
		if len(f) != 2 {
			return nil, fmt.Errorf("%w: line %d: want \"key size\", got %d fields", ErrBadLine, line, len(f))
		}
		size, err := strconv.ParseInt(f[1], 10, 64)
		if err != nil || size <= 0 {
			return nil, fmt.Errorf("%w: line %d: size %q is not a positive integer", ErrBadLine, line, f[1])
		}
		t.Requests = append(t.Requests, Request{Key: f[0], Size: size})
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("trace: line %d: %w", line+1, err)
	}
	if len(t.Requests) == 0 {
		return nil, ErrEmpty
	}
	return t, nil
}

// Write writes t in the trace file format, so a generated trace can be saved
// and replayed later.
func Write(w io.Writer, t *Trace) error {
	bw := bufio.NewWriter(w)
	for _, r := range t.Requests {
		if _, err := fmt.Fprintf(bw, "%s %d\n", r.Key, r.Size); err != nil {
			return fmt.Errorf("trace: write: %w", err)
		}
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("trace: write: %w", err)
	}
	return nil
}
