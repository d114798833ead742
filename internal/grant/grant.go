package grant

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"sync"
	"time"

	"github.com/tierstore/tierstore/internal/keyspec"
)

// Size is a grant's length: the expiry (Unix milliseconds, u64
// little-endian) and the MAC.
const Size = 8 + macLen

const macLen = 16

// The domains separate the grants of each kind from each other and from
// any other MAC made with the same secret: a read grant is never a write
// grant of the same fields, nor the other way round.
const (
	readDomain  = "tierstore read grant v1\x00"
	writeDomain = "tierstore write grant v1\x00"
)

// Errors of Verify, checked with errors.Is. Their text names no kind (the
// error wrapping them says "read of" or "write of").
var (
	// ErrMissing: the request carries no grant, or one of the wrong
	// length.
	ErrMissing = errors.New("grant: no grant")
	// ErrForged: the grant was not made by a master with this node's
	// secret for this request (another kind, node, key, range, put token,
	// or made up).
	ErrForged = errors.New("grant: grant does not match the request")
	// ErrExpired: the grant was genuine but its time is over.
	ErrExpired = errors.New("grant: grant expired")
)

// Secret is the key master and nodes share.
type Secret [32]byte

// NewSecret makes a random secret.
func NewSecret() (Secret, error) {
	var s Secret
	_, err := rand.Read(s[:])
	return s, err
}

// Kind is what a grant allows: a read or a write. The zero Kind is Read.
type Kind uint8

const (
	// Read: one read of one replica (a lookup's grant).
	Read Kind = iota
	// Write: the write of one put's DRAM range (PutStart's grant).
	Write
)

func (k Kind) String() string {
	if k == Write {
		return "write"
	}
	return "read"
}

// Scope is what one grant allows: one read of one replica, or the write
// of one put's range.
type Scope struct {
	Kind Kind   // Read (the zero value) or Write; each has its own domain
	Node string // the node serving the read or taking the write
	Key  []byte // the object's key
	// Segment, Offset and Length name a DRAM range; an SSD read has no
	// segment and the value's length.
	Segment        string
	Offset, Length uint64
	// Token, Write: the put token the range was allocated to
	// (masterapi.Replica.PutToken). 0 for a read.
	Token uint64
}

// Signer makes grants with one secret.
type Signer struct {
	macs sync.Pool // of hash.Hash (HMAC-SHA256 keyed with the secret)
}

// NewSigner returns a Signer of s.
func NewSigner(s Secret) *Signer {
	key := s
	return &Signer{macs: sync.Pool{New: func() any { return hmac.New(sha256.New, key[:]) }}}
}

// mac computes the MAC of sc until expiry (Unix ms) into out.
func (s *Signer) mac(sc Scope, expiry uint64, out *[macLen]byte) {
	h := s.macs.Get().(hash.Hash)
	h.Reset()
	var b [256]byte
	var buf []byte
	switch sc.Kind {
	case Read:
		buf = append(b[:0], readDomain...)
	case Write:
		buf = append(b[:0], writeDomain...)
	default: // no master signs one; still never a read's or a write's
		buf = fmt.Appendf(b[:0], "tierstore grant of kind %d\x00", sc.Kind)
	}
	buf = binary.LittleEndian.AppendUint16(buf, uint16(len(sc.Node)))
	buf = append(buf, sc.Node...)
	buf = binary.LittleEndian.AppendUint16(buf, uint16(len(sc.Segment)))
	buf = append(buf, sc.Segment...)
	buf = binary.LittleEndian.AppendUint64(buf, sc.Offset)
	buf = binary.LittleEndian.AppendUint64(buf, sc.Length)
	buf = binary.LittleEndian.AppendUint64(buf, sc.Token)
	buf = binary.LittleEndian.AppendUint64(buf, expiry)
	buf = binary.LittleEndian.AppendUint32(buf, uint32(len(sc.Key)))
	h.Write(buf)
	h.Write(sc.Key)
	var sum [sha256.Size]byte
	copy(out[:], h.Sum(sum[:0]))
	s.macs.Put(h)
}

// Sign makes the grant of sc valid until expires.
func (s *Signer) Sign(sc Scope, expires time.Time) [Size]byte {
	var g [Size]byte
	exp := uint64(expires.UnixMilli())
	binary.LittleEndian.PutUint64(g[:8], exp)
	var m [macLen]byte
	s.mac(sc, exp, &m)
	copy(g[8:], m[:])
	return g
}

// Verifier checks grants against the current secret and, during a
// rotation, the previous one.
type Verifier struct {
	signers []*Signer
	// Skew is how long after its expiry a grant is still taken (the
	// master's and the node's clocks differ).
	Skew time.Duration
}

// NewVerifier checks with cur and, if given, prev.
func NewVerifier(cur Secret, prev ...Secret) *Verifier {
	v := &Verifier{signers: []*Signer{NewSigner(cur)}, Skew: 2 * time.Second}
	for _, p := range prev {
		v.signers = append(v.signers, NewSigner(p))
	}
	return v
}

// Verify checks grant g for the request sc at now. The MAC is compared
// first (in constant time), so an expired grant is reported as expired
// only when it is genuine.
func (v *Verifier) Verify(sc Scope, g []byte, now time.Time) error {
	if len(g) != Size {
		return fmt.Errorf("%w for %s (%d bytes, want %d)", ErrMissing, describe(sc), len(g), Size)
	}
	exp := binary.LittleEndian.Uint64(g[:8])
	var m [macLen]byte
	for _, s := range v.signers {
		s.mac(sc, exp, &m)
		if hmac.Equal(m[:], g[8:]) {
			if until := time.UnixMilli(int64(exp)).Add(v.Skew); now.After(until) {
				return fmt.Errorf("%w: %s, expired at %s (now %s)", ErrExpired, describe(sc),
					time.UnixMilli(int64(exp)).UTC().Format(time.RFC3339Nano), now.UTC().Format(time.RFC3339Nano))
			}
			return nil
		}
	}
	return fmt.Errorf("%w: %s", ErrForged, describe(sc))
}

func describe(sc Scope) string {
	if sc.Kind == Write {
		return fmt.Sprintf("write of %s at %s+%d (%d bytes, put token %d) on node %q", keyspec.Show(sc.Key), sc.Segment, sc.Offset, sc.Length, sc.Token, sc.Node)
	}
	if sc.Segment == "" {
		return fmt.Sprintf("SSD read of %s (%d bytes) on node %q", keyspec.Show(sc.Key), sc.Length, sc.Node)
	}
	return fmt.Sprintf("read of %s at %s+%d (%d bytes) on node %q", keyspec.Show(sc.Key), sc.Segment, sc.Offset, sc.Length, sc.Node)
}
