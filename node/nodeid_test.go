package node

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// TestStableNodeID: the first call writes the fresh id (no temporary file
// left behind), later calls read it back whatever fresh says, and a file
// holding no valid id is refused with ErrBadNodeID.
func TestStableNodeID(t *testing.T) {
	dir := t.TempDir()
	id, err := stableNodeID(dir, "first")
	if err != nil || id != "first" {
		t.Fatalf("first start: %q %v", id, err)
	}
	if id, err = stableNodeID(dir, "second"); err != nil || id != "first" {
		t.Fatalf("second start: %q %v, want the stored id", id, err)
	}
	ents, err := os.ReadDir(dir)
	if err != nil || len(ents) != 1 || ents[0].Name() != nodeIDFile {
		t.Fatalf("directory holds %v (%v), want only %s", ents, err, nodeIDFile)
	}
	for _, bad := range []string{"", "  \n", "two words\n"} {
		if err := os.WriteFile(filepath.Join(dir, nodeIDFile), []byte(bad), 0o644); err != nil {
			t.Fatal(err)
		}
		if id, err := stableNodeID(dir, "x"); !errors.Is(err, ErrBadNodeID) {
			t.Errorf("file %q: %q %v, want ErrBadNodeID", bad, id, err)
		}
	}
}
