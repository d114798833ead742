package admission

import (
	"encoding/binary"
	"fmt"
	"math/bits"
)

// Sketch is the frequency estimator of the TinyLFU policy (Einziger,
// Friedman and Manes, "TinyLFU: A Highly Efficient Cache Admission
// Policy", 2017): a count-min sketch of 4-bit counters behind a doorkeeper
// Bloom filter, aged by periodic halving.
//
//   - Add(key) records one access. A key's first access in the current
//     period only sets its doorkeeper bits; later ones increment its
//     counters (conservative update: only the counters equal to the
//     current minimum are incremented, which keeps over-estimates small).
//   - Estimate(key) is the minimum of its 4 counters (at most 15), plus 1
//     when the doorkeeper has seen it: 0..16.
//   - After Period accesses the sketch ages: every counter is halved (the
//     integer part) and the doorkeeper is cleared, so a key that stops
//     being accessed decays towards 0 and a change of working set is
//     learned within about one period.
//
// A count-min sketch never under-estimates a key's accesses since the last
// halving (hash collisions only add), except that counters saturate at 15.
//
// Keys are hashed with a fixed-seed function (hashKey), so a sketch
// serialised with MarshalBinary estimates the same keys identically in
// another process (a node valuing its SSD buckets with the master's
// sketch).
//
// A Sketch is not safe for concurrent use; TinyLFU guards it with its own
// mutex.
type Sketch struct {
	rows    [sketchRows][]uint64 // 16 4-bit counters per word
	mask    uint64               // counters per row - 1 (a power of two minus 1)
	door    []uint64             // doorkeeper bits
	dmask   uint64               // doorkeeper bits - 1
	period  int64                // accesses between halvings
	samples int64                // accesses since the last halving
	resets  int64                // halvings so far
}

const (
	sketchRows    = 4
	counterMax    = 15
	doorHashes    = 3
	minSketchSize = 1 << 10
	// sketchPerObject is the counters per row per cached object: the
	// distinct keys of a period outnumber the cached objects, and with 8
	// per object a key's 4 counters are all shared with another key for
	// about 1 key in 1000 (the churn loop's over-estimates that displaced
	// a bucket all but vanished going from 4 to 8).
	sketchPerObject = 8
	// maxSketchSize bounds the counters per row (2^26: 32 MiB of counters
	// in all), whatever the configured capacity.
	maxSketchSize = 1 << 26
)

// NewSketch returns a sketch sized for a cache of capacity objects (8
// counters per object and row, at least 1024, rounded up to a power of
// two: the keys of a period outnumber the cached ones) that halves every
// period accesses. period <= 0 takes 10 x capacity, the TinyLFU paper's
// sample size.
func NewSketch(capacity int64, period int64) *Sketch {
	s := &Sketch{}
	s.resize(capacity, period)
	return s
}

func (s *Sketch) resize(capacity, period int64) {
	n := uint64(minSketchSize)
	for n < sketchPerObject*uint64(max(capacity, 0)) && n < maxSketchSize {
		n <<= 1
	}
	for i := range s.rows {
		s.rows[i] = make([]uint64, n/16)
	}
	s.mask = n - 1
	if period <= 0 {
		period = 10 * max(capacity, 1)
	}
	s.period = period
	// The doorkeeper sees every distinct key of a period: 4 bits per
	// access of the period keep its false positive rate below 15% even
	// when every access is to a new key, and 4 bits per counter of a row
	// keep it far lower for short periods.
	d := uint64(64)
	for (d < uint64(4*period) || d < 4*n) && d < 1<<32 {
		d <<= 1
	}
	s.door = make([]uint64, d/64)
	s.dmask = d - 1
	s.samples = 0
}

// Width is the number of counters per row.
func (s *Sketch) Width() int64 { return int64(s.mask + 1) }

// Period is the number of accesses between halvings.
func (s *Sketch) Period() int64 { return s.period }

// Resets is the number of halvings so far.
func (s *Sketch) Resets() int64 { return s.resets }

// SetPeriod changes the number of accesses between halvings (<= 0 leaves
// it unchanged). The doorkeeper keeps its size.
func (s *Sketch) SetPeriod(period int64) {
	if period > 0 {
		s.period = period
	}
}

// index returns the counter of row i for hash h (Kirsch-Mitzenmacher
// double hashing: h1 + i*h2).
func (s *Sketch) index(h uint64, i int) uint64 {
	h1, h2 := h, bits.RotateLeft64(h, 32)|1
	return (h1 + uint64(i)*h2) & s.mask
}

func (s *Sketch) counter(i int, j uint64) uint64 {
	return (s.rows[i][j>>4] >> ((j & 15) * 4)) & 0xf
}

func (s *Sketch) doorBits(h uint64) [doorHashes]uint64 {
	var b [doorHashes]uint64
	x := mix64(h ^ 0x5bd1e9955bd1e995)
	y := bits.RotateLeft64(x, 32) | 1
	for k := range b {
		b[k] = (x + uint64(k)*y) & s.dmask
	}
	return b
}

func (s *Sketch) inDoor(h uint64) bool {
	for _, b := range s.doorBits(h) {
		if s.door[b>>6]&(1<<(b&63)) == 0 {
			return false
		}
	}
	return true
}

// AddHash records one access of the key whose hashKey is h and reports
// whether the sketch aged (halved) as a result.
func (s *Sketch) AddHash(h uint64) bool {
	if !s.inDoor(h) {
		for _, b := range s.doorBits(h) {
			s.door[b>>6] |= 1 << (b & 63)
		}
	} else {
		var idx [sketchRows]uint64
		low := uint64(counterMax)
		for i := range idx {
			idx[i] = s.index(h, i)
			low = min(low, s.counter(i, idx[i]))
		}
		if low < counterMax {
			for i, j := range idx {
				if s.counter(i, j) == low {
					s.rows[i][j>>4] += 1 << ((j & 15) * 4)
				}
			}
		}
	}
	s.samples++
	if s.samples >= s.period {
		s.Halve()
		return true
	}
	return false
}

// Add records one access of key (a string or a byte slice).
func (s *Sketch) Add(key string) bool { return s.AddHash(hashKey(key)) }

// EstimateHash is the estimated accesses of the key whose hashKey is h
// since about one period ago: 0..16.
func (s *Sketch) EstimateHash(h uint64) uint32 {
	low := uint64(counterMax)
	for i := 0; i < sketchRows; i++ {
		low = min(low, s.counter(i, s.index(h, i)))
	}
	if s.inDoor(h) {
		low++
	}
	return uint32(low)
}

// Estimate is EstimateHash of key's hash.
func (s *Sketch) Estimate(key string) uint32 { return s.EstimateHash(hashKey(key)) }

// Halve ages the sketch: every counter is halved and the doorkeeper is
// cleared (a key seen once in the period counted 1 through its doorkeeper
// bit; halving makes that 0, as integer halving of 1 does).
func (s *Sketch) Halve() {
	for i := range s.rows {
		r := s.rows[i]
		for j := range r {
			r[j] = (r[j] >> 1) & 0x7777777777777777
		}
	}
	clear(s.door)
	s.samples = 0
	s.resets++
}

const sketchMagic = "TSKS1"

// MarshalBinary encodes the sketch (counters, doorkeeper, period and the
// accesses since the last halving) so that another process can estimate
// frequencies with it (UnmarshalBinary).
func (s *Sketch) MarshalBinary() ([]byte, error) {
	n := len(s.rows[0])
	out := make([]byte, 0, len(sketchMagic)+32+8*(sketchRows*n+len(s.door)))
	out = append(out, sketchMagic...)
	out = binary.LittleEndian.AppendUint64(out, s.mask+1)
	out = binary.LittleEndian.AppendUint64(out, s.dmask+1)
	out = binary.LittleEndian.AppendUint64(out, uint64(s.period))
	out = binary.LittleEndian.AppendUint64(out, uint64(s.samples))
	for i := range s.rows {
		for _, w := range s.rows[i] {
			out = binary.LittleEndian.AppendUint64(out, w)
		}
	}
	for _, w := range s.door {
		out = binary.LittleEndian.AppendUint64(out, w)
	}
	return out, nil
}

// UnmarshalBinary replaces s with the sketch encoded in b. A malformed
// encoding is ErrBadSketch and leaves s unchanged.
func (s *Sketch) UnmarshalBinary(b []byte) error {
	hdr := len(sketchMagic) + 32
	if len(b) < hdr || string(b[:len(sketchMagic)]) != sketchMagic {
		return fmt.Errorf("%w: missing header", ErrBadSketch)
	}
	p := b[len(sketchMagic):]
	width := binary.LittleEndian.Uint64(p)
	dbits := binary.LittleEndian.Uint64(p[8:])
	period := int64(binary.LittleEndian.Uint64(p[16:]))
	samples := int64(binary.LittleEndian.Uint64(p[24:]))
	pow2 := func(x uint64) bool { return x != 0 && x&(x-1) == 0 }
	if !pow2(width) || width < minSketchSize || width > maxSketchSize || !pow2(dbits) || dbits < 64 || dbits > 1<<32 || period <= 0 || samples < 0 {
		return fmt.Errorf("%w: width %d, doorkeeper %d bits, period %d, samples %d", ErrBadSketch, width, dbits, period, samples)
	}
	words := sketchRows*width/16 + dbits/64
	if uint64(len(b)-hdr) != 8*words {
		return fmt.Errorf("%w: %d bytes of counters, want %d", ErrBadSketch, len(b)-hdr, 8*words)
	}
	p = b[hdr:]
	var t Sketch
	for i := range t.rows {
		t.rows[i] = make([]uint64, width/16)
		for j := range t.rows[i] {
			t.rows[i][j] = binary.LittleEndian.Uint64(p)
			p = p[8:]
		}
	}
	t.door = make([]uint64, dbits/64)
	for j := range t.door {
		t.door[j] = binary.LittleEndian.Uint64(p)
		p = p[8:]
	}
	t.mask, t.dmask, t.period, t.samples = width-1, dbits-1, period, samples
	*s = t
	return nil
}

// hashKey is a fixed-seed 64-bit hash of a key: the same bytes give the
// same hash in every process, as a sketch shipped between processes needs
// (hash/maphash seeds are per process).
func hashKey[T string | []byte](k T) uint64 {
	const m = 0x9e3779b97f4a7c15
	h := uint64(len(k))*m ^ 0x243f6a8885a308d3
	i := 0
	for ; i+8 <= len(k); i += 8 {
		w := uint64(k[i]) | uint64(k[i+1])<<8 | uint64(k[i+2])<<16 | uint64(k[i+3])<<24 |
			uint64(k[i+4])<<32 | uint64(k[i+5])<<40 | uint64(k[i+6])<<48 | uint64(k[i+7])<<56
		h = bits.RotateLeft64((h^w)*m, 31)
	}
	var w uint64
	for j := 0; i < len(k); i, j = i+1, j+8 {
		w |= uint64(k[i]) << j
	}
	return mix64((h ^ w) * m)
}

// HashKey is the sketch's hash of a key given as bytes (the tier's form).
func HashKey(k []byte) uint64 { return hashKey(k) }

// HashString is the sketch's hash of a key given as a string (the master's
// form); HashString(s) == HashKey([]byte(s)).
func HashString(k string) uint64 { return hashKey(k) }

// mix64 is the splitmix64 finaliser.
func mix64(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}
