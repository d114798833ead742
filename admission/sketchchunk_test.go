package admission

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"
)

// joinChunks fetches p's sketch in chunks of maxBytes and joins them.
func joinChunks(t *testing.T, p *TinyLFU, maxBytes int) (*Sketch, int) {
	t.Helper()
	var a SketchAssembly
	off := uint64(0)
	for n := 1; n < 1<<20; n++ {
		sk, err := a.Add(p.SketchChunk(off, maxBytes))
		if err != nil {
			t.Fatal(err)
		}
		if sk != nil {
			return sk, n
		}
		_, off = a.Transfer()
	}
	t.Fatal("transfer never ended")
	return nil, 0
}

// TestSketchChunksJoin: a sketch shipped in chunks of any size (a word,
// a piece of a row, several rows) estimates every key exactly as the
// policy does, and MarshalSketch agrees.
func TestSketchChunksJoin(t *testing.T) {
	p := NewTinyLFU(TinyLFUConfig{MinPopulation: 4096})
	for i := range 20000 {
		p.ObserveLookup(fmt.Sprintf("k%d", i%3000), Miss, 0)
	}
	total := sketchWords(uint64(p.sk.Width()), uint64(len(p.sk.door))*64)
	for _, size := range []int{8, 4096, 8 * snapshotWords / 3, 1 << 30} {
		if size == 8 && total > 1<<16 {
			size = 8 * int(total/7) // a word a chunk is too slow; odd-sized chunks instead
		}
		sk, n := joinChunks(t, p, size)
		for i := range 3000 {
			k := fmt.Sprintf("k%d", i)
			if sk.Estimate(k) != p.Estimate(k) {
				t.Fatalf("chunks of %d bytes (%d chunks): %s estimates %d, the policy %d", size, n, k, sk.Estimate(k), p.Estimate(k))
			}
		}
		if sk.Period() != p.sk.Period() || sk.Resets() != p.sk.Resets() {
			t.Fatalf("period %d resets %d, want %d %d", sk.Period(), sk.Resets(), p.sk.Period(), p.sk.Resets())
		}
	}
	b, err := p.MarshalSketch()
	if err != nil {
		t.Fatal(err)
	}
	var sk Sketch
	if err := sk.UnmarshalBinary(b); err != nil || sk.Estimate("k7") != p.Estimate("k7") {
		t.Fatalf("MarshalSketch: %v, estimate %d want %d", err, sk.Estimate("k7"), p.Estimate("k7"))
	}
}

// TestSketchChunkAfterHalving: a chunk taken after the sketch halved does
// not continue a transfer begun before (ErrSketchChanged), and the
// transfer started again yields the halved sketch.
func TestSketchChunkAfterHalving(t *testing.T) {
	p := NewTinyLFU(TinyLFUConfig{MinPopulation: 4096})
	for i := range 1000 {
		p.ObserveLookup(fmt.Sprintf("k%d", i%100), Miss, 0)
	}
	var a SketchAssembly
	if sk, err := a.Add(p.SketchChunk(0, 4096)); sk != nil || err != nil {
		t.Fatalf("first chunk: %v %v", sk, err)
	}
	before := p.sk.Resets()
	for p.sk.Resets() == before {
		p.ObserveLookup("x", Miss, 0)
	}
	_, off := a.Transfer()
	if _, err := a.Add(p.SketchChunk(off, 4096)); !errors.Is(err, ErrSketchChanged) {
		t.Fatalf("chunk after a halving: %v, want ErrSketchChanged", err)
	}
	if v, n := a.Transfer(); v != 0 || n != 0 {
		t.Fatalf("transfer still in progress after the change: %d %d", v, n)
	}
	sk, _ := joinChunks(t, p, 1<<20)
	if sk.Resets() != p.sk.Resets() || sk.Estimate("k1") != p.Estimate("k1") {
		t.Fatalf("after the restart: resets %d estimate %d, want %d %d", sk.Resets(), sk.Estimate("k1"), p.sk.Resets(), p.Estimate("k1"))
	}
}

// TestSketchChunkMalformed: bad geometry, a wrong total, or data beyond
// the end are ErrBadSketch, and drop the transfer in progress.
func TestSketchChunkMalformed(t *testing.T) {
	p := NewTinyLFU(TinyLFUConfig{})
	good := p.SketchChunk(0, 4096)
	bad := []func(c *SketchChunk){
		func(c *SketchChunk) { c.Width = 1000 },
		func(c *SketchChunk) { c.DoorBits = 3 },
		func(c *SketchChunk) { c.Total++ },
		func(c *SketchChunk) { c.Data = c.Data[:7] },
		func(c *SketchChunk) { c.Offset = c.Total - 1 },
		func(c *SketchChunk) { c.Period = 0 },
	}
	for i, mut := range bad {
		var a SketchAssembly
		if _, err := a.Add(good); err != nil {
			t.Fatal(err)
		}
		c := good
		c.Data = append([]byte(nil), good.Data...)
		mut(&c)
		if _, err := a.Add(c); !errors.Is(err, ErrBadSketch) {
			t.Fatalf("case %d: %v, want ErrBadSketch", i, err)
		}
		if v, n := a.Transfer(); v != 0 || n != 0 {
			t.Fatalf("case %d: transfer kept", i)
		}
	}
}

// BenchmarkSketchCopyStall: how long a lookup (ObserveLookup, which takes
// the policy's lock) can wait while the whole sketch is copied out for a
// node, side by side: "whole" encodes it under the lock in one go (protocol
// version 1's MarshalSketch), "chunks" copies it as SketchChunk does (1 MiB
// per hold of the lock, encoded outside). The sketch is sized for
// TIERSTORE_SKETCH_POPULATION cached objects (default 50 million: 384 MiB).
// longest-lookup-ms is the longest lookup seen during the copies.
// go test -run '^$' -bench SketchCopyStall -benchtime 2x ./admission
func BenchmarkSketchCopyStall(b *testing.B) {
	population := int64(50_000_000)
	if v, err := strconv.ParseInt(os.Getenv("TIERSTORE_SKETCH_POPULATION"), 10, 64); err == nil && v > 0 {
		population = v
	}
	p := NewTinyLFU(TinyLFUConfig{MinPopulation: population})
	copies := map[string]func(){
		"whole": func() {
			p.mu.Lock()
			_, _ = p.sk.MarshalBinary()
			p.mu.Unlock()
		},
		"chunks": func() {
			for off := uint64(0); ; {
				c := p.SketchChunk(off, 16<<20)
				off = c.Offset + uint64(len(c.Data)/8)
				if off == c.Total {
					return
				}
			}
		},
	}
	for _, name := range []string{"whole", "chunks"} {
		b.Run(name, func(b *testing.B) {
			stop, done := make(chan struct{}), make(chan int64)
			go func() {
				var longest int64
				for i := 0; ; i++ {
					select {
					case <-stop:
						done <- longest
						return
					default:
					}
					t0 := time.Now()
					p.ObserveLookup(strconv.Itoa(i), Miss, 0)
					longest = max(longest, int64(time.Since(t0)))
				}
			}()
			for range b.N {
				copies[name]()
			}
			close(stop)
			b.ReportMetric(float64(<-done)/1e6, "longest-lookup-ms")
			b.ReportMetric(float64(8*sketchWords(uint64(p.sk.Width()), uint64(len(p.sk.door))*64)), "sketch-bytes")
		})
	}
}

// TestSketchChunkEndsAtHalving: a halving while a chunk is being copied
// (between two of its pieces) ends the chunk at the last word copied
// before it, so no chunk mixes two periods; the next chunk names the new
// halving count and the joiner starts over.
func TestSketchChunkEndsAtHalving(t *testing.T) {
	p := NewTinyLFU(TinyLFUConfig{MinPopulation: 1 << 16}) // 4 rows of 2^19 counters: 16 pieces
	for i := range 1000 {
		p.ObserveLookup(fmt.Sprintf("k%d", i%100), Miss, 0)
	}
	resets := p.sk.Resets()
	pieces := 0
	pieceCopied = func() {
		if pieces++; pieces == 1 {
			p.mu.Lock()
			p.sk.Halve()
			p.mu.Unlock()
		}
	}
	defer func() { pieceCopied = nil }()
	c := p.SketchChunk(0, 1<<30)
	if len(c.Data) != 8*snapshotWords || c.Resets != resets {
		t.Fatalf("chunk of %d bytes with %d resets, want the first piece (%d bytes) of the period before the halving (%d)", len(c.Data), c.Resets, 8*snapshotWords, resets)
	}
	var a SketchAssembly
	if _, err := a.Add(c); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Add(p.SketchChunk(uint64(len(c.Data)/8), 1<<30)); !errors.Is(err, ErrSketchChanged) {
		t.Fatalf("the chunk after the halving: %v, want ErrSketchChanged", err)
	}
}
