package backend_test

import (
	"testing"

	"github.com/tierstore/tierstore/backend"
)

func TestFileNameRoundTrip(t *testing.T) {
	for _, id := range []uint64{0, 1, 0xff, 1 << 40, ^uint64(0)} {
		name := backend.FileName(id)
		got, ok := backend.ParseFileName(name)
		if !ok || got != id {
			t.Fatalf("ParseFileName(FileName(%#x) = %q) = %#x, %v", id, name, got, ok)
		}
	}
	if backend.FileName(0xff) != "00000000000000ff.bucket" {
		t.Fatalf("FileName(0xff) = %q", backend.FileName(0xff))
	}
}

func TestParseFileNameRejects(t *testing.T) {
	for _, name := range []string{
		"", "README", "00000000000000ff", "00000000000000FF.bucket", "0000000000000ff.bucket",
		"000000000000000ff.bucket", "00000000000000ff.bucket.tmp", "00000000000000fg.bucket",
		"+0000000000000ff.bucket", " 0000000000000ff.bucket", "00000000000000ff.BUCKET",
	} {
		if id, ok := backend.ParseFileName(name); ok {
			t.Fatalf("ParseFileName(%q) = %#x, true; want rejected", name, id)
		}
	}
}

// FuzzParseFileName: whatever is accepted is exactly FileName of its id.
func FuzzParseFileName(f *testing.F) {
	f.Add("00000000000000ff.bucket")
	f.Add("+000000000000fff.bucket")
	f.Fuzz(func(t *testing.T, name string) {
		if id, ok := backend.ParseFileName(name); ok && backend.FileName(id) != name {
			t.Fatalf("ParseFileName(%q) accepted id %#x whose name is %q", name, id, backend.FileName(id))
		}
	})
}

func TestTotalLen(t *testing.T) {
	if n := backend.TotalLen([][]byte{nil, make([]byte, 3), {}, make([]byte, 5)}); n != 8 {
		t.Fatalf("TotalLen = %d, want 8", n)
	}
}
