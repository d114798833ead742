package admission

import (
	"errors"
	"fmt"
	"testing"

	"pgregory.net/rapid"
)

// refCounter is the reference model of one key in a sketch without hash
// collisions: a doorkeeper bit and a saturating 4-bit counter, both halved
// (the bit cleared) at every ageing step.
type refCounter struct {
	door bool
	cm   uint32
}

func (r *refCounter) add() {
	switch {
	case !r.door:
		r.door = true
	case r.cm < counterMax:
		r.cm++
	}
}

func (r *refCounter) estimate() uint32 {
	if r.door {
		return r.cm + 1
	}
	return r.cm
}

func TestSketchCountsAndSaturates(t *testing.T) {
	s := NewSketch(1024, 1<<20)
	if got := s.Estimate("k"); got != 0 {
		t.Fatalf("unseen key estimates %d", got)
	}
	for i := 1; i <= 20; i++ {
		s.Add("k")
		want := uint32(min(i, counterMax+1))
		if got := s.Estimate("k"); got != want {
			t.Fatalf("after %d adds: estimate %d, want %d", i, got, want)
		}
	}
	if got := s.Estimate("other"); got != 0 {
		t.Fatalf("unrelated key estimates %d", got)
	}
}

func TestSketchHalvesEveryPeriod(t *testing.T) {
	s := NewSketch(1024, 10)
	for i := 0; i < 9; i++ {
		s.Add("hot")
	}
	if got := s.Estimate("hot"); got != 9 || s.Resets() != 0 {
		t.Fatalf("before the period: estimate %d, resets %d", got, s.Resets())
	}
	if !s.Add("cold") { // the 10th access ages the sketch
		t.Fatal("the period's last access did not report the halving")
	}
	// hot: counter 8 and the doorkeeper bit -> counter 4, bit cleared.
	if got := s.Estimate("hot"); got != 4 {
		t.Fatalf("after halving: hot estimates %d, want 4", got)
	}
	if got := s.Estimate("cold"); got != 0 {
		t.Fatalf("after halving: a key seen once estimates %d, want 0", got)
	}
	if s.Resets() != 1 {
		t.Fatalf("resets = %d", s.Resets())
	}
}

// TestSketchMatchesReference: with few keys in a wide sketch (no
// collisions in practice) the sketch counts exactly as the reference model,
// across ageing steps; with many keys it never counts less.
func TestSketchMatchesReference(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		nkeys := rapid.IntRange(1, 2000).Draw(t, "keys")
		exact := nkeys <= 32
		period := rapid.Int64Range(1, 300).Draw(t, "period")
		s := NewSketch(1024, period)
		ref := make([]refCounter, nkeys)
		ops := rapid.IntRange(1, 600).Draw(t, "ops")
		for i := 0; i < ops; i++ {
			k := rapid.IntRange(0, nkeys-1).Draw(t, "key")
			ref[k].add()
			if s.Add(fmt.Sprintf("key-%d", k)) {
				for j := range ref {
					ref[j].cm >>= 1
					ref[j].door = false
				}
			}
			for j := range ref {
				got, want := s.Estimate(fmt.Sprintf("key-%d", j)), ref[j].estimate()
				if got < want || (exact && got != want) {
					t.Fatalf("op %d: key-%d estimates %d, reference %d (%d keys)", i, j, got, want, nkeys)
				}
			}
		}
	})
}

func TestSketchMarshalRoundTrip(t *testing.T) {
	s := NewSketch(3000, 50)
	for i := 0; i < 130; i++ {
		s.Add(fmt.Sprintf("k%d", i%17))
	}
	b, err := s.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	var u Sketch
	if err := u.UnmarshalBinary(b); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 20; i++ {
		k := fmt.Sprintf("k%d", i)
		if a, b := s.Estimate(k), u.Estimate(k); a != b {
			t.Fatalf("%s: %d before, %d after the round trip", k, a, b)
		}
	}
	if u.Period() != s.Period() || u.Width() != s.Width() || u.samples != s.samples {
		t.Fatalf("period/width/samples %d/%d/%d, want %d/%d/%d", u.Period(), u.Width(), u.samples, s.Period(), s.Width(), s.samples)
	}
	bad := map[string][]byte{
		"empty":     nil,
		"magic":     append([]byte("XXXXX"), b[5:]...),
		"truncated": b[:len(b)-8],
		"width":     append(append([]byte{}, b[:5]...), append([]byte{3, 0, 0, 0, 0, 0, 0, 0}, b[13:]...)...),
	}
	for name, in := range bad {
		before := u.Estimate("k1")
		if err := u.UnmarshalBinary(in); !errors.Is(err, ErrBadSketch) {
			t.Errorf("%s: err %v, want ErrBadSketch", name, err)
		}
		if u.Estimate("k1") != before {
			t.Errorf("%s: a failed decode changed the sketch", name)
		}
	}
}

func TestHashStringMatchesBytes(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		b := rapid.SliceOfN(rapid.Byte(), 0, 100).Draw(t, "key")
		if HashString(string(b)) != HashKey(b) {
			t.Fatalf("hash of %q differs between string and bytes", b)
		}
	})
	if HashString("a") == HashString("b") || HashString("abcdefgh1") == HashString("abcdefgh2") {
		t.Fatal("trivial collisions")
	}
}

func TestSketchHalvingKeepsNeighbours(t *testing.T) {
	s := NewSketch(1024, 1<<20)
	for i := range s.rows {
		for j := range s.rows[i] {
			s.rows[i][j] = 0x1357_9bdf_1357_9bdf // every nibble odd, 1..15
		}
	}
	s.Halve()
	for i := range s.rows {
		for j, w := range s.rows[i] {
			if w != 0x0123_4567_0123_4567 {
				t.Fatalf("row %d word %d halved to %#x, want 0x0123456701234567", i, j, w)
			}
		}
	}
}

// TestSketchConservativeUpdate: with more keys than counters, the sketch
// over-estimates less than a plain count-min sketch over the same counter
// positions (computed here as the reference).
func TestSketchConservativeUpdate(t *testing.T) {
	s := NewSketch(0, 1<<20) // 1024 counters per row
	var plain [sketchRows][]uint32
	for i := range plain {
		plain[i] = make([]uint32, s.Width())
	}
	const keys = 3000
	truth := map[string]uint32{}
	for i := 0; i < keys; i++ {
		k := fmt.Sprintf("key-%d", i)
		n := 1 + i%4
		for j := 0; j < n; j++ {
			wasIn := s.inDoor(hashKey(k))
			s.Add(k)
			if wasIn {
				for r := 0; r < sketchRows; r++ {
					plain[r][s.index(hashKey(k), r)]++
				}
			}
		}
		truth[k] = uint32(n)
	}
	var errSketch, errPlain float64
	for k, n := range truth {
		h := hashKey(k)
		low := uint32(1 << 31)
		for r := 0; r < sketchRows; r++ {
			low = min(low, plain[r][s.index(h, r)])
		}
		est := s.Estimate(k)
		if est < min(n, counterMax+1) {
			t.Fatalf("%s: estimate %d below its %d accesses", k, est, n)
		}
		errSketch += float64(est - min(n, counterMax+1))
		if s.inDoor(h) {
			low++
		}
		errPlain += float64(low) - float64(n)
	}
	if errSketch > 0.75*errPlain {
		t.Fatalf("over-estimate %.0f, plain count-min %.0f: conservative update saves less than a quarter", errSketch, errPlain)
	}
	t.Logf("total over-estimate: %.0f (plain count-min %.0f) over %d keys", errSketch, errPlain, keys)
}
