package master

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/tierstore/tierstore/internal/errcode"
	"github.com/tierstore/tierstore/masterapi"
)

// keyIn returns a key of shard i of s, the n-th such key from prefix.
func keyIn(s *Service, i, n int, prefix string) string {
	for j := 0; ; j++ {
		k := fmt.Sprintf("%s%d", prefix, j)
		if s.shardIndex(k) != i {
			continue
		}
		if n == 0 {
			return k
		}
		n--
	}
}

// dramReplicas is Stats' count of DRAM replicas.
func dramReplicas(t *testing.T, s *Service) int64 {
	t.Helper()
	st, err := s.Stats(bg)
	if err != nil {
		t.Fatal(err)
	}
	return st.DRAMReplicas
}

// TestEvictionFindsDRAMObjectsInEveryShard: an eviction round visits only
// the shards the index of shards holding DRAM objects names
// (shardSets.dram), so a put that does not set its shard's bit hides its
// object from eviction. At 65536 shards, objects put into many shards are
// every one of them a victim of a round of eviction_ratio 1.
func TestEvictionFindsDRAMObjectsInEveryShard(t *testing.T) {
	s, clk := testService(t, func(c *Config) { c.Shards = 1 << 16; c.EvictionRatio = 1 })
	mount(t, s, "a", 64<<20)
	const n = 500
	shards := map[int]bool{}
	for i := range n {
		k := fmt.Sprint("obj", i)
		put(t, s, k, 4096, "")
		shards[s.shardIndex(k)] = true
	}
	if err := s.Check(); err != nil {
		t.Fatal(err)
	}
	clk.Advance(time.Hour)
	if got := s.EvictNow(); got != n {
		t.Fatalf("a round of eviction_ratio 1 dropped %d of %d DRAM objects in %d shards", got, n, len(shards))
	}
	if got := dramReplicas(t, s); got != 0 {
		t.Fatalf("%d DRAM replicas left after the round", got)
	}
	// The round's victims stay in their dram sets until the next walk,
	// which finds them stale, empties the sets and the index.
	if got := s.EvictNow(); got != 0 {
		t.Fatalf("a second round dropped %d", got)
	}
	s.sets.dram.each(func(i int) { t.Errorf("shard %d still in the index after its dram set emptied", i) })
}

// TestEvictionFindsObjectOfRefilledShard: a shard whose dram set an
// eviction round's walk emptied (its bit cleared) and that then gets a DRAM
// object again is visited by the next round: the bit is set on every
// insert, not only when the shard's dram map is made.
func TestEvictionFindsObjectOfRefilledShard(t *testing.T) {
	s, clk := testService(t, func(c *Config) { c.Shards = 1 << 16; c.EvictionRatio = 1 })
	mount(t, s, "a", 64<<20)
	const shard = 12345
	first, second := keyIn(s, shard, 0, "k"), keyIn(s, shard, 1, "k")
	put(t, s, first, 4096, "")
	clk.Advance(time.Hour)
	if got := s.EvictNow(); got != 1 {
		t.Fatalf("first round dropped %d, want 1", got)
	}
	// The next walk finds the victim's entry stale and empties the set.
	if got := s.EvictNow(); got != 0 {
		t.Fatalf("second round dropped %d, want 0", got)
	}
	if s.sets.dram.has(shard) {
		t.Fatal("the round left the emptied shard in the index")
	}
	put(t, s, second, 4096, "")
	if !s.sets.dram.has(shard) {
		t.Fatal("a put into an emptied shard did not put it back in the index")
	}
	clk.Advance(time.Hour)
	if got := s.EvictNow(); got != 1 {
		t.Fatalf("the round after the shard was refilled dropped %d, want 1 (%s)", got, second)
	}
	if got := dramReplicas(t, s); got != 0 {
		t.Fatalf("%d DRAM replicas left", got)
	}
}

// TestHeldShardIndex: settleHeld visits only the shards the index of
// shards with held objects names (shardSets.held): an object kept for its
// lease without a replica is deleted once the lease ends, also when its
// shard's held set was emptied before and filled again.
func TestHeldShardIndex(t *testing.T) {
	s, clk := testService(t, func(c *Config) { c.Shards = 1 << 16; c.ClientTTL = 100 * time.Hour })
	mount(t, s, "a", 64<<20)
	const shard = 777
	for round := range 2 {
		k := keyIn(s, shard, round, "h")
		rep := put(t, s, k, 4096, "")
		rep.Status = masterapi.Complete
		if _, err := s.GetReplicaList(bg, k); err != nil { // a lease
			t.Fatal(err)
		}
		// Its only replica goes inside the lease: the object is kept,
		// held, and lookups answer REPLICA_IS_GONE.
		if err := s.ReportBadReplica(bg, k, crcOf(k), rep); err != nil {
			t.Fatal(err)
		}
		if !s.sets.held.has(shard) {
			t.Fatalf("round %d: the shard of an object held for its lease is not in the index", round)
		}
		_, err := s.GetReplicaList(bg, k)
		mustIs(t, err, errcode.ErrReplicaGone)
		clk.Advance(time.Hour)
		s.Tick()
		_, err = s.GetReplicaList(bg, k)
		mustIs(t, err, errcode.ErrObjectNotFound)
		if s.sets.held.has(shard) {
			t.Fatalf("round %d: settleHeld left the emptied shard in the index", round)
		}
	}
}

// TestShardIndexConcurrent: puts, removes and eviction rounds at once, in
// shards that share the index's words (64 shards: one word), with -race.
// A bit lost by a set racing a clear of another shard's bit in the same
// word hides a shard's DRAM objects: Check finds it, and the last round
// (every object evictable) would leave DRAM replicas behind.
func TestShardIndexConcurrent(t *testing.T) {
	s, clk := testService(t, func(c *Config) { c.Shards = 64; c.EvictionRatio = 1 })
	mount(t, s, "a", 64<<20)
	const workers, steps = 8, 300
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := range steps {
				k := fmt.Sprintf("w%d-%d", w, i)
				r, err := s.PutStart(bg, masterapi.PutStartRequest{Key: k, Size: 4096, CRC: crcOf(k)})
				if err != nil {
					t.Errorf("PutStart(%s): %v", k, err)
					return
				}
				if err := s.PutEnd(bg, k, r.PutToken); err != nil {
					t.Errorf("PutEnd(%s): %v", k, err)
					return
				}
				switch i % 3 {
				case 0:
					// Another worker's round may have taken it.
					if err := s.Remove(bg, k, false); err != nil && !errors.Is(err, errcode.ErrObjectNotFound) {
						t.Errorf("Remove(%s): %v", k, err)
						return
					}
				case 1:
					s.EvictNow()
				}
			}
		})
	}
	wg.Wait()
	if err := s.Check(); err != nil {
		t.Fatal(err)
	}
	clk.Advance(time.Hour)
	s.EvictNow()
	if got := dramReplicas(t, s); got != 0 {
		t.Fatalf("%d DRAM replicas left after a round of eviction_ratio 1 with every object evictable", got)
	}
}

// TestGroupByShard (property): grouping a re-registration chunk of any
// size (a radix sort of 8 bits a pass: none at 1 shard, one at 16, two at
// 1024 and 65536) gives every item once, one group per shard present,
// each group's items in its shard, the groups in the order of their
// shards from the chunk's first.
func TestGroupByShard(t *testing.T) {
	for _, shards := range []int{1, 16, 1024, 1 << 16} {
		s, _ := testService(t, func(c *Config) { c.Shards = shards })
		for _, count := range []int{1, 2, 7, 100, 5000, 70000} {
			for _, first := range []uint64{0, 5, 1<<63 + 12345} {
				items := make([]reItem, count)
				for i := range items {
					k := fmt.Sprintf("g%d", i*7919)
					items[i] = reItem{key: k, h: masterapi.KeyHash(k)}
				}
				sc := new(reScratch)
				order, groups := s.groupByShard(sc, items, first)
				name := fmt.Sprintf("shards %d, %d items, first %d", shards, count, first)
				seen := make([]bool, count)
				prev := -1
				for _, g := range groups {
					if g.lo >= g.hi {
						t.Fatalf("%s: empty group %+v", name, g)
					}
					rank := int((uint64(g.shard) - first) & s.mask)
					if rank <= prev {
						t.Fatalf("%s: group of shard %d (rank %d) after rank %d", name, g.shard, rank, prev)
					}
					prev = rank
					for _, i := range order[g.lo:g.hi] {
						if seen[i] {
							t.Fatalf("%s: item %d twice", name, i)
						}
						seen[i] = true
						if int32(items[i].h&s.mask) != g.shard {
							t.Fatalf("%s: item %d of shard %d in the group of shard %d", name, i, items[i].h&s.mask, g.shard)
						}
					}
				}
				if i := slices.Index(seen, false); i >= 0 {
					t.Fatalf("%s: item %d in no group", name, i)
				}
			}
		}
	}
}

// TestReRegisterSmallChunksAtManyShards: chunks of every size, small
// (grouped by sorting) and large (counting sort), at 65536 shards, record
// every object with its SSD replica.
func TestReRegisterSmallChunksAtManyShards(t *testing.T) {
	s, _ := testService(t, func(c *Config) { c.Shards = 1 << 16 })
	mount(t, s, "a", 1<<20)
	next := 0
	for _, size := range []int{1, 2, 50, 4095, 4096, 5000} {
		objs := make([]masterapi.SSDObject, size)
		for i := range objs {
			k := fmt.Sprint("r", next)
			next++
			objs[i] = masterapi.SSDObject{Key: k, Size: 100, CRC: crcOf(k)}
		}
		errs, err := s.ReRegisterSSDObjects(bg, "a", objs)
		if err != nil {
			t.Fatal(err)
		}
		for i, e := range errs {
			if e != nil {
				t.Fatalf("chunk of %d: %s: %v", size, objs[i].Key, e)
			}
		}
	}
	st, err := s.Stats(bg)
	if err != nil {
		t.Fatal(err)
	}
	if st.SSDReplicas != int64(next) {
		t.Fatalf("%d SSD replicas, want %d", st.SSDReplicas, next)
	}
	for i := range next {
		if _, err := s.GetReplicaList(bg, fmt.Sprint("r", i)); err != nil {
			t.Fatalf("r%d: %v", i, err)
		}
	}
}

// TestShardSetWordsShared: the shards of one index word set and clear
// their bits at once (each under its own shard's lock, so only its own
// bit), and none loses its bit to another's change of the word: each
// change is one atomic read-modify-write, not a load and a store.
func TestShardSetWordsShared(t *testing.T) {
	b := newShardSet(64)
	const steps = 20000
	var wg sync.WaitGroup
	for i := range 64 {
		wg.Go(func() {
			for range steps {
				b.add(i)
				if !b.has(i) {
					t.Errorf("shard %d: its bit, just set, is clear", i)
					return
				}
				b.remove(i)
				if b.has(i) {
					t.Errorf("shard %d: its bit, just cleared, is set", i)
					return
				}
			}
			b.add(i)
		})
	}
	wg.Wait()
	n := 0
	b.each(func(int) { n++ })
	if n != 64 {
		t.Fatalf("%d of 64 bits set at the end", n)
	}
}

// TestEvictionRoundKeepsEnoughVictims: a round's first pass counts and
// picks in one walk, keeping twice the previous round's target
// (countAndPickVictims); when the evictable objects more than doubled
// since, the target exceeds what it kept and it walks again. Either way
// the round drops exactly eviction_ratio of the evictable objects, the
// least recently used, at 65536 shards and at 16.
func TestEvictionRoundKeepsEnoughVictims(t *testing.T) {
	for _, shards := range []int{16, 1 << 16} {
		s, clk := testService(t, func(c *Config) { c.Shards = shards; c.EvictionRatio = 0.5 })
		mount(t, s, "a", 64<<20)
		var present []string // oldest first
		next := 0
		for _, add := range []int{10, 205, 30, 7, 1, 500} {
			for range add {
				clk.Advance(time.Millisecond)
				k := fmt.Sprint("v", next)
				next++
				put(t, s, k, 4096, "")
				present = append(present, k)
			}
			clk.Advance(time.Hour) // every lease over
			want := (len(present) + 1) / 2
			if got := s.EvictNow(); got != want {
				t.Fatalf("%d shards: %d evictable, ratio 0.5: the round dropped %d, want %d", shards, len(present), got, want)
			}
			for i, k := range present {
				if gone := !inDRAM(s, k); gone != (i < want) { // inDRAM: no lookup, which would make k recently used
					t.Fatalf("%d shards: %s, %d-th least recently used of %d: gone %v after a round that dropped %d", shards, k, i, len(present), gone, want)
				}
			}
			present = present[want:]
		}
	}
}
