package master

import (
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/tierstore/tierstore/masterapi"
)

// The compact store (issue 23 item 2). Most objects of a large pool are
// what a re-registration creates, or what an object put through DRAM
// becomes once offloaded and evicted from DRAM: one SSD replica and
// nothing else (no DRAM replica, no pin, no offload task, no read
// counted, put token 0 or a token older than any removal scan; at most
// a read lease, kept in the record). Such an object is kept as a compact
// record instead of an *object in its shard's map: 32 bytes in a
// pointer-free block of records, its key in the block's key bytes, one
// uint32 in its shard's open-addressing index. Next to an *object (its
// 160-byte allocation, the key's own allocation, the map entry) that is
// about half the bytes per object, nothing the collector has to scan,
// and, for a re-registration, records and keys written one after the
// other into a chunk's own blocks instead of scattered over the heap.
//
// Invariants:
//   - A key is in at most one of its shard's objs map and its compact
//     index; a compact record counts as an object with one SSD replica
//     on the node incarnation it names (Service counters, the node's
//     counters and its reconcile digest), exactly as the *object it
//     stands for would.
//   - A record's lease (crec.lease: the read lease, rounded up to
//     leaseUnit; crecRebuilt: the rebuild lease) is honoured by every
//     removal path as an *object's is (invariant 4, recLeased): a
//     non-forced Remove refuses it in place (and thaw carries both
//     leases), a non-forced RemoveAll or RemoveByRegex spares it, an SSD eviction
//     of its one replica keeps it, the sweep after its node's death and a
//     reconcile that drops it thaw it and hold the *object for the lease.
//   - The read-only lookups (ExistKey, GetReplicaList, their batches,
//     Prefetch) work on a record in place: the lookup's lease is written
//     into it and a promotion is queued by key. They thaw it only when
//     the admission policy counts a read of it or queues it (never, for
//     the policies of package admission: a record is not in DRAM), or
//     when the lease cannot be written (recLeaseOf).
//   - Every other path that changes an object works on an *object: its
//     shard lookups go through Service.obj, which turns a compact record
//     into an *object first (thaw), carrying its leases. The walks over
//     every object thaw the records they have something to do with,
//     delete those the walk would delete, and skip the others; the
//     reconcile stamps records in place.
//   - An *object that a DRAM eviction (an eviction round, a promotion's
//     victim, EvictDRAM) or a promotion the node did not load leaves as
//     what a record stands for is frozen
//     back into one (Service.freeze, freezable), with its read lease, into
//     the store's block of frozen objects (of any shard; the prefix the
//     keys of the block before it shared kept once, putFrozen); no
//     counter or digest changes. None is frozen while a RemoveAll or
//     RemoveByRegex scans (a record has no put token to tell the scan
//     that it was put after the scan began).
//   - A record's fields are protected by the lock of its key's shard; a
//     block holds records of many shards. A block's live count is the
//     number of index entries that refer to it; a block that is no longer
//     being filled (open) goes when it reaches 0. Its records and key
//     bytes are written once, by the goroutine that fills it, before the
//     index entry that refers to them (under the shard lock), and never
//     written again but for a record's reconcile stamp, node and lease
//     (under the shard lock): a string over a block's keys stays valid.
//
// A block stays allocated while any of its records lives: records thawed
// or removed here and there leave their slots unused until the whole
// block goes.

// crec is one compact record. Its fields are ordered so that it has no
// padding beyond the last byte: 32 bytes.
type crec struct {
	// size is at most recSizeMax (an SSD object never is larger: a
	// bucket's values are at most bucket.MaxValueLen); a larger object is
	// never a record.
	size uint32
	off  uint32 // the key's offset (after the block's prefix) in its block's keys
	node uint32 // the node incarnation's index (Service.incs)
	seen uint32 // the replica's reconcile stamp (ssdReplica.seen)
	crc  uint32
	h32  uint32 // the key hash's high half: the index's probe sequence
	// lease is the end of the record's read lease (object.leaseUntil) in
	// leaseUnits after Service.leaseBase, rounded up; 0 for none
	// (recLeaseOf, recLeaseEnd).
	lease uint32
	klen  uint16 // the key's length after the block's prefix; 0 for a removed record (never 0 otherwise)
	// flags: crecRebuilt.
	flags uint8
}

// recSizeMax is the largest size a record holds (crec.size).
const recSizeMax = math.MaxUint32

// leaseUnit is the grain of a record's read lease (crec.lease): its end
// is kept rounded up to it, so a record honours a lease up to 16 ms
// longer than an *object would; 2^32 units are about 2.2 years after the
// Service's start, after which a lease is no longer written into a record
// (the lookup thaws it instead, as before records carried leases).
const leaseUnit = int64(16 * time.Millisecond)

// recLeaseOf is the crec.lease of a lease ending at until (unix ns); false
// when until is not after leaseBase or too far after it.
func (s *Service) recLeaseOf(until int64) (uint32, bool) {
	d := until - s.leaseBase
	if d <= 0 {
		return 0, false
	}
	u := (d + leaseUnit - 1) / leaseUnit
	if u > math.MaxUint32 {
		return 0, false
	}
	return uint32(u), true
}

// recLeaseEnd is the end (unix ns) of record x's read lease; 0 for none.
func (s *Service) recLeaseEnd(x *crec) int64 {
	if x.lease == 0 {
		return 0
	}
	return s.leaseBase + int64(x.lease)*leaseUnit
}

// recLeased reports whether record x is leased at now: its read lease,
// or the rebuild lease (crecRebuilt). Every removal path that
// respects leases asks it of a record (invariant 4).
func (s *Service) recLeased(x *crec, now int64) bool {
	return now < s.recLeaseEnd(x) || s.rebuiltLeased(x, now)
}

const (
	// crecRebuilt: created inside a rebuild window, so leased as a
	// rebuilt object is (rebuiltLease) until the window's end plus a
	// lease: the lease rebuiltLease would have given it ends no later.
	crecRebuilt uint8 = 1 << iota
)

// A record's reference (cref): its block's index in the store's table
// << crefSlotBits | its slot in the block. At most 1 << crefSlotBits
// records a block and 1 << (31 - crefSlotBits) blocks: a reference is a
// non-negative int32, -1 for none.
const (
	crefSlotBits = 12
	blockMax     = 1 << crefSlotBits
	blocksMax    = 1 << (31 - crefSlotBits)
)

// cblock is a block of compact records and their keys. recs and keys
// have their full length from the start (their headers are never
// written again: readers under other shard locks read them); n and kn
// are the filler's. Every key of the block starts with pfx (the common
// prefix of the chunk that filled it, "" for the loose block), kept once:
// keys holds only what follows it (for vLLM's keys, 64 of 108 bytes).
type cblock struct {
	recs []crec
	keys []byte
	pfx  string // immutable
	n    int    // records handed out (the filler's)
	kn   int    // key bytes handed out (the filler's)
	ix   uint32
	live atomic.Int32 // records in use (changed under their shards' locks)
	open atomic.Bool  // being filled: kept at live 0
}

// room reports whether b can take a key of klen bytes after its prefix
// (the filler's).
func (b *cblock) room(klen int) bool { return b.n < len(b.recs) && len(b.keys)-b.kn >= klen }

// cstore is the Service's table of blocks.
type cstore struct {
	table atomic.Pointer[[]*cblock] // by index; entries of freed blocks nil
	mu    sync.Mutex                // protects free, loose and the table's changes
	free  []uint32                  // indexes of freed blocks, for new blocks
	// loose is the block that single re-registrations (registerSSDLocked)
	// fill, under mu.
	loose *cblock
	// frozen is the block that freezes (Service.freeze) fill, under mu;
	// fref is the first key written into it and flcp the length of the
	// prefix every key written into it shares with fref: the next
	// frozen block keeps that prefix once (putFrozen). frozenRecs is the
	// records of a frozen block (frozenRecsDefault; tests make it small).
	frozen     *cblock
	fref       string
	flcp       int
	frozenRecs int
	// blocks counts the blocks allocated (tests, Check).
	blocks atomic.Int64
}

// newBlock returns a new open block of recs records and keyBytes key
// bytes, entered in the table.
func (st *cstore) newBlock(recs, keyBytes int, pfx string) *cblock {
	b := &cblock{recs: make([]crec, recs), keys: make([]byte, keyBytes), pfx: pfx}
	populateSlice(b.recs)
	populateSlice(b.keys)
	b.open.Store(true)
	st.mu.Lock()
	defer st.mu.Unlock()
	st.enter(b)
	return b
}

// enter gives b an index in the table. Caller holds mu.
func (st *cstore) enter(b *cblock) {
	var t []*cblock
	if p := st.table.Load(); p != nil {
		t = *p
	}
	if n := len(st.free); n > 0 {
		b.ix = st.free[n-1]
		st.free = st.free[:n-1]
		t[b.ix] = b
	} else {
		if len(t) >= blocksMax {
			panic("master: compact store: more blocks than a reference can name")
		}
		// Readers hold the table as it was: the new entry goes past
		// their length (into spare room, or a copy twice the size).
		b.ix = uint32(len(t))
		var nt []*cblock
		if len(t) < cap(t) {
			nt = t[:len(t)+1]
		} else {
			nt = make([]*cblock, len(t)+1, max(2*len(t), 64))
			copy(nt, t)
		}
		nt[b.ix] = b
		st.table.Store(&nt)
	}
	st.blocks.Add(1)
}

// close ends b's filling: freed now if it holds no record.
func (st *cstore) close(b *cblock) {
	b.open.Store(false)
	if b.live.Load() == 0 {
		st.release(b)
	}
}

// release frees b, whose last record went and which is not being
// filled (its live count is 0 and stays so: no reference to b remains);
// a second release of b does nothing.
func (st *cstore) release(b *cblock) {
	st.mu.Lock()
	defer st.mu.Unlock()
	st.releaseLocked(b)
}

// releaseLocked is release under mu.
func (st *cstore) releaseLocked(b *cblock) {
	t := *st.table.Load()
	if t[b.ix] != b {
		return
	}
	t[b.ix] = nil
	st.free = append(st.free, b.ix)
	st.blocks.Add(-1)
}

// block returns the block of reference r.
func (st *cstore) block(r int32) *cblock { return (*st.table.Load())[r>>crefSlotBits] }

// rec returns the record of reference r. Caller holds its shard's lock.
func (st *cstore) rec(r int32) *crec {
	return &st.block(r).recs[r&(blockMax-1)]
}

// suffix returns what follows the prefix in the key of record x of b: a
// string over b's keys.
func (b *cblock) suffix(x *crec) string { return unsafe.String(&b.keys[x.off], int(x.klen)) }

// key returns the key of reference r, a string of its own (to keep in a
// map).
func (st *cstore) key(r int32) string {
	b := st.block(r)
	if b.pfx == "" {
		return strings.Clone(b.suffix(&b.recs[r&(blockMax-1)]))
	}
	return b.pfx + b.suffix(&b.recs[r&(blockMax-1)])
}

// keyIn returns the key of reference r, written into *buf when its block
// has a prefix: valid until the next call with buf, and while r is
// referred to (the walks over every record: no allocation per key).
func (st *cstore) keyIn(r int32, buf *[]byte) string {
	b := st.block(r)
	x := &b.recs[r&(blockMax-1)]
	if b.pfx == "" {
		return b.suffix(x)
	}
	*buf = append(append((*buf)[:0], b.pfx...), b.suffix(x)...)
	return unsafe.String(unsafe.SliceData(*buf), len(*buf))
}

// put writes a record of key, which starts with b's prefix, into b (which
// has room) and returns its reference. The filler's call.
func (b *cblock) put(key string, x crec) int32 {
	key = key[len(b.pfx):]
	x.off, x.klen = uint32(b.kn), uint16(len(key))
	b.kn += copy(b.keys[b.kn:], key)
	i := b.n
	b.recs[i] = x
	b.n++
	b.live.Add(1)
	return int32(b.ix)<<crefSlotBits | int32(i)
}

// compactSet is a shard's index of its compact records (linear probing
// on h32): 0 an empty entry, idxTomb a removed one, else a reference + 1.
type compactSet struct {
	st   *cstore // the Service's; immutable
	idx  []uint32
	live int // entries in use
	used int // entries not empty (live and tombs)
}

const idxTomb = ^uint32(0)

// hash32 is the index hash of a key whose masterapi.KeyHash is h (its
// low bits choose the shard; these are independent of them).
func hash32(h uint64) uint32 { return uint32(h >> 32) }

// find returns the reference of key's record, or -1.
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
		r := int32(v - 1)
		b := c.st.block(r)
		x := &b.recs[r&(blockMax-1)]
		if x.h32 == h32 && len(b.pfx)+int(x.klen) == len(key) && b.suffix(x) == key[len(b.pfx):] && key[:len(b.pfx)] == b.pfx {
			return r
		}
	}
}

// add enters reference r, whose record has hash h32 (a key the set does
// not hold), in the index.
func (c *compactSet) add(r int32, h32 uint32) {
	if (c.used+1)*4 > len(c.idx)*3 {
		c.reindex(c.live + 1)
	}
	c.place(h32, uint32(r)+1)
	c.live++
}

// place puts entry v in the index (the first empty or removed entry of
// h32's probe sequence).
func (c *compactSet) place(h32, v uint32) {
	mask := uint32(len(c.idx) - 1)
	for p := h32 & mask; ; p = (p + 1) & mask {
		switch c.idx[p] {
		case 0:
			c.used++
			c.idx[p] = v
			return
		case idxTomb:
			c.idx[p] = v
			return
		}
	}
}

// del removes reference r: its entry, its record, and its block if it
// was the block's last and the block is not being filled.
func (c *compactSet) del(r int32) {
	b := c.st.block(r)
	x := &b.recs[r&(blockMax-1)]
	mask := uint32(len(c.idx) - 1)
	for p := x.h32 & mask; ; p = (p + 1) & mask {
		if c.idx[p] == uint32(r)+1 {
			c.idx[p] = idxTomb
			break
		}
	}
	x.klen = 0
	c.live--
	if c.live == 0 {
		c.idx, c.used = nil, 0
	}
	if b.live.Add(-1) == 0 && !b.open.Load() {
		c.st.release(b)
	}
}

// reindex builds the index anew, sized for n records.
func (c *compactSet) reindex(n int) {
	old := c.idx
	c.idx = make([]uint32, idxSize(n))
	populateSlice(c.idx)
	c.used = 0
	for _, v := range old {
		if v != 0 && v != idxTomb {
			c.place(c.st.rec(int32(v-1)).h32, v)
		}
	}
}

// adopt gives the set an empty index of a power-of-two length, if it
// has none or a shorter one without entries.
func (c *compactSet) adopt(idx []uint32) {
	if c.live == 0 && len(c.idx) < len(idx) {
		c.idx, c.used = idx, 0
	}
}

// visit calls fn for every reference of the set, which may thaw or
// delete the record it is given (and no other).
func (c *compactSet) visit(fn func(r int32, x *crec)) {
	for p := 0; p < len(c.idx); p++ {
		if v := c.idx[p]; v != 0 && v != idxTomb {
			fn(int32(v-1), c.st.rec(int32(v-1)))
		}
	}
}

// idxSize is the index length for n records: a power of two, at most
// 3/4 full.
func idxSize(n int) int {
	size := 8
	for size*3 < n*4 {
		size *= 2
	}
	return size
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

// filler hands out the records of one re-registration chunk from blocks
// of its own: of 64 records, then twice the last, never more than the
// chunk's keys not yet handled (left) nor blockMax, with key bytes for
// that many keys of the chunk's average length (a longer key than fits
// starts a new block). A chunk of new keys is thus written one record
// after the other, and a chunk of mostly known keys wastes at most about
// what it uses.
type filler struct {
	st     *cstore
	b      *cblock
	next   int    // the next block's records
	left   int    // the chunk's keys not yet handled, the one being handled included
	keyLen int    // the chunk's average key length after pfx
	pfx    string // a prefix every key of the chunk has, shorter than each (chunkPrefix)
}

// put writes a record of key and returns its reference.
func (f *filler) put(key string, x crec) int32 {
	if f.b == nil || !f.b.room(len(key)-len(f.pfx)) {
		if f.b != nil {
			f.st.close(f.b)
		}
		n := min(max(f.next, 64), max(f.left, 1), blockMax)
		f.next = 2 * n
		f.b = f.st.newBlock(n, max(n*f.keyLen, len(key)-len(f.pfx)), f.pfx)
	}
	return f.b.put(key, x)
}

// chunkPrefixMin is the shortest common prefix a chunk's blocks keep
// once: below it the string header costs about what it saves.
const chunkPrefixMin = 16

// chunkPrefix returns the longest prefix all keys share, each key being
// longer than it (a suffix is never empty), as a string of its own; ""
// when shorter than chunkPrefixMin.
func chunkPrefix(keys []reItem) string {
	if len(keys) == 0 {
		return ""
	}
	p := keys[0].key
	for _, it := range keys {
		k := it.key
		if len(k) <= len(p) {
			p = p[:len(k)-1]
		}
		i := 0
		for i < len(p) && p[i] == k[i] {
			i++
		}
		p = p[:i]
		if len(p) < chunkPrefixMin {
			return ""
		}
	}
	return strings.Clone(p)
}

// done closes the filler's block.
func (f *filler) done() {
	if f.b != nil {
		f.st.close(f.b)
		f.b = nil
	}
}

// putLoose writes a record of key into the store's loose block (single
// re-registrations) and returns its reference. Caller holds the key's
// shard lock.
func (st *cstore) putLoose(key string, x crec) int32 {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.loose == nil || !st.loose.room(len(key)) {
		if old := st.loose; old != nil {
			old.open.Store(false)
			if old.live.Load() == 0 {
				st.releaseLocked(old)
			}
		}
		b := &cblock{recs: make([]crec, 256), keys: make([]byte, max(256*64, len(key)))}
		b.open.Store(true)
		st.enter(b)
		st.loose = b
	}
	return st.loose.put(key, x)
}

// frozenRecsDefault is the records of a block that freezes fill.
const frozenRecsDefault = 1024

// putFrozen writes a record of key into the store's block of frozen
// objects and returns its reference. A new block keeps once the prefix
// that all keys of the block before it shared (when it is at least
// chunkPrefixMin bytes and key has it): the keys an eviction round
// freezes one after the other mostly share their model's prefix. A key
// without the block's prefix starts a block without one. Caller holds
// the key's shard lock.
func (st *cstore) putFrozen(key string, x crec) int32 {
	st.mu.Lock()
	defer st.mu.Unlock()
	b := st.frozen
	if b != nil && len(key) > len(b.pfx) && key[:len(b.pfx)] == b.pfx && b.room(len(key)-len(b.pfx)) {
		n := 0
		for n < st.flcp && n < len(key) && st.fref[n] == key[n] {
			n++
		}
		st.flcp = n
		return b.put(key, x)
	}
	pfx := ""
	if b != nil && st.flcp >= chunkPrefixMin && len(key) > st.flcp && key[:st.flcp] == st.fref[:st.flcp] {
		pfx = strings.Clone(key[:st.flcp])
	}
	if b != nil {
		b.open.Store(false)
		if b.live.Load() == 0 {
			st.releaseLocked(b)
		}
	}
	recs := st.frozenRecs
	if recs == 0 {
		recs = frozenRecsDefault
	}
	// Key bytes for the block's records at this key's length and an
	// eighth more: the keys of one pool are mostly of one length (a
	// longer one that does not fit starts the next block).
	klen := len(key) - len(pfx)
	b = &cblock{recs: make([]crec, recs), keys: make([]byte, max(recs*(klen+klen/8), klen)), pfx: pfx}
	b.open.Store(true)
	st.enter(b)
	st.frozen, st.fref, st.flcp = b, strings.Clone(key), len(key)
	return b.put(key, x)
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
	r := sh.c.find(key, hash32(masterapi.KeyHash(key)))
	if r < 0 {
		return nil
	}
	return s.thaw(sh, r)
}

// lookup returns key's *object in sh and -1, or nil and the reference of
// its compact record, or nil and -1: nothing is thawed. Caller holds
// sh.mu.
func (s *Service) lookup(sh *shard, key string) (*object, int32) {
	if o := sh.objs[key]; o != nil || sh.c.live == 0 {
		return o, -1
	}
	return nil, sh.c.find(key, hash32(masterapi.KeyHash(key)))
}

// compactHas reports whether sh holds key as a compact record. Caller
// holds sh.mu.
func (s *Service) compactHas(sh *shard, key string) bool {
	return sh.c.live > 0 && sh.c.find(key, hash32(masterapi.KeyHash(key))) >= 0
}

// thaw turns record r of sh into an *object in sh.objs and returns it.
// Caller holds sh.mu.
func (s *Service) thaw(sh *shard, r int32) *object {
	x := *s.cst.rec(r)
	key := s.cst.key(r)
	o := newSSDObject(int64(x.size), x.crc, s.incAt(x.node), x.seen)
	if x.flags&crecRebuilt != 0 {
		s.rebuiltLeaseThawed(o)
	}
	// The read lease goes with it (an ended one is harmless: leased
	// compares it with the time).
	o.leaseUntil = max(o.leaseUntil, s.recLeaseEnd(&x))
	sh.c.del(r)
	sh.putObj(key, o)
	s.cnt.compact.Add(-1)
	s.cnt.thawed.Add(1)
	return o
}

// CompactCounts reports the objects held as compact records now, and how
// many *objects records were turned into (thawed) and back (frozen) since
// the start (bench scale, tests).
func (s *Service) CompactCounts() (records, thawed, frozen int64) {
	return s.cnt.compact.Load(), s.cnt.thawed.Load(), s.cnt.frozen.Load()
}

// rebuiltLeaseThawed gives o, thawed from a record created inside a
// rebuild window, the lease it had (crecRebuilt).
func (s *Service) rebuiltLeaseThawed(o *object) {
	until := s.rebuild.until + s.cfg.DefaultKVLeaseTTL.Nanoseconds()
	if until > s.now() {
		o.leaseUntil, o.dramLeaseUntil = until, until
	}
}

// rebuiltLeased reports whether record x holds the rebuild lease
// (crecRebuilt).
func (s *Service) rebuiltLeased(x *crec, now int64) bool {
	return x.flags&crecRebuilt != 0 && now < s.rebuild.until+s.cfg.DefaultKVLeaseTTL.Nanoseconds()
}

// rebuiltFlags is the flags of a record created now (crecRebuilt inside
// a rebuild window, as rebuiltLease).
func (s *Service) rebuiltFlags(now int64) uint8 {
	if s.inWindow(now) {
		return crecRebuilt
	}
	return 0
}

// freeze turns o, objs[key], back into a compact record when it has
// become what a record stands for (freezable), and reports whether it
// did: the record goes into the store's block of frozen objects
// (putFrozen: keys of any shard, a common prefix kept once), with o's
// read lease. The
// counters and the node's digest do not change (the record counts as
// the object's one SSD replica, on the same incarnation); entries of o
// left in the shard's dram or held sets are stale (objs[key] is not o)
// and go at their next walk. The caller no longer uses o. Caller holds
// sh.mu.
func (s *Service) freeze(sh *shard, key string, o *object, now int64) bool {
	if !s.freezable(o, now) {
		return false
	}
	var lease uint32
	if o.leased(now) {
		l, ok := s.recLeaseOf(o.leaseUntil)
		if !ok {
			return false
		}
		lease = l
	}
	d := o.ssd[0]
	h32 := hash32(masterapi.KeyHash(key))
	r := s.cst.putFrozen(key, crec{size: uint32(o.size), node: d.node.ix, seen: d.seen, crc: o.crc, h32: h32, lease: lease})
	delete(sh.objs, key)
	sh.c.add(r, h32)
	s.cnt.compact.Add(1)
	s.cnt.frozen.Add(1)
	return true
}

// freezable reports whether o can be a compact record without losing
// anything: its one SSD replica on a live node is all it holds (no DRAM
// replica, put, promotion or offload task, no pin, no read counted by
// the admission policy), its size fits a record, and no RemoveAll or
// RemoveByRegex is scanning (a record has put token 0: one frozen during
// a scan would lose the token that tells the scan to leave an object put
// after it began; one frozen before the scan took its sequence number
// was put before it too). A rebuild lease is kept as the read lease
// it is (rebuiltLease sets leaseUntil). Caller holds the shard lock.
func (s *Service) freezable(o *object, now int64) bool {
	return o.dram.seg == nil && o.more == nil && len(o.ssd) == 1 && !o.ssd[0].node.dead.Load() &&
		o.offload == nil && !o.softPin && !o.hardPin && o.reads == 0 &&
		o.size > 0 && o.size <= recSizeMax && s.removeScans.Load() == 0
}

// delCompact deletes record r of sh, key's object, with its one SSD
// replica. Caller holds sh.mu; the record is not leased.
func (s *Service) delCompact(sh *shard, key string, r int32) {
	x := s.cst.rec(r)
	s.countSSD(s.incAt(x.node), masterapi.KeyHash(key), -1, -int64(x.size))
	s.cnt.objects.Add(-1)
	s.cnt.compact.Add(-1)
	sh.c.del(r)
}
