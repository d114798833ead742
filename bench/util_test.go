package main

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestDropCache: the read phases' claim "from the disk" rests on dropCache
// emptying the page cache of a store's files, which residentBytes measures.
func TestDropCache(t *testing.T) {
	dir := t.TempDir()
	if fsType(dir) == "tmpfs" {
		t.Skip("tmpfs keeps every page in memory: nothing to drop")
	}
	data := make([]byte, 4<<20)
	for i := range data {
		data[i] = byte(i)
	}
	if err := os.WriteFile(filepath.Join(dir, "f"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	if n := residentBytes(dir); n < 1<<20 {
		t.Fatalf("a file just written has %d bytes cached, want most of 4 MiB", n)
	}
	dropCache(dir)
	if n := residentBytes(dir); n > 64<<10 {
		t.Fatalf("after dropCache %d bytes are still cached", n)
	}
}

func TestLatencies(t *testing.T) {
	var l latencies
	for i := 100; i >= 1; i-- {
		l = append(l, time.Duration(i)*time.Millisecond)
	}
	if l.pct(50) != 50*time.Millisecond || l.pct(99) != 99*time.Millisecond || l.pct(100) != 100*time.Millisecond {
		t.Fatalf("pct: %v %v %v", l.pct(50), l.pct(99), l.pct(100))
	}
	if latencies(nil).pct(50) != 0 {
		t.Fatal("empty")
	}
	if l[0] != 100*time.Millisecond {
		t.Fatal("pct sorted the caller's slice")
	}
}

func TestValueSourceDistinct(t *testing.T) {
	vs := newValueSource(64<<10, 1)
	seen := map[string]bool{}
	for i := 0; i < 200; i++ {
		v := vs.value(i)
		if len(v) != 64<<10 {
			t.Fatalf("value %d has %d bytes", i, len(v))
		}
		seen[string(v[:64])] = true
	}
	if len(seen) < 190 {
		t.Fatalf("only %d distinct values of 200", len(seen))
	}
}
