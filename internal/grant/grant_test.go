package grant

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func secret(t testing.TB) Secret {
	s, err := NewSecret()
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// The grant the master signs for a read works for that read and no other:
// another node, key, segment, offset or length, another secret, a forged
// or truncated grant are ErrForged or ErrMissing; a genuine grant past its
// expiry (and the skew) is ErrExpired; a rotation keeps the previous
// secret's grants valid.
func TestGrant(t *testing.T) {
	cur, other := secret(t), secret(t)
	s := NewSigner(cur)
	v := NewVerifier(cur)
	now := time.Now()
	dram := Scope{Node: "n1", Key: []byte("layer0/blk42"), Segment: "n1-seg", Offset: 4096, Length: 1 << 20}
	ssd := Scope{Node: "n1", Key: []byte("layer0/blk42"), Length: 1 << 20}
	for _, sc := range []Scope{dram, ssd} {
		g := s.Sign(sc, now.Add(30*time.Second))
		if err := v.Verify(sc, g[:], now); err != nil {
			t.Fatalf("the right grant refused: %v", err)
		}
	}
	g := s.Sign(dram, now.Add(30*time.Second))
	wrong := map[string]Scope{}
	for name, f := range map[string]func(*Scope){
		"node":    func(sc *Scope) { sc.Node = "n2" },
		"key":     func(sc *Scope) { sc.Key = []byte("layer0/blk43") },
		"segment": func(sc *Scope) { sc.Segment = "n1-seg2" },
		"offset":  func(sc *Scope) { sc.Offset += 4096 },
		"length":  func(sc *Scope) { sc.Length++ },
		"ssd":     func(sc *Scope) { sc.Segment, sc.Offset = "", 0 },
		"token":   func(sc *Scope) { sc.Token = 1 },
		"kind":    func(sc *Scope) { sc.Kind = Write },
		// Length prefixes: moving bytes from one field to the next is
		// another scope.
		"shifted": func(sc *Scope) { sc.Node, sc.Segment = "n1n", "1-seg" },
	} {
		sc := dram
		sc.Key = append([]byte(nil), dram.Key...)
		f(&sc)
		wrong[name] = sc
	}
	for name, sc := range wrong {
		if err := v.Verify(sc, g[:], now); !errors.Is(err, ErrForged) {
			t.Errorf("a grant used for another %s: %v, want ErrForged", name, err)
		}
	}
	if err := NewVerifier(other).Verify(dram, g[:], now); !errors.Is(err, ErrForged) {
		t.Errorf("a grant of another secret: %v, want ErrForged", err)
	}
	forged := g
	forged[Size-1] ^= 1
	if err := v.Verify(dram, forged[:], now); !errors.Is(err, ErrForged) {
		t.Errorf("a grant with a flipped bit: %v, want ErrForged", err)
	}
	later := g
	later[0]++ // a later expiry with the old MAC
	if err := v.Verify(dram, later[:], now); !errors.Is(err, ErrForged) {
		t.Errorf("a grant with its expiry moved: %v, want ErrForged", err)
	}
	for _, bad := range [][]byte{nil, g[:Size-1], append(g[:], 0)} {
		if err := v.Verify(dram, bad, now); !errors.Is(err, ErrMissing) {
			t.Errorf("a grant of %d bytes: %v, want ErrMissing", len(bad), err)
		}
	}
	old := s.Sign(dram, now.Add(-time.Second))
	if err := v.Verify(dram, old[:], now); err != nil {
		t.Errorf("a grant expired within the skew refused: %v", err)
	}
	old = s.Sign(dram, now.Add(-v.Skew-time.Second))
	if err := v.Verify(dram, old[:], now); !errors.Is(err, ErrExpired) {
		t.Errorf("an expired grant: %v, want ErrExpired", err)
	}
	rot := NewVerifier(other, cur)
	if err := rot.Verify(dram, g[:], now); err != nil {
		t.Errorf("a grant of the previous secret during a rotation: %v", err)
	}
	if g2 := NewSigner(other).Sign(dram, now.Add(time.Minute)); rot.Verify(dram, g2[:], now) != nil {
		t.Errorf("a grant of the new secret refused during a rotation")
	}
}

// A write grant binds the put's range, its token, key and node, and its
// kind: a read grant of the same fields is no write grant and a write
// grant no read grant (the two domains), each field moved is ErrForged, and
// a genuine write grant past its expiry is ErrExpired.
func TestWriteGrant(t *testing.T) {
	cur := secret(t)
	s := NewSigner(cur)
	v := NewVerifier(cur)
	now := time.Now()
	w := Scope{Kind: Write, Node: "n1", Key: []byte("layer0/blk42"), Segment: "n1-seg", Offset: 4096, Length: 1 << 20, Token: 7 << 22}
	g := s.Sign(w, now.Add(30*time.Second))
	if err := v.Verify(w, g[:], now); err != nil {
		t.Fatalf("the right write grant refused: %v", err)
	}
	for name, f := range map[string]func(*Scope){
		"kind (a write grant used for a read)": func(sc *Scope) { sc.Kind = Read },
		"unknown kind":                         func(sc *Scope) { sc.Kind = Write + 1 },
		"node":                                 func(sc *Scope) { sc.Node = "n2" },
		"key":                                  func(sc *Scope) { sc.Key = []byte("layer0/blk43") },
		"no key":                               func(sc *Scope) { sc.Key = nil },
		"segment":                              func(sc *Scope) { sc.Segment = "n1-seg2" },
		"offset":                               func(sc *Scope) { sc.Offset += 4096 },
		"length":                               func(sc *Scope) { sc.Length++ },
		"token":                                func(sc *Scope) { sc.Token++ },
		"larger token":                         func(sc *Scope) { sc.Token = 1<<63 - 1 },
	} {
		sc := w
		f(&sc)
		if err := v.Verify(sc, g[:], now); !errors.Is(err, ErrForged) {
			t.Errorf("a write grant used for another %s: %v, want ErrForged", name, err)
		}
	}
	// The other direction: a read grant of the same fields (token 0, as
	// the master signs reads, or the put's) is no write grant.
	for _, tok := range []uint64{0, w.Token} {
		r := w
		r.Kind, r.Token = Read, tok
		rg := s.Sign(r, now.Add(30*time.Second))
		if err := v.Verify(r, rg[:], now); err != nil {
			t.Fatalf("the read grant refused as a read grant: %v", err)
		}
		wr := w
		wr.Token = tok
		if err := v.Verify(wr, rg[:], now); !errors.Is(err, ErrForged) {
			t.Errorf("a read grant (token %d) used for a write: %v, want ErrForged", tok, err)
		}
	}
	old := s.Sign(w, now.Add(-v.Skew-time.Second))
	if err := v.Verify(w, old[:], now); !errors.Is(err, ErrExpired) || !strings.Contains(err.Error(), "write of") {
		t.Errorf("an expired write grant: %v, want ErrExpired naming the write", err)
	}
	if err := v.Verify(w, nil, now); !errors.Is(err, ErrMissing) || !strings.Contains(err.Error(), "put token 29360128") {
		t.Errorf("a write without a grant: %v, want ErrMissing naming the put token", err)
	}
	if err := NewVerifier(secret(t), cur).Verify(w, g[:], now); err != nil {
		t.Errorf("a write grant of the previous secret during a rotation: %v", err)
	}
}

// The cost of checking a grant on a read (docs/security.md: about a
// microsecond).
func BenchmarkVerify(b *testing.B) {
	s := secret(b)
	v := NewVerifier(s)
	sc := Scope{Node: "node-7", Key: []byte("vllm/model-x/tp0/layer12/blockhash-0123456789abcdef"), Segment: "node-7-seg", Offset: 1 << 30, Length: 2 << 20}
	now := time.Now()
	g := NewSigner(s).Sign(sc, now.Add(time.Minute))
	b.ReportAllocs()
	for b.Loop() {
		if err := v.Verify(sc, g[:], now); err != nil {
			b.Fatal(err)
		}
	}
}

// The cost of signing one grant (the master, per replica of a lookup).
func BenchmarkSign(b *testing.B) {
	s := NewSigner(secret(b))
	sc := Scope{Node: "node-7", Key: []byte("vllm/model-x/tp0/layer12/blockhash-0123456789abcdef"), Segment: "node-7-seg", Offset: 1 << 30, Length: 2 << 20}
	exp := time.Now().Add(time.Minute)
	b.ReportAllocs()
	for b.Loop() {
		_ = s.Sign(sc, exp)
	}
}
