package master

import (
	"cmp"
	"fmt"
	"slices"

	"github.com/tierstore/tierstore/internal/keyspec"
	"github.com/tierstore/tierstore/masterapi"
)

// Check verifies the Service's internal invariants and returns the first
// violation found (wrapping ErrInconsistent), or nil. It locks every shard,
// so it stops the world for the duration: tests call it after each test and
// after concurrent stress; operators should not need it.
//
// Checked: the counters match the metadata; every live segment's allocator
// accounts for exactly the DRAM ranges of the objects in it and no two
// ranges overlap; the PROCESSING count matches; at most one SSD
// replica per node and key; each live node's replica counters (Stats.PerNode)
// match its replicas; every offload pin is in its live node's mailbox
// and every mailbox entry pins its object; every object with a DRAM
// replica is in its shard's dram set, and a shard whose dram or held set
// is non-empty is in the index of such shards (shardSets).
func (s *Service) Check() error {
	for i := range s.shards {
		s.shards[i].mu.Lock()
	}
	defer func() {
		for i := range s.shards {
			s.shards[i].mu.Unlock()
		}
	}()
	s.nodesMu.RLock()
	defer s.nodesMu.RUnlock()
	c := newCensus()
	if err := s.takeCensus(c); err != nil {
		return err
	}
	if err := s.checkCounters(c); err != nil {
		return err
	}
	if err := s.checkBlocks(c.blockRefs); err != nil {
		return err
	}
	for _, p := range s.parkedList() {
		if p.seg.live() {
			c.ranges[p.seg] = append(c.ranges[p.seg], rng{p.off, alignUp(p.len), "parked:" + p.key})
		}
	}
	for _, n := range s.nodes {
		if err := s.checkNode(c, n); err != nil {
			return err
		}
	}
	return s.checkDigests(c)
}

// checkDigests compares every node id's reconcile digest with the one the
// census computed from the SSD replicas. The census keeps only the slots
// that hold a replica, and the comparison reads the live table in place:
// a check runs after every step of some tests, and a digest has 2^18 slots.
func (s *Service) checkDigests(c *census) error {
	s.digestMu.Lock()
	defer s.digestMu.Unlock()
	for id := range c.digests {
		if s.digests[id] == nil {
			return inconsistent("node %q holds SSD replicas but has no reconcile digest", id)
		}
	}
	for id, d := range s.digests {
		want := c.digests[id]
		t := d.tab.Load()
		if t == nil {
			if len(want) > 0 {
				return inconsistent("node %q holds SSD replicas but its reconcile digest is empty", id)
			}
			continue
		}
		for r := range digestSlots {
			n, sum := t.counts[r].Load(), t.sums[r].Load()
			if n == 0 && sum == 0 && want[r] == (censusSlot{}) {
				continue
			}
			if w := want[r]; n != w.n || sum != w.sum {
				return inconsistent("node %q reconcile digest slot %d: %d keys sum %x, metadata has %d keys sum %x",
					id, r, n, sum, w.n, w.sum)
			}
		}
	}
	return nil
}

// censusSlot is one digest slot as the census counts it.
type censusSlot struct {
	n   uint32
	sum uint64
}

func inconsistent(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrInconsistent}, args...)...)
}

// rng is one allocated range of a segment, as the metadata sees it.
type rng struct {
	off, n int64
	key    string
}

// perNode is one node's replica counts, as the metadata sees them.
type perNode struct{ dramR, dramB, ssdR, ssdB int64 }

// census is what Check counts in the metadata.
type census struct {
	objects, dramR, ssdR, dramB, ssdB, processing int64
	compact                                       int64
	blockRefs                                     map[*cblock]int32
	ranges                                        map[*segment][]rng
	pinned                                        map[*node]map[string]bool
	byNode                                        map[*node]*perNode
	digests                                       map[string]map[int]censusSlot // per node id, the digest slots of its SSD replicas
}

func newCensus() *census {
	return &census{blockRefs: map[*cblock]int32{}, ranges: map[*segment][]rng{}, pinned: map[*node]map[string]bool{}, byNode: map[*node]*perNode{},
		digests: map[string]map[int]censusSlot{}}
}

func (c *census) at(n *node) *perNode {
	if c.byNode[n] == nil {
		c.byNode[n] = &perNode{}
	}
	return c.byNode[n]
}

// takeCensus counts every object's replicas, ranges and pins. Caller holds
// every shard lock and nodesMu.
func (s *Service) takeCensus(c *census) error {
	for i := range s.shards {
		sh := &s.shards[i]
		// The walks over the dram and held sets visit only the shards
		// their index names (shardSet): a shard missing from it hides its
		// objects from eviction, the reclaim, promotion or settleHeld.
		if len(sh.dram) > 0 && !s.sets.dram.has(i) {
			return inconsistent("shard %d: %d entries in its dram set, not in the index of shards holding DRAM objects", i, len(sh.dram))
		}
		if len(sh.held) > 0 && !s.sets.held.has(i) {
			return inconsistent("shard %d: %d entries in its held set, not in the index of shards holding held objects", i, len(sh.held))
		}
		// A compact record is counted as the *object it stands for.
		compact, err := s.checkCompact(sh, c.blockRefs)
		if err != nil {
			return err
		}
		c.compact += int64(len(compact))
		for k, o := range all(sh.objs, compact) {
			c.objects++
			if o.empty() && sh.held[k] != o {
				// Kept for its lease: settleHeld must find it.
				return inconsistent("key %s: no replica, and not held for deletion (shard.held)", keyspec.Show(k))
			}
			if o.dramCount() > 0 && sh.dram[k] != o {
				// The DRAM walks (eviction, reclaim, promotion) go by sh.dram.
				return inconsistent("key %s: a DRAM replica, and not in its shard's dram set", keyspec.Show(k))
			}
			if err := c.addDRAM(k, o); err != nil {
				return err
			}
			seen := map[string]bool{}
			for _, d := range o.ssd {
				if seen[d.node.id] {
					return inconsistent("key %s: two SSD replicas on node %q", keyspec.Show(k), d.node.id)
				}
				seen[d.node.id] = true
				c.ssdR++
				c.ssdB += o.size
				c.at(d.node).ssdR++
				c.at(d.node).ssdB += o.size
				dg, ok := c.digests[d.node.id]
				if !ok {
					dg = map[int]censusSlot{}
					c.digests[d.node.id] = dg
				}
				h := masterapi.KeyHash(k)
				r := masterapi.SlotOf(h, digestSlots)
				dg[r] = censusSlot{dg[r].n + 1, dg[r].sum + masterapi.DigestAddend(h)}
			}
			if o.offload != nil && !o.offload.dead.Load() {
				if c.pinned[o.offload] == nil {
					c.pinned[o.offload] = map[string]bool{}
				}
				c.pinned[o.offload][k] = true
			}
		}
	}
	return nil
}

// addDRAM counts o's DRAM replicas and checks their shape: all of one put
// (one token, all complete or none), each on a different node.
func (c *census) addDRAM(k string, o *object) error {
	if (o.dram.seg == nil && o.more != nil) || (o.more != nil && len(*o.more) == 0) {
		return inconsistent("key %s: further DRAM replicas %v without a first, or an empty list", keyspec.Show(k), o.more)
	}
	for i, m := range o.drams() {
		c.dramR++
		c.dramB += o.size
		c.at(m.seg.node).dramR++
		c.at(m.seg.node).dramB += o.size
		if !m.complete {
			c.processing++
		}
		if m.len != o.size {
			return inconsistent("key %s: DRAM length %d != size %d", keyspec.Show(k), m.len, o.size)
		}
		if m.token != o.dram.token || m.complete != o.dram.complete || m.promo != o.dram.promo {
			return inconsistent("key %s: DRAM replica %d is of put %d (complete %v), the first of put %d (complete %v)",
				keyspec.Show(k), i, m.token, m.complete, o.dram.token, o.dram.complete)
		}
		if o.dramOn(m.seg.node) != i {
			return inconsistent("key %s: two DRAM replicas on node %q", keyspec.Show(k), m.seg.node.id)
		}
		if m.seg.live() {
			c.ranges[m.seg] = append(c.ranges[m.seg], rng{m.off, alignUp(m.len), k})
		}
	}
	return nil
}

// checkCounters compares the global counters with the census.
func (s *Service) checkCounters(c *census) error {
	for _, x := range []struct {
		name      string
		got, want int64
	}{
		{"objects", s.cnt.objects.Load(), c.objects},
		{"compact objects", s.cnt.compact.Load(), c.compact},
		{"DRAM replicas", s.cnt.dramReplicas.Load(), c.dramR},
		{"DRAM bytes", s.cnt.dramBytes.Load(), c.dramB},
		{"SSD replicas", s.cnt.ssdReplicas.Load(), c.ssdR},
		{"SSD bytes", s.cnt.ssdBytes.Load(), c.ssdB},
		{"processing", s.processing.Load(), c.processing},
	} {
		if x.got != x.want {
			return inconsistent("counter %s = %d, metadata has %d", x.name, x.got, x.want)
		}
	}
	return nil
}

// checkNode verifies live node n: its counters, its segments' allocators
// against the census's ranges (orphans included), and its mailbox against
// the offload pins.
func (s *Service) checkNode(c *census, n *node) error {
	want := c.at(n)
	if n.dramReplicas.Load() != want.dramR || n.dramBytes.Load() != want.dramB ||
		n.ssdReplicas.Load() != want.ssdR || n.ssdBytes.Load() != want.ssdB {
		return inconsistent("node %q counters: DRAM %d/%dB SSD %d/%dB, metadata has %d/%dB and %d/%dB", n.id,
			n.dramReplicas.Load(), n.dramBytes.Load(), n.ssdReplicas.Load(), n.ssdBytes.Load(),
			want.dramR, want.dramB, want.ssdR, want.ssdB)
	}
	for _, orph := range n.box.orphanList() {
		if orph.seg.node != n {
			return inconsistent("orphan %s of node %q holds a range of node %q", keyspec.Show(orph.key), n.id, orph.seg.node.id)
		}
		if orph.seg.live() {
			c.ranges[orph.seg] = append(c.ranges[orph.seg], rng{orph.off, alignUp(orph.len), "orphan:" + orph.key})
		}
	}
	for _, g := range n.segments {
		if err := checkSegment(g, c.ranges[g]); err != nil {
			return err
		}
	}
	return checkMailbox(n, c.pinned[n])
}

// checkSegment verifies that rs, the ranges the metadata holds in g, do not
// overlap, lie inside g and add up to g's allocator's use.
func checkSegment(g *segment, rs []rng) error {
	slices.SortFunc(rs, func(a, b rng) int { return cmp.Compare(a.off, b.off) })
	var used int64
	for i, r := range rs {
		used += r.n
		if r.off < 0 || r.off+r.n > g.alloc.size {
			return inconsistent("key %s: range [%d,+%d) outside segment %s/%s", keyspec.Show(r.key), r.off, r.n, g.node.id, g.name)
		}
		if i > 0 && rs[i-1].off+rs[i-1].n > r.off {
			return inconsistent("keys %s and %s overlap in segment %s/%s", keyspec.Show(rs[i-1].key), keyspec.Show(r.key), g.node.id, g.name)
		}
	}
	g.mu.Lock()
	au := g.alloc.used
	g.mu.Unlock()
	if au != used {
		return inconsistent("segment %s/%s: allocator has %d bytes in use, objects %d", g.node.id, g.name, au, used)
	}
	return nil
}

// checkMailbox verifies that n's tasks and the pins on n match one to one.
func checkMailbox(n *node, pinned map[string]bool) error {
	n.box.mu.Lock()
	boxKeys := map[string]bool{}
	var pendingBytes int64
	for k, b := range n.box.pending {
		boxKeys[k] = true
		pendingBytes += b
	}
	if pendingBytes != n.box.pendingBytes {
		n.box.mu.Unlock()
		return inconsistent("node %q: offload mailbox counts %d queued bytes, its tasks hold %d", n.id, n.box.pendingBytes, pendingBytes)
	}
	for k := range n.box.inflight {
		boxKeys[k] = true
	}
	n.box.mu.Unlock()
	for k := range pinned {
		if !boxKeys[k] {
			return inconsistent("key %s pinned by node %q has no task", keyspec.Show(k), n.id)
		}
	}
	for k := range boxKeys {
		if !pinned[k] {
			return inconsistent("node %q has a task for %s, which it does not pin", n.id, keyspec.Show(k))
		}
	}
	return nil
}

// checkCompact checks sh's compact index (it finds every record it
// refers to, no key is also in objs, every record is in use and names a
// known node incarnation) and returns its records as *objects; refs
// counts the references into each block. Caller holds sh.mu.
func (s *Service) checkCompact(sh *shard, refs map[*cblock]int32) (map[string]*object, error) {
	c := &sh.c
	out := map[string]*object{}
	incs := s.incs.Load()
	used := 0
	for _, v := range c.idx {
		if v == 0 {
			continue
		}
		used++
		if v == idxTomb {
			continue
		}
		r := int32(v - 1)
		b := s.cst.block(r)
		if b == nil || int(r&(blockMax-1)) >= b.n {
			return nil, inconsistent("compact index of shard %d: reference %d to a block freed or not filled there", sh.i, r)
		}
		x := s.cst.rec(r)
		if x.klen == 0 {
			return nil, inconsistent("compact index of shard %d: reference %d to a removed record", sh.i, r)
		}
		k := s.cst.key(r)
		h := masterapi.KeyHash(k)
		if hash32(h) != x.h32 || &s.shards[h&s.mask] != sh {
			return nil, inconsistent("key %s: compact record hash %08x in shard %d, not the key's", keyspec.Show(k), x.h32, sh.i)
		}
		if got := c.find(k, x.h32); got != r {
			return nil, inconsistent("key %s: compact record %d, the index finds %d", keyspec.Show(k), r, got)
		}
		if sh.objs[k] != nil {
			return nil, inconsistent("key %s: both an object and a compact record", keyspec.Show(k))
		}
		if _, dup := out[k]; dup {
			return nil, inconsistent("key %s: two compact records", keyspec.Show(k))
		}
		if incs == nil || int(x.node) >= len(*incs) {
			return nil, inconsistent("key %s: compact record names node incarnation %d, unknown", keyspec.Show(k), x.node)
		}
		out[k] = newSSDObject(int64(x.size), x.crc, (*incs)[x.node], x.seen)
		if refs != nil {
			refs[b]++
		}
	}
	if len(out) != c.live || used != c.used {
		return nil, inconsistent("compact index of shard %d: %d records and %d entries used, counted %d and %d", sh.i, len(out), used, c.live, c.used)
	}
	return out, nil
}

// checkBlocks checks that every block's live count is the references
// into it (refs, from checkCompact over every shard) and that no block
// without one is kept but the ones being filled. Caller holds every
// shard lock.
func (s *Service) checkBlocks(refs map[*cblock]int32) error {
	s.cst.mu.Lock()
	defer s.cst.mu.Unlock()
	p := s.cst.table.Load()
	if p == nil {
		return nil
	}
	kept := int64(0)
	for i, b := range *p {
		if b == nil {
			continue
		}
		kept++
		if int(b.ix) != i {
			return inconsistent("compact block at %d says it is at %d", i, b.ix)
		}
		if n := b.live.Load(); n != refs[b] {
			return inconsistent("compact block %d: live count %d, %d references", i, n, refs[b])
		}
		if refs[b] == 0 && !b.open.Load() {
			return inconsistent("compact block %d: no record and not being filled, kept", i)
		}
	}
	if kept != s.cst.blocks.Load() {
		return inconsistent("compact store: %d blocks in the table, counted %d", kept, s.cst.blocks.Load())
	}
	return nil
}

// all ranges over the entries of both maps.
func all(a, b map[string]*object) func(yield func(string, *object) bool) {
	return func(yield func(string, *object) bool) {
		for k, o := range a {
			if !yield(k, o) {
				return
			}
		}
		for k, o := range b {
			if !yield(k, o) {
				return
			}
		}
	}
}
