package cpuprofile

import (
	"os"
	"path/filepath"
	"testing"
)

// TestStartWritesAProfile: the file holds a profile once stop returned; an
// empty path is a no-op; a path in a missing directory is an error that
// names it.
func TestStartWritesAProfile(t *testing.T) {
	p := filepath.Join(t.TempDir(), "cpu.pprof")
	stop, err := Start(p)
	if err != nil {
		t.Fatal(err)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(p); err != nil || fi.Size() == 0 {
		t.Fatalf("profile file: %v %v", fi, err)
	}
	stop, err = Start(p) // stopped: the runtime takes a new profile
	if err != nil {
		t.Fatalf("start after stop: %v", err)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	stop, err = Start("")
	if err != nil || stop() != nil {
		t.Fatalf("empty path: %v", err)
	}
	bad := filepath.Join(t.TempDir(), "missing", "cpu.pprof")
	if _, err := Start(bad); err == nil {
		t.Fatal("a profile in a missing directory started")
	}
}
