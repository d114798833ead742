package admission

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// Shipping the sketch in chunks (issue 23 item 1). A sketch is 4 rows of
// Width/16 words of counters followed by the doorkeeper's DoorBits/64
// words; at 50 million cached objects that is 384 MiB (2^26 counters a
// row, 2^31 doorkeeper bits), far beyond one RPC message. The master sends
// it as consecutive chunks of those words (TinyLFU.SketchChunk), the node
// joins them (SketchAssembly) and uses the sketch once the last one is in.
//
// Chunks are copied from the live sketch, a few at a time under the
// policy's lock (snapshotWords per hold, a memory copy: encoding happens
// after the lock is released), so the words of one transfer come from
// different moments. Within one ageing period that is harmless: counters
// only grow between halvings, so every counter the node holds lies between
// its value when the transfer started and when it ended, and so does every
// estimate (a minimum of counters, plus the doorkeeper bit): as good as a
// copy taken at the start. A halving or a resize between two chunks would
// mix periods; each chunk names the sketch's geometry and its halvings
// (Resets), and the node starts over when they change (ErrSketchChanged).

// snapshotWords is how many words TinyLFU.SketchChunk copies per hold of
// the policy's lock (1 MiB: about 50 µs of copying).
const snapshotWords = 1 << 17

// pieceCopied, when set (tests), runs after each piece SketchChunk copies,
// with the lock released.
var pieceCopied func()

// SketchChunk is one piece of a sketch in transit: its geometry, period,
// halvings so far, and the words [Offset, Offset+len(Data)/8) of its
// encoding (rows, then the doorkeeper), little-endian.
type SketchChunk struct {
	// Version identifies the transfer (the master's sketch version when
	// its first chunk was taken); the node echoes it.
	Version  uint64
	Width    uint64 // counters per row
	DoorBits uint64 // doorkeeper bits
	Period   int64  // accesses between halvings
	Samples  int64  // accesses since the last halving
	Resets   int64  // halvings so far: a change starts the transfer again
	Offset   uint64 // first word of Data
	Total    uint64 // words of the whole sketch
	Data     []byte
}

// sketchWords is the number of words of a sketch of the given geometry.
func sketchWords(width, doorBits uint64) uint64 { return sketchRows*width/16 + doorBits/64 }

// SketchChunk returns the words of the policy's sketch from word offset
// on, at most maxBytes of them (rounded down to whole words, at least
// one). An offset at or beyond the end of the sketch (it shrank, or the
// caller is confused) answers the chunk at offset 0. The words are copied
// under the lock a snapshotWords piece at a time and encoded after; a
// halving or a resize during the copy ends the chunk early, at the last
// word copied before it.
func (p *TinyLFU) SketchChunk(offset uint64, maxBytes int) SketchChunk {
	limit := uint64(max(maxBytes/8, 1))
	var c SketchChunk
	var words []uint64
	for {
		p.mu.Lock()
		sk := p.sk
		width, door := sk.Width(), uint64(len(sk.door))*64
		total := sketchWords(uint64(width), door)
		if words == nil {
			if offset >= total {
				offset = 0
			}
			c = SketchChunk{Width: uint64(width), DoorBits: door, Resets: sk.resets, Offset: offset, Total: total}
			words = make([]uint64, 0, min(limit, total-offset))
		} else if c.Width != uint64(width) || c.DoorBits != door || c.Resets != sk.resets {
			p.mu.Unlock()
			break // the sketch halved or was resized: the chunk ends here
		}
		c.Period, c.Samples = sk.period, sk.samples
		from := offset + uint64(len(words))
		n := min(snapshotWords, limit-uint64(len(words)), total-from)
		words = sk.appendWords(words, from, n)
		p.mu.Unlock()
		if pieceCopied != nil {
			pieceCopied()
		}
		if uint64(len(words)) == limit || offset+uint64(len(words)) == total {
			break
		}
	}
	c.Data = make([]byte, 8*len(words))
	for i, w := range words {
		binary.LittleEndian.PutUint64(c.Data[8*i:], w)
	}
	return c
}

// appendWords appends n words of s's encoding from word from on (rows,
// then doorkeeper) to out. Caller holds whatever guards s.
func (s *Sketch) appendWords(out []uint64, from, n uint64) []uint64 {
	row := uint64(len(s.rows[0]))
	for n > 0 {
		var src []uint64
		if r := from / row; r < sketchRows {
			src = s.rows[r][from%row:]
		} else {
			src = s.door[from-sketchRows*row:]
		}
		k := min(n, uint64(len(src)))
		out = append(out, src[:k]...)
		from, n = from+k, n-k
	}
	return out
}

// ErrSketchChanged: a chunk does not continue the transfer being joined
// (another geometry, another halving, or not the next word); the joiner
// starts over, from the chunk at offset 0.
var ErrSketchChanged = errors.New("admission: sketch changed during its transfer")

// SketchAssembly joins the chunks of one sketch transfer. The zero value
// is empty. Not safe for concurrent use.
type SketchAssembly struct {
	c    SketchChunk // geometry, version and halvings of the transfer (Data unused)
	sk   *Sketch
	next uint64 // words received
}

// Transfer returns the version of the transfer being joined and the words
// received so far; (0, 0) when none is in progress.
func (a *SketchAssembly) Transfer() (version, next uint64) {
	if a.sk == nil {
		return 0, 0
	}
	return a.c.Version, a.next
}

// Reset drops the transfer in progress.
func (a *SketchAssembly) Reset() { *a = SketchAssembly{} }

// Add takes the next chunk. A chunk at offset 0 starts a transfer
// (dropping any in progress). It returns the sketch once its last word is
// in (and the assembly is empty again), nil before. A malformed chunk is
// ErrBadSketch, one that does not continue the transfer ErrSketchChanged;
// both drop the transfer in progress.
func (a *SketchAssembly) Add(c SketchChunk) (*Sketch, error) {
	if err := checkChunk(c); err != nil {
		a.Reset()
		return nil, err
	}
	if c.Offset == 0 {
		s := &Sketch{}
		for i := range s.rows {
			s.rows[i] = make([]uint64, c.Width/16)
		}
		s.door = make([]uint64, c.DoorBits/64)
		s.mask, s.dmask = c.Width-1, c.DoorBits-1
		*a = SketchAssembly{c: c, sk: s}
		a.c.Data = nil
	} else if a.sk == nil || c.Offset != a.next || c.Width != a.c.Width || c.DoorBits != a.c.DoorBits || c.Resets != a.c.Resets || c.Version != a.c.Version {
		got, _ := a.Transfer()
		a.Reset()
		return nil, fmt.Errorf("%w: chunk of transfer %d at word %d (%d resets, width %d), joining transfer %d at word %d",
			ErrSketchChanged, c.Version, c.Offset, c.Resets, c.Width, got, a.next)
	}
	s, row := a.sk, c.Width/16
	for i := 0; i < len(c.Data); i += 8 {
		w, at := binary.LittleEndian.Uint64(c.Data[i:]), a.next
		if r := at / row; r < sketchRows {
			s.rows[r][at%row] = w
		} else {
			s.door[at-sketchRows*row] = w
		}
		a.next++
	}
	s.period, s.samples, s.resets = c.Period, c.Samples, c.Resets
	if a.next < c.Total {
		return nil, nil
	}
	a.Reset()
	return s, nil
}

// checkChunk validates a chunk's geometry and bounds.
func checkChunk(c SketchChunk) error {
	pow2 := func(x uint64) bool { return x != 0 && x&(x-1) == 0 }
	switch {
	case !pow2(c.Width) || c.Width < minSketchSize || c.Width > maxSketchSize || !pow2(c.DoorBits) || c.DoorBits < 64 || c.DoorBits > 1<<32 || c.Period <= 0 || c.Samples < 0 || c.Resets < 0:
		return fmt.Errorf("%w: chunk of width %d, doorkeeper %d bits, period %d, samples %d, resets %d", ErrBadSketch, c.Width, c.DoorBits, c.Period, c.Samples, c.Resets)
	case c.Total != sketchWords(c.Width, c.DoorBits):
		return fmt.Errorf("%w: chunk says %d words, its geometry %d", ErrBadSketch, c.Total, sketchWords(c.Width, c.DoorBits))
	case len(c.Data)%8 != 0 || len(c.Data) == 0 || c.Offset+uint64(len(c.Data)/8) > c.Total:
		return fmt.Errorf("%w: chunk of %d bytes at word %d of %d", ErrBadSketch, len(c.Data), c.Offset, c.Total)
	}
	return nil
}
