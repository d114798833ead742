package master

import (
	"testing"
	"time"

	"github.com/tierstore/tierstore/internal/errcode"
)

// Touch counts each key once per call, as a lookup would for recency:
// the touched object is no longer the least recently used; a missing key
// is skipped; a malformed key fails the whole call (nothing counted).
func TestTouchCountsReadsOnce(t *testing.T) {
	s, clk := testService(t, func(c *Config) { c.EvictionRatio = 0.5 })
	mount(t, s, "n1", 1<<20)
	put(t, s, "a", 1000, "n1")
	clk.Advance(time.Second)
	put(t, s, "b", 1000, "n1")
	clk.Advance(time.Second)
	mustIs(t, s.Touch(bg, []string{"a", ""}), errcode.ErrInvalidKey)
	if n := s.cnt.touched.Load(); n != 0 {
		t.Fatalf("a refused Touch counted %d keys", n)
	}
	if err := s.Touch(bg, []string{"a", "missing", "a"}); err != nil {
		t.Fatal(err)
	}
	if n := s.cnt.touched.Load(); n != 1 {
		t.Fatalf("touched %d keys, want 1 (a once; missing skipped)", n)
	}
	if n := s.EvictNow(); n != 1 {
		t.Fatalf("evicted %d, want 1 of 2", n)
	}
	for k, want := range map[string]bool{"a": true, "b": false} {
		if ok, err := s.ExistKey(bg, k); err != nil || ok != want {
			t.Fatalf("%s exists %v (%v), want %v: the touched a is the more recent", k, ok, err, want)
		}
	}
}
