package master

import (
	"fmt"
	"sort"
)

// Check verifies the Service's internal invariants and returns the first
// violation found (wrapping ErrInconsistent), or nil. It locks every shard,
// so it stops the world for the duration: tests call it after each test and
// after concurrent stress; operators should not need it.
//
// Checked: the counters match the metadata; every live segment's allocator
// accounts for exactly the DRAM ranges of the objects in it and no two
// ranges overlap; the PROCESSING count matches; at most one LOCAL_DISK
// replica per node and key; each live node's replica counters (Stats.PerNode)
// match its replicas; every offload pin is in its live node's mailbox
// and every mailbox entry pins its object.
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
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{ErrInconsistent}, args...)...)
	}

	type rng struct {
		off, n int64
		key    string
	}
	var objects, memR, diskR, memB, diskB, processing int64
	ranges := map[*segment][]rng{}
	pinned := map[*node]map[string]bool{}
	type perNode struct{ memR, memB, diskR, diskB int64 }
	byNode := map[*node]*perNode{}
	at := func(n *node) *perNode {
		if byNode[n] == nil {
			byNode[n] = &perNode{}
		}
		return byNode[n]
	}
	for i := range s.shards {
		for k, o := range s.shards[i].objs {
			objects++
			if o.mem.seg != nil {
				memR++
				memB += o.size
				at(o.mem.seg.node).memR++
				at(o.mem.seg.node).memB += o.size
				if !o.mem.complete {
					processing++
				}
				if o.mem.len != o.size {
					return bad("key %q: DRAM length %d != size %d", k, o.mem.len, o.size)
				}
				if o.mem.seg.live() {
					ranges[o.mem.seg] = append(ranges[o.mem.seg], rng{o.mem.off, alignUp(o.mem.len), k})
				}
			}
			seen := map[string]bool{}
			for _, d := range o.disk {
				if seen[d.node.id] {
					return bad("key %q: two LOCAL_DISK replicas on node %q", k, d.node.id)
				}
				seen[d.node.id] = true
				diskR++
				diskB += o.size
				at(d.node).diskR++
				at(d.node).diskB += o.size
			}
			if o.offload != nil && !o.offload.dead.Load() {
				if pinned[o.offload] == nil {
					pinned[o.offload] = map[string]bool{}
				}
				pinned[o.offload][k] = true
			}
		}
	}
	for _, c := range []struct {
		name      string
		got, want int64
	}{
		{"objects", s.cnt.objects.Load(), objects},
		{"memory replicas", s.cnt.memReplicas.Load(), memR},
		{"memory bytes", s.cnt.memBytes.Load(), memB},
		{"disk replicas", s.cnt.diskReplicas.Load(), diskR},
		{"disk bytes", s.cnt.diskBytes.Load(), diskB},
		{"processing", s.processing.Load(), processing},
	} {
		if c.got != c.want {
			return bad("counter %s = %d, metadata has %d", c.name, c.got, c.want)
		}
	}
	for _, n := range s.nodes {
		want := at(n)
		if n.memReplicas.Load() != want.memR || n.memBytes.Load() != want.memB ||
			n.diskReplicas.Load() != want.diskR || n.diskBytes.Load() != want.diskB {
			return bad("node %q counters: memory %d/%dB disk %d/%dB, metadata has %d/%dB and %d/%dB", n.id,
				n.memReplicas.Load(), n.memBytes.Load(), n.diskReplicas.Load(), n.diskBytes.Load(),
				want.memR, want.memB, want.diskR, want.diskB)
		}
		for _, orph := range n.box.orphanList() {
			if orph.seg.node != n {
				return bad("orphan %q of node %q holds a range of node %q", orph.key, n.id, orph.seg.node.id)
			}
			if orph.seg.live() {
				ranges[orph.seg] = append(ranges[orph.seg], rng{orph.off, alignUp(orph.len), "orphan:" + orph.key})
			}
		}
		for _, g := range n.segments {
			rs := ranges[g]
			sort.Slice(rs, func(i, j int) bool { return rs[i].off < rs[j].off })
			var used int64
			for i, r := range rs {
				used += r.n
				if r.off < 0 || r.off+r.n > g.alloc.size {
					return bad("key %q: range [%d,+%d) outside segment %s/%s", r.key, r.off, r.n, n.id, g.name)
				}
				if i > 0 && rs[i-1].off+rs[i-1].n > r.off {
					return bad("keys %q and %q overlap in segment %s/%s", rs[i-1].key, r.key, n.id, g.name)
				}
			}
			g.mu.Lock()
			au := g.alloc.used
			g.mu.Unlock()
			if au != used {
				return bad("segment %s/%s: allocator has %d bytes in use, objects %d", n.id, g.name, au, used)
			}
		}
		n.box.mu.Lock()
		boxKeys := map[string]bool{}
		for k := range n.box.pending {
			boxKeys[k] = true
		}
		for k := range n.box.inflight {
			boxKeys[k] = true
		}
		n.box.mu.Unlock()
		for k := range pinned[n] {
			if !boxKeys[k] {
				return bad("key %q pinned by node %q has no task", k, n.id)
			}
		}
		for k := range boxKeys {
			if !pinned[n][k] {
				return bad("node %q has a task for %q, which it does not pin", n.id, k)
			}
		}
	}
	return nil
}
