package master

import (
	"sort"
	"testing"

	"pgregory.net/rapid"
)

func TestAllocatorBasics(t *testing.T) {
	a := newAllocator(1024)
	o1, ok := a.Alloc(100) // rounds to 128
	if !ok || o1 != 0 {
		t.Fatalf("alloc1 = %d %v", o1, ok)
	}
	o2, ok := a.Alloc(64)
	if !ok || o2 != 128 {
		t.Fatalf("alloc2 = %d %v", o2, ok)
	}
	if a.FreeBytes() != 1024-192 {
		t.Fatalf("free = %d", a.FreeBytes())
	}
	if _, ok := a.Alloc(2048); ok {
		t.Fatal("oversized alloc succeeded")
	}
	a.Free(o1, 100)
	a.Free(o2, 64)
	if a.Extents() != 1 || a.Largest() != 1024 || a.FreeBytes() != 1024 {
		t.Fatalf("not coalesced: extents %d largest %d", a.Extents(), a.Largest())
	}
}

func TestAllocatorBestFit(t *testing.T) {
	a := newAllocator(64 * 10)
	var offs []int64
	for i := 0; i < 10; i++ {
		o, _ := a.Alloc(64)
		offs = append(offs, o)
	}
	// Free a 3-block hole at 0..2 and a 1-block hole at 5.
	a.Free(offs[0], 64)
	a.Free(offs[1], 64)
	a.Free(offs[2], 64)
	a.Free(offs[5], 64)
	o, ok := a.Alloc(64)
	if !ok || o != offs[5] {
		t.Fatalf("best fit should take the 1-block hole at %d, got %d", offs[5], o)
	}
	o, ok = a.Alloc(128)
	if !ok || o != 0 {
		t.Fatalf("got %d", o)
	}
}

// TestAllocatorProperties: random alloc/free sequences never hand out
// overlapping ranges, never exceed the segment, and leave no two adjacent
// free extents (frees coalesce); freeing everything restores one extent.
func TestAllocatorProperties(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		size := rapid.Int64Range(64, 1<<16).Draw(t, "size")
		a := newAllocator(size)
		type rng struct{ off, n int64 }
		var live []rng
		ops := rapid.IntRange(1, 200).Draw(t, "ops")
		for i := 0; i < ops; i++ {
			if len(live) == 0 || rapid.Bool().Draw(t, "alloc") {
				n := rapid.Int64Range(1, size/2+1).Draw(t, "n")
				off, ok := a.Alloc(n)
				if !ok {
					if a.Largest() >= alignUp(n) {
						t.Fatalf("alloc %d failed with a %d extent free", n, a.Largest())
					}
					continue
				}
				if off < 0 || off+alignUp(n) > size || off%allocAlign != 0 {
					t.Fatalf("range [%d,+%d) outside segment %d", off, n, size)
				}
				live = append(live, rng{off, n})
			} else {
				j := rapid.IntRange(0, len(live)-1).Draw(t, "victim")
				a.Free(live[j].off, live[j].n)
				live = append(live[:j], live[j+1:]...)
			}
			// No overlap among live ranges.
			s := append([]rng(nil), live...)
			sort.Slice(s, func(x, y int) bool { return s[x].off < s[y].off })
			var used int64
			for k := range s {
				used += alignUp(s[k].n)
				if k > 0 && s[k-1].off+alignUp(s[k-1].n) > s[k].off {
					t.Fatalf("overlap: %v and %v", s[k-1], s[k])
				}
			}
			if used != a.used || a.used > a.size {
				t.Fatalf("used %d, allocator says %d (size %d)", used, a.used, a.size)
			}
			// Free extents: disjoint from live ranges, never adjacent.
			var free int64
			for st, n := range a.byStart {
				free += n
				if _, adj := a.byStart[st+n]; adj {
					t.Fatalf("free extents [%d,+%d) and [%d,..) not coalesced", st, n, st+n)
				}
				for _, r := range live {
					if st < r.off+alignUp(r.n) && r.off < st+n {
						t.Fatalf("free extent [%d,+%d) overlaps live %v", st, n, r)
					}
				}
			}
			if free+a.used != a.size {
				t.Fatalf("free %d + used %d != size %d", free, a.used, a.size)
			}
		}
		for _, r := range live {
			a.Free(r.off, r.n)
		}
		if a.used != 0 || (a.size > 0 && (a.Extents() != 1 || a.Largest() != a.size)) {
			t.Fatalf("after freeing all: used %d extents %d largest %d", a.used, a.Extents(), a.Largest())
		}
	})
}

func BenchmarkAllocatorAllocFree(b *testing.B) {
	a := newAllocator(1 << 30)
	offs := make([]int64, 0, 4096)
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		if len(offs) == cap(offs) {
			for _, o := range offs[:len(offs)/2] {
				a.Free(o, 64<<10)
			}
			offs = append(offs[:0], offs[len(offs)/2:]...)
		}
		o, ok := a.Alloc(64 << 10)
		if !ok {
			b.Fatal("full")
		}
		offs = append(offs, o)
	}
}
