package grant

import (
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// writeSecret writes s to path as the file format says (hex, newline),
// replacing the file by rename as an operator's tooling would.
func writeSecret(t testing.TB, path string, s Secret) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(hex.EncodeToString(s[:])+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// A secret file is 64 hex digits; anything else is refused naming what
// is wrong.
func TestLoadFileRefusesBadFiles(t *testing.T) {
	dir := t.TempDir()
	for name, content := range map[string]string{
		"short":    "abcd\n",
		"not hex":  strings.Repeat("zz", 32),
		"all zero": strings.Repeat("00", 32),
		"too long": strings.Repeat("ab", 33),
	} {
		p := filepath.Join(dir, strings.ReplaceAll(name, " ", "_"))
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := LoadFile(p); !errors.Is(err, ErrSecretFile) || !strings.Contains(err.Error(), p) {
			t.Errorf("%s: %v, want ErrSecretFile naming the file", name, err)
		}
	}
	if _, err := LoadFile(filepath.Join(dir, "missing")); !errors.Is(err, ErrSecretFile) || !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a missing file: %v", err)
	}
	good := filepath.Join(dir, "good")
	writeSecret(t, good, secret(t))
	if _, err := LoadFile(good); err != nil {
		t.Fatalf("a good file refused: %v", err)
	}
}

// A rotation: the signer moves to the new secret, a verifier takes grants
// of the new and of the previous secret, and a verifier that has not read
// the new file yet reads it at once when a grant does not verify.
func TestKeysRotation(t *testing.T) {
	p := filepath.Join(t.TempDir(), "secret")
	first := secret(t)
	writeSecret(t, p, first)
	master, err := LoadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	node, err := LoadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	sc := Scope{Node: "n1", Key: []byte("k"), Segment: "s", Offset: 0, Length: 10}
	now := time.Now()
	old := master.Sign(sc, now.Add(time.Minute))
	writeSecret(t, p, secret(t))
	if changed, err := master.Refresh(); !changed || err != nil {
		t.Fatalf("master refresh: %v %v", changed, err)
	}
	fresh := master.Sign(sc, now.Add(time.Minute))
	if fresh == old {
		t.Fatal("the master still signs with the old secret")
	}
	// The node has not re-read the file: the new grant makes it.
	if err := node.Verify(sc, fresh[:], now); err != nil {
		t.Fatalf("a grant of the new secret at a node that had not read it: %v", err)
	}
	if err := node.Verify(sc, old[:], now); err != nil {
		t.Fatalf("a grant of the previous secret after the rotation: %v", err)
	}
	if n, err := node.Reloads(); n != 1 || err != nil {
		t.Fatalf("node reloads %d %v, want 1", n, err)
	}
	// A file that no longer loads keeps the secrets in use.
	if err := os.WriteFile(p, []byte("garbage"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := node.Refresh(); !errors.Is(err, ErrSecretFile) {
		t.Fatalf("refresh of a bad file: %v", err)
	}
	if err := node.Verify(sc, fresh[:], now); err != nil {
		t.Fatalf("after a bad file the secret in use was dropped: %v", err)
	}
	if _, err := node.Reloads(); !errors.Is(err, ErrSecretFile) {
		t.Fatalf("Reloads does not report the bad file: %v", err)
	}
}

// Two requests carrying grants of a secret the node has not read yet
// arrive together: both check against the old secrets, one re-reads the
// file (Refresh: changed), the other's re-read finds nothing new. Both
// must pass: the second checks again with the secrets in use, which
// changed since it loaded its own (the rotation under live puts failed a
// few puts in ten runs before).
func TestKeysRotationSeenByAnotherRequest(t *testing.T) {
	p := filepath.Join(t.TempDir(), "secret")
	writeSecret(t, p, secret(t))
	master, err := LoadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	node, err := LoadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	writeSecret(t, p, secret(t))
	if changed, err := master.Refresh(); !changed || err != nil {
		t.Fatalf("master refresh: %v %v", changed, err)
	}
	now := time.Now()
	sc := Scope{Kind: Write, Node: "n1", Key: []byte("k"), Segment: "s", Length: 10, Token: 5}
	g := master.Sign(sc, now.Add(time.Minute))
	before := node.st.Load()                           // the second request loaded the old secrets
	if err := node.Verify(sc, g[:], now); err != nil { // the first re-reads
		t.Fatalf("the first request: %v", err)
	}
	if err := node.verifyFrom(before, sc, g[:], now); err != nil {
		t.Fatalf("the second request, whose re-read found the file already read: %v", err)
	}
	forged := g
	forged[Size-1] ^= 1
	if err := node.verifyFrom(before, sc, forged[:], now); !errors.Is(err, ErrForged) {
		t.Fatalf("a forged grant through the same path: %v", err)
	}
}

// A client finds the sentinel of a refusal whose text crossed the wire.
func TestRestore(t *testing.T) {
	v := NewVerifier(secret(t))
	sc := Scope{Node: "n", Key: []byte("k"), Length: 1}
	for _, want := range []error{ErrMissing, ErrForged} {
		g := make([]byte, Size)
		if want == ErrMissing {
			g = nil
		}
		err := v.Verify(sc, g, time.Now())
		if r := Restore(err.Error()); !errors.Is(r, want) || r.Error() != err.Error() {
			t.Errorf("Restore(%q) = %v", err, r)
		}
	}
	if Restore("no complete object") != nil {
		t.Error("Restore of another refusal")
	}
}
