package client

import (
	"container/list"
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tierstore/tierstore/internal/errcode"
	"github.com/tierstore/tierstore/masterapi"
)

// The replica-location cache (issue 24; docs/design.md, "Replica-location
// cache"). A lookup (GetReplicaList, BatchGetReplicaList) answers the
// object's size, CRC32C and replicas and grants a read lease; the client
// keeps that answer per key until shortly before the lease ends (by this
// client's clock, counted from before the lookup was sent: leaseMargin), so
// that a Get, GetInto, GetIntoParts or GetAlloc of a cached key reads the
// node straight away, without the master's round trip. Within the lease
// the object stays readable (invariant 4: no eviction, non-forced removal
// or sweep takes it; a forced removal answers only once the nodes holding
// it applied it: master/removewait.go), and the node refuses a range that
// no longer holds the put the entry names (the data-plane read names the
// put token, since wire.DataVersion 4) and an SSD read of a removed key. A cached
// read that fails for any reason (refused, missing, checksum, grant
// expired, unreachable) drops the entry and falls back to the lookup path
// once, which reads, falls back over replicas and reports as before. This
// client's own Put, Remove, RemoveAll and RemoveByRegex drop the entries
// they concern (a removal also drops lookups that were in flight).

// Defaults of Config.LocationCacheEntries and LocationCacheBytes.
const (
	DefaultLocationCacheEntries = 1 << 16
	DefaultLocationCacheBytes   = 32 << 20
)

// leaseMargin is how long before its lease's end a cached answer stops
// being used: a quarter of the lease, at most maxLeaseMargin. It covers
// the skew between this host's clock and the master's (the lease end is
// the master's time) and the time a read takes to reach the node.
func leaseMargin(ttl time.Duration) time.Duration { return min(ttl/4, maxLeaseMargin) }

const maxLeaseMargin = time.Second

// locCache is the client's replica-location cache: at most maxEntries
// entries and maxBytes of them (an estimate: locEntrySize), least
// recently used dropped first.
type locCache struct {
	maxEntries int
	maxBytes   int64

	mu    sync.Mutex // protects ents, lru and bytes
	ents  map[string]*list.Element
	lru   list.List // of *locEntry, most recently used at the front
	bytes int64

	// gen counts this client's removals: a lookup that was sent before
	// one is not cached (it may predate the removal).
	gen atomic.Uint64

	hits, misses, stale atomic.Int64
}

type locEntry struct {
	key   string
	info  masterapi.ObjectInfo
	until time.Time // this client's clock (monotonic): used before it
	size  int64
}

// newLocCache returns the cache Config asks for, or nil (disabled).
func newLocCache(entries int, bytes int64) *locCache {
	if entries < 0 || bytes < 0 {
		return nil
	}
	if entries == 0 {
		entries = DefaultLocationCacheEntries
	}
	if bytes == 0 {
		bytes = DefaultLocationCacheBytes
	}
	return &locCache{maxEntries: entries, maxBytes: bytes, ents: map[string]*list.Element{}}
}

// locEntrySize estimates the memory an entry holds.
func locEntrySize(key string, info masterapi.ObjectInfo) int64 {
	n := int64(2*len(key)) + 160 // key (map and entry), entry, element, map slot
	for _, r := range info.Replicas {
		n += int64(len(r.Node)+len(r.Endpoint)+len(r.Segment)+len(r.Grant)) + 96
	}
	return n
}

// get returns key's cached answer when its time is not over.
func (lc *locCache) get(key string) (masterapi.ObjectInfo, bool) {
	if lc == nil {
		return masterapi.ObjectInfo{}, false
	}
	now := time.Now()
	lc.mu.Lock()
	el, ok := lc.ents[key]
	if !ok {
		lc.mu.Unlock()
		lc.misses.Add(1)
		return masterapi.ObjectInfo{}, false
	}
	e := el.Value.(*locEntry)
	if !now.Before(e.until) {
		lc.removeLocked(el)
		lc.mu.Unlock()
		lc.misses.Add(1)
		return masterapi.ObjectInfo{}, false
	}
	lc.lru.MoveToFront(el)
	info := e.info
	lc.mu.Unlock()
	return info, true
}

// generation is the count of removals so far; a lookup takes it before it
// is sent and hands it to put.
func (lc *locCache) generation() uint64 {
	if lc == nil {
		return 0
	}
	return lc.gen.Load()
}

// put keeps info, the answer of a lookup of key sent at sent (this
// client's clock) while the removal count was gen, until leaseMargin
// before its lease ends. An answer without a lease or a complete replica,
// or that came after a removal of this client, is not kept.
func (lc *locCache) put(key string, info masterapi.ObjectInfo, sent time.Time, gen uint64) {
	if lc == nil || info.LeaseDeadline.IsZero() || !hasComplete(info) {
		return
	}
	// The lease's remaining time as the master counts it (wall clocks),
	// counted from before the lookup was sent (this client's monotonic
	// clock): the entry ends no later than the lease, up to the skew the
	// margin covers.
	ttl := time.Until(info.LeaseDeadline)
	ttl -= leaseMargin(ttl)
	if ttl <= 0 {
		return
	}
	e := &locEntry{key: key, info: info, until: sent.Add(ttl), size: locEntrySize(key, info)}
	if e.size > lc.maxBytes {
		return
	}
	lc.mu.Lock()
	defer lc.mu.Unlock()
	if lc.gen.Load() != gen {
		return
	}
	if el, ok := lc.ents[key]; ok {
		lc.removeLocked(el)
	}
	lc.ents[key] = lc.lru.PushFront(e)
	lc.bytes += e.size
	for len(lc.ents) > lc.maxEntries || lc.bytes > lc.maxBytes {
		lc.removeLocked(lc.lru.Back())
	}
}

func hasComplete(info masterapi.ObjectInfo) bool {
	for _, r := range info.Replicas {
		if r.Status == masterapi.Complete {
			return true
		}
	}
	return false
}

// removeLocked drops el. Caller holds mu.
func (lc *locCache) removeLocked(el *list.Element) {
	e := lc.lru.Remove(el).(*locEntry)
	delete(lc.ents, e.key)
	lc.bytes -= e.size
}

// drop forgets key's entry.
func (lc *locCache) drop(key string) {
	if lc == nil {
		return
	}
	lc.mu.Lock()
	if el, ok := lc.ents[key]; ok {
		lc.removeLocked(el)
	}
	lc.mu.Unlock()
}

// dropStale forgets key's entry if it still holds info's answer (a read
// of it failed); a newer answer stays.
func (lc *locCache) dropStale(key string, info masterapi.ObjectInfo) {
	if lc == nil {
		return
	}
	lc.stale.Add(1)
	lc.mu.Lock()
	if el, ok := lc.ents[key]; ok && sameAnswer(el.Value.(*locEntry).info, info) {
		lc.removeLocked(el)
	}
	lc.mu.Unlock()
}

func sameAnswer(a, b masterapi.ObjectInfo) bool {
	return a.LeaseDeadline.Equal(b.LeaseDeadline) && a.CRC == b.CRC && a.Size == b.Size && len(a.Replicas) == len(b.Replicas)
}

// removed is a removal by this client of key (or, with all, of any key: a
// pattern): the entries it concerns are dropped, and lookups in flight are
// not cached.
func (lc *locCache) removed(key string, all bool) {
	if lc == nil {
		return
	}
	lc.mu.Lock()
	lc.gen.Add(1)
	if all {
		lc.ents = map[string]*list.Element{}
		lc.lru.Init()
		lc.bytes = 0
	} else if el, ok := lc.ents[key]; ok {
		lc.removeLocked(el)
	}
	lc.mu.Unlock()
}

// len returns the entries and their estimated bytes.
func (lc *locCache) len() (int, int64) {
	if lc == nil {
		return 0, 0
	}
	lc.mu.Lock()
	defer lc.mu.Unlock()
	return len(lc.ents), lc.bytes
}

// localObjectReader is a LocalNode that reads a DRAM range only while it
// holds the object of a given put (node.Node): the check a remote node
// makes of a cached read (node/readcheck.go), which ReadRangeInto skips.
// The cache serves the local node's DRAM replicas only through it.
type localObjectReader interface {
	ReadObjectIntoParts(ctx context.Context, segment string, off int64, token uint64, parts [][]byte) (uint32, error)
}

// remember keeps info, a lookup's answer for key sent at sent, in the
// cache when its best replica is in DRAM and readable from a cached answer
// (cachedReplica). An object read from SSD is looked up at every get, as
// before: the master counts those lookups for promotion (an SSD hit the
// admission policy finds worth a DRAM copy), and the lookup's round trip
// is small beside the SSD read.
func (c *Client) remember(key string, info masterapi.ObjectInfo, sent time.Time, gen uint64) {
	if c.cache == nil {
		return
	}
	if r, ok := c.cachedReplica(info); ok && r.Kind == masterapi.DRAM {
		c.cache.put(key, info, sent, gen)
	}
}

// cachedReplica returns the best complete replica of info (the rank a
// read starts at; of several remote DRAM replicas, the first: it does not
// turn spreadRemoteDRAM) and whether a cached answer may be read from it:
// remote over the data plane, or the local node's through its object check.
func (c *Client) cachedReplica(info masterapi.ObjectInfo) (masterapi.Replica, bool) {
	best, rank := masterapi.Replica{}, -1
	for _, r := range info.Replicas {
		if k := c.rank(r); r.Status == masterapi.Complete && (rank < 0 || k < rank) {
			best, rank = r, k
		}
	}
	local := c.local != nil && best.Node == c.local.Name()
	switch {
	case rank < 0, !local && strings.HasPrefix(best.Endpoint, "inproc:"):
		return best, false
	case rank == 0:
		_, ok := c.local.(localObjectReader)
		return best, ok
	}
	return best, true
}

// readCached reads key from its cached answer, if any, into the buffer
// bufFor gives. done reports that the get is settled (err is its outcome);
// otherwise the caller looks the key up.
func (c *Client) readCached(ctx context.Context, key string, start time.Time, bufFor func(masterapi.ObjectInfo) ([][]byte, error)) (done bool, err error) {
	info, ok := c.cache.get(key)
	if !ok {
		return false, nil
	}
	if _, ok := c.cachedReplica(info); !ok {
		c.cache.drop(key)
		return false, nil
	}
	return c.readCachedInfo(ctx, key, info, start, bufFor)
}

// readCachedInfo reads key from the cached answer info as readBest reads a
// lookup's (best replica first, falling back, reporting a replica that
// fails its checksum or that its node does not hold), every read naming
// the put it expects. Read, the get is done. When the failures were a
// checksum mismatch or replicas gone under the read, the get ends as a
// fresh lookup's read would (readAgain: a lookup, then the new object, or
// the error); any other failure (refusal, unreachable node, grant) leaves
// the get to a lookup (done false). Either way the entry is dropped.
func (c *Client) readCachedInfo(ctx context.Context, key string, info masterapi.ObjectInfo, start time.Time, bufFor func(masterapi.ObjectInfo) ([][]byte, error)) (done bool, err error) {
	buf, err := bufFor(info)
	if err == nil {
		err = c.readBestOf(ctx, info, buf, start, true)
		if err == nil {
			c.cache.hits.Add(1)
			c.touched(key)
			return true, nil
		}
	}
	c.log.Debug("cached replica location failed", "key", key, "err", err)
	c.cache.dropStale(key, info)
	if errors.Is(err, errGoneUnderRead) || errors.Is(err, errcode.ErrChecksumMismatch) {
		return true, c.readAgain(ctx, info, err, start, bufFor)
	}
	return false, nil
}

// readCachedReplica reads replica r of a cached answer into buf: a DRAM
// range names the put it expects (the node refuses another's), and the
// local node's DRAM is read only through its object check.
func (c *Client) readCachedReplica(ctx context.Context, info masterapi.ObjectInfo, r masterapi.Replica, buf [][]byte) error {
	if r.Kind != masterapi.DRAM {
		// An SSD read names no put: a node the master expired while
		// clients still reach it could serve an old version of the key
		// (its DRAM reads of a cached location stop before that:
		// node.outOfTouch). Left to a lookup.
		return errcode.Errorf(errcode.ReplicaIsGone, "client: a cached answer is read from DRAM replicas only")
	}
	if c.local != nil && r.Node == c.local.Name() {
		lr, ok := c.local.(localObjectReader)
		if !ok {
			return errcode.Errorf(errcode.ReplicaIsGone, "client: the local node cannot check a cached replica location")
		}
		got, err := lr.ReadObjectIntoParts(ctx, r.Segment, r.Offset, r.PutToken, buf)
		if err != nil {
			return err
		}
		return checkLocal(got, info.CRC, partsLen(buf), "DRAM")
	}
	return c.readReplicaToken(ctx, info, r, buf, r.PutToken)
}
