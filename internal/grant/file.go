package grant

import (
	"bytes"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tierstore/tierstore/internal/filestamp"
)

// ErrSecretFile: --grant_secret_file does not hold a secret (missing,
// unreadable, not 64 hex digits, or all zero).
var ErrSecretFile = errors.New("grant: --grant_secret_file")

// ParseSecret reads a secret file's content: 64 hexadecimal digits (32
// bytes), surrounding white space ignored (a trailing newline). Make one
// with `head -c32 /dev/urandom | xxd -p -c64` or `openssl rand -hex 32`.
func ParseSecret(b []byte) (Secret, error) {
	var s Secret
	t := bytes.TrimSpace(b)
	if len(t) != 2*len(s) {
		return s, fmt.Errorf("%w: %d characters, want 64 hexadecimal digits (32 bytes; make one with `head -c32 /dev/urandom | xxd -p -c64`)", ErrSecretFile, len(t))
	}
	if _, err := hex.Decode(s[:], t); err != nil {
		return Secret{}, fmt.Errorf("%w: not 64 hexadecimal digits: %v", ErrSecretFile, err)
	}
	if s == (Secret{}) {
		return Secret{}, fmt.Errorf("%w: the secret is all zero", ErrSecretFile)
	}
	return s, nil
}

// RecheckEvery is how often at most Keys stats its file on use (and at
// once when a grant does not verify: the master may have signed with a
// secret this process has not read yet).
const RecheckEvery = time.Second

// Keys are the secret of --grant_secret_file, re-read when the file
// changes, as package tlsconf re-reads certificate files (a stat's inode,
// size and modification time; a file replaced by rename or rewritten in
// place): on use, at most every RecheckEvery, and at once when a grant does
// not verify. A master signs with the newest secret; a node verifies with
// the newest and the one before it, so that no read fails across a
// rotation (the master and the node need not read the new file at the
// same moment). A file that no longer loads keeps the secrets in use
// (Reloads reports the error). Safe for concurrent use.
type Keys struct {
	path string
	st   atomic.Pointer[keyState]
	next atomic.Int64 // Unix ns of the next due stat

	mu      sync.Mutex // serialises reloads; protects the fields below
	reloads int
	lastErr error
}

// keyState is one loaded generation.
type keyState struct {
	stamp    filestamp.Stamp
	cur      Secret
	signer   *Signer
	verifier *Verifier
}

// LoadFile reads the secret of path; the error (ErrSecretFile) names the
// file and what is wrong with it.
func LoadFile(path string) (*Keys, error) {
	if strings.TrimSpace(path) == "" {
		return nil, fmt.Errorf("%w: empty path", ErrSecretFile)
	}
	k := &Keys{path: path}
	st, sec, err := k.read()
	if err != nil {
		return nil, err
	}
	k.st.Store(&keyState{stamp: st, cur: sec, signer: NewSigner(sec), verifier: NewVerifier(sec)})
	k.next.Store(time.Now().Add(RecheckEvery).UnixNano())
	return k, nil
}

func (k *Keys) read() (filestamp.Stamp, Secret, error) {
	st, err := filestamp.Of(k.path)
	if err != nil {
		return filestamp.Stamp{}, Secret{}, fmt.Errorf("%w %s: %w", ErrSecretFile, k.path, err)
	}
	b, err := os.ReadFile(k.path)
	if err != nil {
		return filestamp.Stamp{}, Secret{}, fmt.Errorf("%w %s: %w", ErrSecretFile, k.path, err)
	}
	sec, err := ParseSecret(b)
	if err != nil {
		return filestamp.Stamp{}, Secret{}, fmt.Errorf("%w (file %s)", err, k.path)
	}
	return st, sec, nil
}

// Refresh stats the file now and re-reads it if it changed; it reports
// whether the secret in use changed. A file that does not load keeps the
// secret in use and returns the error.
func (k *Keys) Refresh() (bool, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.next.Store(time.Now().Add(RecheckEvery).UnixNano())
	old := k.st.Load()
	st, err := filestamp.Of(k.path)
	if err == nil && st == old.stamp {
		return false, nil
	}
	var sec Secret
	if err == nil {
		_, sec, err = k.read()
	}
	if err != nil {
		k.lastErr = err
		return false, err
	}
	k.lastErr = nil
	if sec == old.cur {
		k.st.Store(&keyState{stamp: st, cur: old.cur, signer: old.signer, verifier: old.verifier})
		return false, nil
	}
	k.st.Store(&keyState{stamp: st, cur: sec, signer: NewSigner(sec), verifier: NewVerifier(sec, old.cur)})
	k.reloads++
	return true, nil
}

// Reloads returns how many times the secret changed since LoadFile and the
// error of the last re-read if it failed (the secrets in use stay).
func (k *Keys) Reloads() (int, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.reloads, k.lastErr
}

// state returns the secrets in use, re-reading the file first when a
// stat is due.
func (k *Keys) state(now time.Time) *keyState {
	if now.UnixNano() >= k.next.Load() {
		_, _ = k.Refresh()
	}
	return k.st.Load()
}

// Sign makes the grant of sc until expires with the newest secret.
func (k *Keys) Sign(sc Scope, expires time.Time) [Size]byte {
	return k.state(time.Now()).signer.Sign(sc, expires)
}

// Verify checks grant g for the read sc at now against the newest and the
// previous secret. A grant that does not match makes the file be re-read
// at once (the master may sign with a secret this process has not read
// yet) and is checked once more if the secret changed.
func (k *Keys) Verify(sc Scope, g []byte, now time.Time) error {
	return k.verifyFrom(k.state(now), sc, g, now)
}

// verifyFrom is Verify with the secrets of st, re-checking with the
// secrets in use after a re-read if they are not st's any more: whether
// this call's re-read changed them or another call's did since st was
// loaded (a rotation seen by several requests at once; Refresh answers
// only one of them "changed").
func (k *Keys) verifyFrom(st *keyState, sc Scope, g []byte, now time.Time) error {
	err := st.verifier.Verify(sc, g, now)
	if errors.Is(err, ErrForged) {
		// One stat (about a microsecond, as the MAC) per grant that does
		// not verify: a forged grant costs its sender a round trip.
		_, _ = k.Refresh()
		if cur := k.st.Load(); cur.verifier != st.verifier {
			err = cur.verifier.Verify(sc, g, now)
		}
	}
	return err
}

// Restore returns the error a grant refusal's text (as sent by a node
// and received by a client) names, wrapping its sentinel (ErrMissing,
// ErrForged or ErrExpired) so that errors.Is finds it on the client side;
// nil when msg names none.
func Restore(msg string) error {
	for _, s := range []error{ErrMissing, ErrForged, ErrExpired} {
		if strings.Contains(msg, s.Error()) {
			return &restored{msg: msg, sentinel: s}
		}
	}
	return nil
}

type restored struct {
	msg      string
	sentinel error
}

func (e *restored) Error() string { return e.msg }
func (e *restored) Unwrap() error { return e.sentinel }
