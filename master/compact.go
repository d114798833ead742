package master

import (
	"strings"
	"unsafe"

	"github.com/tierstore/tierstore/masterapi"
)

// The compact store (issue 23 item 2). Most objects of a large pool are
// what a re-registration creates: one SSD replica and nothing else (no
// DRAM replica, no lease, no pin, no offload task, no read counted, put
// token 0). Such an object is kept in its shard as a compact record
// instead of an *object in the shard's map: 32 bytes in a pointer-free
// array, its key in the shard's key arena, one uint32 in the shard's
// open-addressing index. Next to an *object (its 160-byte allocation,
// the key's own allocation, the map entry and the replica) that is about
// half the bytes per object, and nothing the collector has to scan.
//
// Invariants:
//   - A key is in at most one of its shard's objs map and its compact
//     set; a compact record counts as an object with one SSD replica on
//     the node incarnation it names (Service counters, the node's
//     counters and its reconcile digest), exactly as the *object it
//     replaces would.
//   - Every path that changes an object works on an *object: shard lookups
//     go through Service.obj, which turns a compact record into an
//     *object first (thaw), so the rest of the master never sees a
//     compact record. The walks over every object thaw the records they
//     have something to do with and skip the others (scanAll's want);
//     the reconcile reads and stamps records in place.
//   - The bytes of the key arena at an offset handed out are never
//     written again: a record's key is appended, a removed record's key
//     left as garbage until a rebuild copies the live keys into a new
//     arena. So a string over the arena (compactSet.key) stays valid.
//
// A thawed object stays an *object (freezing objects back is not done:
// it is the lookups, removals and evictions of hot keys that thaw).
//
// Concurrency: a compact set is protected by its shard's lock, as the
// shard's maps are.

// crec is one compact record. Its fields are ordered so that it has no
// padding beyond the last byte: 32 bytes.
type crec struct {
	size int64
	off  uint32 // the key's offset in the arena; the next free record when free
	node uint32 // the node incarnation's index (Service.incs)
	seen uint32 // the replica's reconcile stamp (ssdReplica.seen)
	crc  uint32
	h32  uint32 // the key hash's high half: the index's probe sequence
	klen uint16 // 0 for a free record (keys are never empty)
	// flags: crecRebuilt.
	flags uint8
}

const (
	// crecRebuilt: created inside an HA rebuild window, so leased as a
	// rebuilt object is (rebuiltLease) until the window's end plus a
	// lease: the lease rebuiltLease would have given it at creation ends
	// no later.
	crecRebuilt uint8 = 1 << iota
)

// compactSet is a shard's compact records.
type compactSet struct {
	recs []crec
	keys []byte // the key arena
	// idx is the open-addressing index over recs (linear probing on
	// h32): 0 empty, idxTomb a removed entry, else a record's index + 1.
	idx      []uint32
	live     int    // records in use
	used     int    // idx entries not empty (live and tombs)
	freeHead uint32 // the first free record + 1; 0 when none
	nfree    int    // free records
	garbage  int    // arena bytes of removed records' keys
	// gen counts the rebuilds (records renumbered): visit restarts.
	gen uint32
}

const idxTomb = ^uint32(0)

// hash32 is the index hash of a key whose masterapi.KeyHash is h (its
// low bits choose the shard; these are independent of them).
func hash32(h uint64) uint32 { return uint32(h >> 32) }

// key returns record i's key, a string over the arena (see the
// invariants: valid for as long as it is referred to; clone it to keep
// it in a map).
func (c *compactSet) key(i int32) string {
	r := &c.recs[i]
	return unsafe.String(&c.keys[r.off], int(r.klen))
}

// find returns the index of key's record, or -1.
func (c *compactSet) find(key string, h32 uint32) int32 {
	if c.live == 0 {
		return -1
	}
	mask := uint32(len(c.idx) - 1)
	for p := h32 & mask; ; p = (p + 1) & mask {
		v := c.idx[p]
		if v == 0 {
			return -1
		}
		if v == idxTomb {
			continue
		}
		r := &c.recs[v-1]
		if r.h32 == h32 && int(r.klen) == len(key) && unsafe.String(&c.keys[r.off], int(r.klen)) == key {
			return int32(v - 1)
		}
	}
}

// add records key (which the set does not hold) with r's fields and
// returns its index.
func (c *compactSet) add(key string, r crec) int32 {
	if (c.used+1)*4 > len(c.idx)*3 {
		c.reindex(c.live + 1)
	}
	r.off, r.klen = uint32(len(c.keys)), uint16(len(key))
	if cap(c.keys)-len(c.keys) < len(key) {
		c.keys = growBytes(c.keys, len(key))
	}
	c.keys = append(c.keys, key...)
	var i uint32
	if c.freeHead != 0 {
		i = c.freeHead - 1
		c.freeHead = c.recs[i].off
		c.nfree--
		c.recs[i] = r
	} else {
		i = uint32(len(c.recs))
		c.recs = append(c.recs, r)
	}
	c.place(r.h32, i)
	c.live++
	return int32(i)
}

// place puts record i in the index (the first empty or removed entry of
// its probe sequence).
func (c *compactSet) place(h32, i uint32) {
	mask := uint32(len(c.idx) - 1)
	for p := h32 & mask; ; p = (p + 1) & mask {
		switch c.idx[p] {
		case 0:
			c.used++
			c.idx[p] = i + 1
			return
		case idxTomb:
			c.idx[p] = i + 1
			return
		}
	}
}

// del removes record i.
func (c *compactSet) del(i int32) {
	r := &c.recs[i]
	mask := uint32(len(c.idx) - 1)
	for p := r.h32 & mask; ; p = (p + 1) & mask {
		if c.idx[p] == uint32(i)+1 {
			c.idx[p] = idxTomb
			break
		}
	}
	c.garbage += int(r.klen)
	*r = crec{off: c.freeHead}
	c.freeHead = uint32(i) + 1
	c.nfree++
	c.live--
	switch {
	case c.live == 0:
		*c = compactSet{}
	case c.nfree > 64 && c.nfree > c.live || c.garbage > 4096 && c.garbage > len(c.keys)/2:
		c.rebuild(0, 0)
	}
}

// reserve makes room for n more records of keyBytes bytes of keys in
// all, in one allocation each (a re-registration's hint: the arrays are
// then built once, not grown).
func (c *compactSet) reserve(n, keyBytes int) {
	if c.nfree+cap(c.recs)-len(c.recs) >= n && cap(c.keys)-len(c.keys) >= keyBytes && (c.used+n)*4 <= len(c.idx)*3 {
		return
	}
	c.rebuild(n, keyBytes)
}

// rebuild copies the live records and their keys into new arrays with
// room for extra more records and extraKeys more key bytes, and indexes
// them anew: free records, garbage and tombs go.
func (c *compactSet) rebuild(extra, extraKeys int) {
	live := c.live
	recs := make([]crec, 0, live+extra)
	keys := make([]byte, 0, len(c.keys)-c.garbage+extraKeys)
	populateSlice(recs[:cap(recs)])
	populateSlice(keys[:cap(keys)])
	for _, r := range c.recs {
		if r.klen == 0 {
			continue
		}
		k := c.keys[r.off : r.off+uint32(r.klen)]
		r.off = uint32(len(keys))
		keys = append(keys, k...)
		recs = append(recs, r)
	}
	*c = compactSet{recs: recs, keys: keys, live: live, gen: c.gen + 1}
	c.reindex(live + extra)
}

// reindex builds the index anew, sized for n records at most 3/4 full.
func (c *compactSet) reindex(n int) {
	size := 8
	for size*3 < n*4 {
		size *= 2
	}
	c.idx = make([]uint32, size)
	populateSlice(c.idx)
	c.used = 0
	for i, r := range c.recs {
		if r.klen != 0 {
			c.place(r.h32, uint32(i))
		}
	}
}

// growBytes returns b with room for n more bytes: a quarter more than it
// holds, at least (a shard's arena grows in steps that waste little).
func growBytes(b []byte, n int) []byte {
	nb := make([]byte, len(b), len(b)+max(n, len(b)/4, 256))
	copy(nb, b)
	return nb
}

// populateSlice populates the pages of a large new array at once
// (populate; small ones are left to fault in).
func populateSlice[T any](s []T) {
	if len(s) == 0 {
		return
	}
	if n := uintptr(len(s)) * unsafe.Sizeof(s[0]); n >= populateMin {
		populate(unsafe.Pointer(&s[0]), n)
	}
}

// incAt returns the node incarnation of index i (node.ix).
func (s *Service) incAt(i uint32) *node { return (*s.incs.Load())[i] }

// addInc gives n its index among the node incarnations. Caller holds
// nodesMu (the only writer).
func (s *Service) addInc(n *node) {
	var l []*node
	if p := s.incs.Load(); p != nil {
		l = *p
	}
	n.ix = uint32(len(l))
	nl := append(l[:len(l):len(l)], n)
	s.incs.Store(&nl)
}

// obj returns key's object in sh, or nil: a compact record is turned into
// an *object first (thaw). Caller holds sh.mu.
func (s *Service) obj(sh *shard, key string) *object {
	if o := sh.objs[key]; o != nil || sh.c.live == 0 {
		return o
	}
	i := sh.c.find(key, hash32(masterapi.KeyHash(key)))
	if i < 0 {
		return nil
	}
	return s.thaw(sh, i)
}

// compactHas reports whether sh holds key as a compact record. Caller
// holds sh.mu.
func (s *Service) compactHas(sh *shard, key string) bool {
	return sh.c.live > 0 && sh.c.find(key, hash32(masterapi.KeyHash(key))) >= 0
}

// thaw turns record i of sh into an *object in sh.objs and returns it.
// Caller holds sh.mu.
func (s *Service) thaw(sh *shard, i int32) *object {
	r := sh.c.recs[i]
	key := strings.Clone(sh.c.key(i))
	o := newSSDObject(r.size, r.crc, s.incAt(r.node), r.seen)
	if r.flags&crecRebuilt != 0 {
		s.rebuiltLeaseThawed(o)
	}
	sh.c.del(i)
	sh.putObj(key, o)
	s.cnt.compact.Add(-1)
	s.cnt.thawed.Add(1)
	return o
}

// visit calls fn for every record of the set, which may thaw or delete
// the record it is given (and no other); the walk starts over when that
// renumbered the records (a rebuild), so fn must do nothing to a record
// it has already passed over (it is called again for those).
func (c *compactSet) visit(fn func(i int32, r *crec)) {
	for i := int32(0); int(i) < len(c.recs); i++ {
		if c.recs[i].klen == 0 {
			continue
		}
		gen := c.gen
		fn(i, &c.recs[i])
		if c.gen != gen {
			i = -1
		}
	}
}

// rebuiltLeaseThawed gives o, thawed from a record created inside an HA
// rebuild window, the lease it had (crecRebuilt).
func (s *Service) rebuiltLeaseThawed(o *object) {
	until := s.ha.rebuildUntil + s.cfg.DefaultKVLeaseTTL.Nanoseconds()
	if until > s.now() {
		o.leaseUntil, o.dramLeaseUntil = until, until
	}
}

// rebuiltLeased reports whether record r is leased (crecRebuilt).
func (s *Service) rebuiltLeased(r *crec, now int64) bool {
	return r.flags&crecRebuilt != 0 && now < s.ha.rebuildUntil+s.cfg.DefaultKVLeaseTTL.Nanoseconds()
}

// delCompact deletes record i of sh, key's object, with its one SSD
// replica. Caller holds sh.mu; the record is not leased.
func (s *Service) delCompact(sh *shard, key string, i int32) {
	r := &sh.c.recs[i]
	s.countSSD(s.incAt(r.node), masterapi.KeyHash(key), -1, -r.size)
	s.cnt.objects.Add(-1)
	s.cnt.compact.Add(-1)
	sh.c.del(i)
}
