package keyspec

import (
	"strings"
	"testing"
	"unicode"
)

func TestShow(t *testing.T) {
	for _, c := range []struct {
		key  string
		want string
	}{
		{"", `""`},
		{"layer0/blk42", `"layer0/blk42"`},
		{"a\x00b\xff\n", `"a\x00b\xff\n"`},
		{"é", `"\u00e9"`},
		{strings.Repeat("k", 48), `"` + strings.Repeat("k", 48) + `"`},
		{strings.Repeat("k", MaxLen), `"` + strings.Repeat("k", 48) + `"...(4096 bytes)`},
	} {
		if got := Show(c.key); got != c.want {
			t.Errorf("Show(%q) = %s, want %s", c.key, got, c.want)
		}
		if got := Show([]byte(c.key)); got != c.want {
			t.Errorf("Show([]byte(%q)) = %s, want %s", c.key, got, c.want)
		}
	}
}

// Whatever a key holds, Show prints only printable ASCII, and not much of it.
func FuzzShowIsPrintable(f *testing.F) {
	f.Add([]byte("k\x00\x1b[31m"))
	f.Fuzz(func(t *testing.T, key []byte) {
		s := Show(key)
		for _, r := range s {
			if r > unicode.MaxASCII || !unicode.IsPrint(r) {
				t.Fatalf("Show(%q) = %q holds %q", key, s, r)
			}
		}
		if len(s) > 4*showLen+2+len("...(4096 bytes)")+8 {
			t.Fatalf("Show of %d bytes is %d bytes long", len(key), len(s))
		}
	})
}
