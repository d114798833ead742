package masterapi

import "testing"

// DRAM evictions cover DRAM copies only: Latest (every tier) ignores
// them, LatestDRAM counts them; an EvictionEvery entry spares its keys;
// Drop forgets each kind.
func TestRemovalSetDRAMEvictions(t *testing.T) {
	s := NewRemovalSet()
	for _, e := range []Removal{
		{Seq: 10, Kind: RemovalKey, Key: "a"},
		{Seq: 20, Kind: EvictionKey, Key: "a"},
		{Seq: 30, Kind: EvictionEvery, Spared: []string{"b"}},
		{Seq: 40, Kind: RemovalKey, Key: "c"},
	} {
		if err := e.Validate(); err != nil {
			t.Fatal(err)
		}
		if err := s.Add(e); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct {
		key          string
		latest, dram uint64
	}{{"a", 10, 30}, {"b", 0, 0}, {"c", 40, 40}, {"d", 0, 30}} {
		if got, gotDRAM := s.Latest(c.key), s.LatestDRAM(c.key); got != c.latest || gotDRAM != c.dram {
			t.Errorf("%s: Latest %d LatestDRAM %d, want %d %d", c.key, got, gotDRAM, c.latest, c.dram)
		}
	}
	if s.Len() != 4 {
		t.Fatalf("Len %d", s.Len())
	}
	s.Drop(Removal{Seq: 30, Kind: EvictionEvery})
	s.Drop(Removal{Seq: 20, Kind: EvictionKey, Key: "a"})
	if s.LatestDRAM("a") != 10 || s.LatestDRAM("d") != 0 || s.Len() != 2 {
		t.Fatalf("after Drop: a %d d %d len %d", s.LatestDRAM("a"), s.LatestDRAM("d"), s.Len())
	}
	if err := (Removal{Seq: 1, Kind: EvictionKey}).Validate(); err == nil {
		t.Fatal("an EvictionKey entry without a key validated")
	}
	if !EvictionKey.DRAMOnly() || !EvictionEvery.DRAMOnly() || RemovalEvery.DRAMOnly() {
		t.Fatal("DRAMOnly")
	}
}
