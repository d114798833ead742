package master

import (
	"context"
	"math"
	"math/bits"
	"sync"
	"unsafe"

	"github.com/tierstore/tierstore/internal/errcode"
	"github.com/tierstore/tierstore/internal/keyspec"
	"github.com/tierstore/tierstore/masterapi"
)

// NotifyOffloadSuccess implements API.
func (s *Service) NotifyOffloadSuccess(ctx context.Context, req masterapi.NotifyRequest) ([]error, error) {
	if err := s.gate(ctx); err != nil {
		return nil, err
	}
	n := s.lookupNode(req.Node)
	if n == nil {
		return nil, s.observe(errcode.Errorf(errcode.NeedRemount, "master: notify_offload_success: unknown node %q", req.Node))
	}
	n.lastPing.Store(s.now())
	out := make([]error, len(req.Persisted))
	for i, d := range req.Persisted {
		out[i] = s.observe(s.answerPersisted(n, d))
	}
	for _, f := range req.Failed {
		if validKey(f.Key) == nil {
			s.answerFailure(n, f)
		}
	}
	return out, nil
}

// answerFailure applies one Failed item of n's notify. Only a failure that
// answers a task this master issued to n (in flight, or orphaned by a
// removal) counts and is logged as an offload failure: a restarted master
// that receives answers to its predecessor's tasks ignores them as answers.
// Whatever the task's state, the failure says the key is not on n's SSD,
// and n's word about its own SSD is authoritative: an SSD replica of n
// the master lists goes (with the usual lease rule for the metadata).
func (s *Service) answerFailure(n *node, f masterapi.OffloadFailure) {
	orph, orphaned := n.box.takeOrphan(f.Key)
	if orphaned {
		s.freeOrphan(orph) // the object went away during the task
		s.countFailure()
	}
	sh := s.shardOf(f.Key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	o := s.obj(sh, f.Key) // a compact record too: its one replica may be the one that goes
	switch {
	case orphaned:
	case o == nil || o.offload != n:
		n.box.drop(f.Key)
		s.log.Debug("failure answer for a task this master did not issue; not counted", "node", n.id, "key", keyspec.Show(f.Key))
	case !n.box.inFlight(f.Key):
		// Queued anew since (the key was removed and put again): the
		// answer is about the older task, which is already settled.
	default:
		s.countFailure()
		s.cancelTask(f.Key, o)
		if f.Retryable {
			s.retryTask(f.Key, o, n.id, f.Reason)
		} else {
			o.offloadGaveUp = offloadPermanent
			s.log.Info("offload failed permanently; not retried", "node", n.id, "key", keyspec.Show(f.Key), "reason", f.Reason)
		}
	}
	if o == nil {
		return
	}
	i := o.ssdIndex(n.id)
	if i < 0 {
		return
	}
	// An SSD replica of n the node says it does not hold. If this
	// master recorded it as the answer to its own task (a persisted notify
	// whose reply the node never got, so the node rolled the bucket back),
	// that task failed after all: a retryable failure is an attempt of it
	// like any other.
	viaTask := o.ssd[i].viaTask
	s.dropSSD(sh, f.Key, o, n.id, s.now())
	s.log.Warn("SSD replica dropped: its node says the key is not on its SSD", "node", n.id, "key", keyspec.Show(f.Key), "reason", f.Reason)
	if viaTask && o.offload == nil && sh.objs[f.Key] == o {
		s.countFailure()
		if f.Retryable {
			s.retryTask(f.Key, o, n.id, f.Reason)
		}
	}
}

// countFailure counts one failed answer to a task this master issued.
func (s *Service) countFailure() {
	s.cnt.offloadFailed.Add(1)
	s.met.offloadFailed.Inc()
}

// answerPersisted records one Persisted item of a notify. The key must have
// a task of n or an object: a key whose object was removed while n offloaded
// it (an orphan) or that the master does not know is refused per key with
// OBJECT_NOT_FOUND (the node deletes its SSD copy); only
// ReRegisterSSDObjects creates objects (invariant 1: a notify must not resurrect
// a removed key).
func (s *Service) answerPersisted(n *node, d masterapi.SSDObject) error {
	if err := validKey(d.Key); err != nil {
		return err
	}
	if orph, ok := n.box.takeOrphan(d.Key); ok {
		s.freeOrphan(orph)
		return errcode.Errorf(orph.code, "master: notify: the object was removed while node %q offloaded it; delete the SSD copy", n.id)
	}
	return s.registerSSD(n, d, false)
}

// ReRegisterSSDObjects is ReRegisterSSDColumns of objs (in-process
// callers and tests).
func (s *Service) ReRegisterSSDObjects(ctx context.Context, nodeID string, objs []masterapi.SSDObject) ([]error, error) {
	for _, d := range objs {
		if err := validKey(d.Key); err != nil {
			// A bad key is refused alone here, as before columns.
			return s.reRegisterEach(ctx, nodeID, objs)
		}
	}
	return s.ReRegisterSSDColumns(ctx, nodeID, masterapi.ColumnsOf(objs))
}

// reRegisterEach re-registers objs one at a time, each refused or
// recorded on its own.
func (s *Service) reRegisterEach(ctx context.Context, nodeID string, objs []masterapi.SSDObject) ([]error, error) {
	s.noteReRegistration()
	out := make([]error, len(objs))
	for i, d := range objs {
		if err := validKey(d.Key); err != nil {
			out[i] = s.observe(err)
			continue
		}
		errs, err := s.ReRegisterSSDColumns(ctx, nodeID, masterapi.ColumnsOf(objs[i:i+1]))
		if err != nil {
			return nil, err
		}
		out[i] = errs[0]
	}
	return out, nil
}

// ReRegisterSSDColumns implements API. A chunk costs the master one copy
// of its key bytes (the map keys of new objects are slices of it; none
// over gRPC, see reRegisterColumns), one hash per key, one removal-log
// lock and one lock per shard it touches, not per object; the first
// chunk's Expected hint sizes the shards' maps.
func (s *Service) ReRegisterSSDColumns(ctx context.Context, nodeID string, c masterapi.SSDColumns) ([]error, error) {
	return s.reRegisterColumns(ctx, nodeID, c, false)
}

// reRegisterColumns is ReRegisterSSDColumns. owned says that nothing
// else holds or will write c.Keys (the gRPC handler's freshly decoded
// request): the map keys then slice it and it is not copied.
//
// The chunk's shards are visited from a start that moves with every
// chunk, in windows of up to lookWindow shards held at once
// (registerLocked); a shard whose lock is busy (another chunk is there: a
// node has up to 3 in flight) is left for later passes, which take the
// busy shards that became free and wait, holding none, only when none
// did. The counters are added once per window, before its unlocks (so
// Check under all shard locks sees them agree).
func (s *Service) reRegisterColumns(ctx context.Context, nodeID string, c masterapi.SSDColumns, owned bool) ([]error, error) {
	if err := s.gate(ctx); err != nil {
		return nil, err
	}
	s.noteReRegistration()
	if err := c.Check(); err != nil {
		return nil, s.observe(err)
	}
	n := s.lookupNode(nodeID)
	if n == nil {
		return nil, s.observe(errcode.Errorf(errcode.NeedRemount, "master: re_register: unknown node %q", nodeID))
	}
	now := s.now()
	n.lastPing.Store(now)
	count := c.Len()
	out := make([]error, count)
	if count == 0 {
		return out, nil
	}
	if c.Expected > 0 && n.presized.CompareAndSwap(false, true) {
		s.presize(c.Expected)
	}
	var all string
	if owned {
		all = unsafe.String(unsafe.SliceData(c.Keys), len(c.Keys))
	} else {
		all = string(c.Keys)
	}
	sc := reScratchPool.Get().(*reScratch)
	defer sc.put()
	items := sc.itemsOf(count)
	for i, off := 0, 0; i < count; i++ {
		end := off + int(c.Lens[i])
		key := all[off:end]
		items[i] = reItem{key: key, h: masterapi.KeyHash(key)}
		off = end
	}
	s.removedSSDMany(nodeID, items, out)
	// Group by shard, then each shard once under its lock, from the
	// chunk's first shard on.
	first := s.reRegisterTurn.Add(1) * reRegisterStride
	order, groups := s.groupByShard(sc, items, first)
	seen := n.dig.epoch.Load()
	reg := reChunk{s: s, n: n, items: items, order: order, groups: groups, c: c, out: out, seen: seen, now: now}
	pfx := chunkPrefix(items)
	reg.fill = filler{st: &s.cst, left: count, keyLen: len(c.Keys)/count - len(pfx) + 1, pfx: pfx}
	defer reg.fill.done()
	busy := sc.busy[:0] // the groups left for later passes
	held := sc.held[:0] // the groups of the window whose shard is locked
	for gi := 0; gi < len(groups); {
		held = held[:0]
		for ; gi < len(groups) && len(held) < lookWindow; gi++ {
			if s.shards[groups[gi].shard].mu.TryLock() {
				held = append(held, int32(gi))
			} else {
				busy = append(busy, int32(gi))
			}
		}
		reg.registerLocked(held)
	}
	for len(busy) > 0 {
		// Again the free ones first; waits only when every one is busy.
		rest := busy[:0]
		held = held[:0]
		for _, gi := range busy {
			if len(held) < lookWindow && s.shards[groups[gi].shard].mu.TryLock() {
				held = append(held, gi)
			} else {
				rest = append(rest, gi)
			}
		}
		if len(held) == 0 {
			gi := rest[0]
			s.shards[groups[gi].shard].mu.Lock()
			held = append(held, gi)
			rest = rest[1:]
		}
		reg.registerLocked(held)
		busy = rest
	}
	sc.held = held[:0]
	sc.busy = busy[:0]
	for _, e := range out {
		if e != nil {
			s.observe(e)
		}
	}
	return out, nil
}

// reRegisterStride spreads the first shards of successive chunks over
// the shards: odd (the golden ratio's 32 bits), so that its multiples
// modulo the power-of-two shard count visit every shard, and chunks in
// flight at once start far apart and rarely wait for each other's locks.
const reRegisterStride = 0x9e3779b9

// lookWindow is how many shards of a chunk registerLocked holds at once.
// At 65536 shards a chunk of 4096 keys has about one key per shard, and
// each key's map lookup is a chain of cache misses (the map, its table,
// the group); looking up the keys of lookWindow shards one after the
// other, before recording any, lets those chains overlap, and the five
// shared counters are added once per window, not once per shard (their
// cache lines bounce between the cores of the chunks in flight).
// BenchmarkReRegister1M, CPU per key, three runs each (load 7): window 1
// 1800-1980 ns, 16 1450-1650, 32 1160-1420, 64 1250-1360, 256 1230-1250.
// A lookup or put of another key waits for at most a window (~32 keys)
// where it waited for one shard's keys.
const lookWindow = 32

// reChunk is one re-registration chunk being recorded: its items grouped
// by shard (order, groups), its columns, its answers (out), and the slab
// its new objects come from.
type reChunk struct {
	s      *Service
	n      *node
	items  []reItem
	order  []int32
	groups []reGroup
	c      masterapi.SSDColumns
	out    []error
	seen   uint32
	now    int64
	fill   filler // the chunk's new compact records
	sink   uint64 // keeps registerLocked's digest reads
}

// registerLocked re-registers the objects of the chunk's groups held
// (indexes into r.groups), whose shards the caller has locked, and
// unlocks them: first every key's lookup (independent of each other,
// their cache misses overlap), then each group's recording
// (registerShardLocked), then the counters, once for the window, before
// the unlocks (so Check under every shard lock sees them agree).
func (r *reChunk) registerLocked(held []int32) {
	s := r.s
	dig := r.n.dig.table()
	var sink uint64
	for _, gi := range held {
		g := r.groups[gi]
		sh := &s.shards[g.shard]
		for _, i := range r.order[g.lo:g.hi] {
			it := &r.items[i]
			it.o, it.ci = sh.objs[it.key], -1
			if it.o == nil {
				it.ci = sh.c.find(it.key, hash32(it.h))
			}
			// The slot's line, read now with the lookups' misses, is
			// cached when the recording adds to it (locked adds, whose
			// misses would not overlap).
			sl := masterapi.SlotOf(it.h, digestSlots)
			sink += uint64(dig.counts[sl].Load()) + dig.sums[sl].Load()
		}
	}
	r.sink = sink
	var created, bytes int64
	for _, gi := range held {
		g := r.groups[gi]
		c, b := r.registerShardLocked(&s.shards[g.shard], r.order[g.lo:g.hi])
		created += c
		bytes += b
	}
	if created > 0 {
		n := r.n
		s.cnt.objects.Add(created)
		s.cnt.compact.Add(created)
		s.cnt.ssdReplicas.Add(created)
		s.cnt.ssdBytes.Add(bytes)
		n.ssdReplicas.Add(created)
		n.ssdBytes.Add(bytes)
	}
	for _, gi := range held {
		s.shards[r.groups[gi].shard].mu.Unlock()
	}
}

// registerShardLocked re-registers the objects of the chunk that fall in
// sh (their indices in idx, their objects or compact records looked up in
// items[i]), under sh's lock: registerSSDLocked of each, except that a
// new object (the common case of a re-registration) is created here as a
// compact record from the chunk's own blocks (filler), and a compact
// record of the node's id (a node re-registering what the master knows)
// is refreshed in place. It returns how many objects it created and
// their bytes, for the caller to count.
func (r *reChunk) registerShardLocked(sh *shard, idx []int32) (created, bytes int64) {
	s, n := r.s, r.n
	flags := s.rebuiltFlags(r.now)
	for _, i := range idx {
		r.fill.left--
		if r.out[i] != nil {
			continue
		}
		it := &r.items[i]
		size, crc := r.c.Sizes[i], r.c.CRCs[i]
		if size > 0 && size <= recSizeMax && it.o == nil {
			ci := it.ci
			// Looked up again unless the key is its shard's only one in
			// the chunk: a key named twice is twice in one group, and the
			// first may have been recorded since the lookup.
			if len(idx) > 1 {
				if sh.objs[it.key] != nil {
					ci = -2 // registerSSDLocked's
				} else {
					ci = sh.c.find(it.key, hash32(it.h))
				}
			}
			switch {
			case ci == -1:
				h32 := hash32(it.h)
				sh.c.add(r.fill.put(it.key, crec{size: uint32(size), node: n.ix, seen: r.seen, crc: crc, h32: h32, flags: flags}), h32)
				n.dig.add(it.h, 1)
				created++
				bytes += size
				continue
			case ci >= 0 && r.refreshCompact(ci, it.h, size, crc):
				continue
			}
		}
		r.out[i] = s.registerSSDLocked(sh, n, it.key, it.h, size, crc, true, r.seen, r.now)
	}
	return created, bytes
}

// refreshCompact is registerSSDLocked of a key held as compact record ci
// whose replica is on the chunk's node's id, with the same size and crc:
// the record names the node's current incarnation and the session's
// stamp, as the replica would. It reports false, having changed nothing,
// when the record is not such a one (registerSSDLocked then thaws it).
func (r *reChunk) refreshCompact(ci int32, h uint64, size int64, crc uint32) bool {
	s, n := r.s, r.n
	x := s.cst.rec(ci)
	prev := s.incAt(x.node)
	if prev.id != n.id || int64(x.size) != size || x.crc != crc {
		return false
	}
	if prev != n { // a new incarnation (same id, same digest)
		s.countSSD(prev, h, -1, -size)
		s.countSSD(n, h, 1, size)
	}
	x.node, x.seen = n.ix, r.seen
	return true
}

// ssdObject is an object created with its one SSD replica, in one
// allocation instead of two: its ssd is rep[:1:1] (a second replica's
// append moves the replicas to a slice of their own; removals shrink it
// in place). Only its object is referred to.
type ssdObject struct {
	object
	rep [1]ssdReplica
}

// populateMin is the size from which a new array's pages are populated
// at once (populate) rather than faulted in one by one: the memory is
// fresh from the OS in a growing master, and on this project's VM a page
// fault cost about 6 us of system time, populating 2.4 GB 0.5-1.5 s of
// it against 3.6-5.4 (docs/benchmarks.md, stop 39).
const populateMin = 64 << 10

// reGroup is the items of a chunk in one shard: order[lo:hi] of
// groupByShard.
type reGroup struct {
	shard, lo, hi int32
}

// groupByShard orders the indexes of items by shard and returns them
// (order) with one group per shard present, the groups in the order of
// their shards from first (modulo the shard count) on. It sorts the
// chunk's own items by their shard's rank from first, a radix sort of
// 8 bits a pass (two passes at 65536 shards): its cost does not grow
// with the shard count (a counting sort over every shard cost ~200 us a
// chunk at 65536, whatever its size; BenchmarkPutUnderEviction
// re-registers one key per put, docs/benchmarks.md) nor, as a comparison
// sort's, with log2 of the chunk.
func (s *Service) groupByShard(sc *reScratch, items []reItem, first uint64) ([]int32, []reGroup) {
	count := len(items)
	order := sc.grow(&sc.order, count)
	groups := sc.groups[:0]
	// (rank of the shard from first) << 32 | index.
	keys, tmp := growU64(&sc.keys, count), growU64(&sc.tmp, count)
	for i := range items {
		keys[i] = (items[i].h-first)&s.mask<<32 | uint64(i)
	}
	keys = radixByRank(keys, tmp, bits.Len64(s.mask))
	for i, k := range keys {
		order[i] = int32(uint32(k))
	}
	for lo := 0; lo < count; {
		rank := keys[lo] >> 32
		hi := lo + 1
		for hi < count && keys[hi]>>32 == rank {
			hi++
		}
		groups = append(groups, reGroup{shard: int32((rank + first) & s.mask), lo: int32(lo), hi: int32(hi)})
		lo = hi
	}
	sc.groups = groups
	return order, groups
}

// radixByRank sorts keys by their bits 32 to 32+rankBits, stably (least
// significant 8 bits first), using tmp (as long as keys) as the other
// buffer, and returns the sorted one (keys or tmp).
func radixByRank(keys, tmp []uint64, rankBits int) []uint64 {
	for shift := 32; shift < 32+rankBits; shift += 8 {
		var at [256]int32
		for _, k := range keys {
			at[k>>shift&0xff]++
		}
		sum := int32(0)
		for d, c := range at {
			at[d] = sum
			sum += c
		}
		for _, k := range keys {
			d := k >> shift & 0xff
			tmp[at[d]] = k
			at[d]++
		}
		keys, tmp = tmp, keys
	}
	return keys
}

// reScratch is a chunk's working arrays, reused from chunk to chunk
// (reScratchPool): not garbage the collector must catch up with while a
// re-registration fills the heap.
type reScratch struct {
	items      []reItem
	order      []int32
	groups     []reGroup
	busy, held []int32
	keys, tmp  []uint64 // groupByShard's sort keys and radixByRank's other buffer
}

var reScratchPool = sync.Pool{New: func() any { return new(reScratch) }}

// itemsOf returns sc.items sized count.
func (sc *reScratch) itemsOf(count int) []reItem {
	if cap(sc.items) < count {
		sc.items = make([]reItem, count)
	}
	return sc.items[:count]
}

// growU64 returns *p sized n (not zeroed).
func growU64(p *[]uint64, n int) []uint64 {
	if cap(*p) < n {
		*p = make([]uint64, n)
	}
	*p = (*p)[:n]
	return *p
}

// grow returns *p sized n and zeroed.
func (sc *reScratch) grow(p *[]int32, n int) []int32 {
	if cap(*p) < n {
		*p = make([]int32, n)
	}
	*p = (*p)[:n]
	clear(*p)
	return *p
}

// put clears the keys (they point into the chunk's key bytes) and
// returns sc to the pool.
func (sc *reScratch) put() {
	clear(sc.items)
	reScratchPool.Put(sc)
}

// reItem is one object of a re-registration chunk: its key (a slice of
// the chunk's key string), its hash, and its object when the key was
// known at its lookup (registerLocked, under the shard lock).
type reItem struct {
	key string
	h   uint64
	o   *object
	ci  int32 // its compact record when o is nil, or -1
}

// presize sizes the shards' compact indexes, once per node incarnation,
// for expected more objects: a new master learning its nodes then builds
// each index once instead of growing it. The indexes of the empty shards
// (a new master's) are cut from one array shared by all, whose pages are
// populated at once: each shard's own index would be a few KiB, too small
// to populate, and its pages would fault in one by one (on this
// project's VM the largest cost of a re-registration, docs/benchmarks.md).
// Each is sized for the shard's share and four standard deviations more
// (the keys of a shard are a binomial draw): a shard that outgrows it
// moves to an index of its own, and the shared array stays allocated
// while any shard still uses its part.
func (s *Service) presize(expected int64) {
	mean := float64(expected) / float64(len(s.shards))
	size := idxSize(int(mean + 4*math.Sqrt(mean) + 4))
	idx := make([]uint32, size*len(s.shards))
	populateSlice(idx)
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		sh.c.adopt(idx[i*size : (i+1)*size : (i+1)*size])
		sh.mu.Unlock()
	}
}

// registerSSD records that n holds d on its SSD: a new object when the key
// is unknown and create is set (re-registration), else a new or refreshed
// SSD replica (one per node id). A task of n for the key is answered
// and its pin released. Without create an unknown key is OBJECT_NOT_FOUND.
func (s *Service) registerSSD(n *node, d masterapi.SSDObject, create bool) error {
	if err := validKey(d.Key); err != nil {
		return err
	}
	h := masterapi.KeyHash(d.Key)
	sh := &s.shards[h&s.mask]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	return s.registerSSDLocked(sh, n, d.Key, h, d.Size, d.CRC, create, n.dig.epoch.Load(), s.now())
}

// newSSDObject returns a new object of size and crc with one SSD replica
// on n, seen in reconcile epoch seen, in an allocation of its own.
func newSSDObject(size int64, crc uint32, n *node, seen uint32) *object {
	x := &ssdObject{object: object{size: size, crc: crc}, rep: [1]ssdReplica{{node: n, seen: seen}}}
	x.ssd = x.rep[:1:1]
	return &x.object
}

// registerSSDLocked is registerSSD of a valid key whose hash is h, under
// its shard's lock; seen is n's reconcile epoch (a replica recorded now is
// on the node's SSD: a reconcile session in progress counts it as seen,
// reconcile.go).
func (s *Service) registerSSDLocked(sh *shard, n *node, key string, h uint64, size int64, crc uint32, create bool, seen uint32, now int64) error {
	if size <= 0 {
		return errcode.Errorf(errcode.InvalidParams, "master: register SSD object: size must be > 0, got %d", size)
	}
	o := s.obj(sh, key)
	if o == nil && !create {
		return errcode.Errorf(errcode.ObjectNotFound, "master: notify: node %q persisted a key the master does not know (removed?); delete the SSD copy", n.id)
	}
	if o == nil && size > recSizeMax {
		o = newSSDObject(size, crc, n, seen)
		s.rebuiltLease(o, now)
		sh.putObj(key, o)
		s.cnt.objects.Add(1)
		s.countSSD(n, h, 1, size)
		return nil
	}
	if o == nil {
		h32 := hash32(h)
		sh.c.add(s.cst.putLoose(key, crec{size: uint32(size), node: n.ix, seen: seen, crc: crc, h32: h32, flags: s.rebuiltFlags(now)}), h32)
		s.cnt.objects.Add(1)
		s.cnt.compact.Add(1)
		s.countSSD(n, h, 1, size)
		return nil
	}
	viaTask := o.offload == n
	if viaTask {
		s.cancelTask(key, o)
		o.offloadFails = 0
		s.cnt.offloadPersisted.Add(1)
		s.met.offloadPersisted.Inc()
	}
	if o.size != size || o.crc != crc {
		return errcode.Errorf(errcode.ChecksumConflict, "master: node %q reports size %d crc %08x, metadata has size %d crc %08x",
			n.id, size, crc, o.size, o.crc)
	}
	if i := o.ssdIndex(n.id); i >= 0 {
		prev := o.ssd[i]
		if prev.node != n { // refresh: a new incarnation (same id, same digest)
			s.countSSD(prev.node, h, -1, -o.size)
			s.countSSD(n, h, 1, o.size)
		}
		o.ssd[i] = ssdReplica{node: n, viaTask: viaTask || (prev.viaTask && prev.node == n), seen: seen}
	} else {
		o.ssd = append(o.ssd, ssdReplica{node: n, viaTask: viaTask, seen: seen})
		s.room.signal() // the DRAM replica may be evicted now
		s.countSSD(n, h, 1, o.size)
	}
	return nil
}
