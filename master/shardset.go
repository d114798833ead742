package master

import (
	"math/bits"
	"sync/atomic"
)

// shardSet is a set of shard indexes read without any shard lock: one bit
// per shard in atomic words. It indexes the shards whose per-shard set
// (shard.dram, shard.held) may be non-empty, so that the walks over those
// sets (DRAM eviction rounds, the reclaim of abandoned puts, promotion's
// victims, settleHeld) visit only those shards and not every one of the
// up to 65536 (Config.Shards; BenchmarkPutUnderEviction).
//
// Invariant (checked by Check): whenever a shard's lock is free, the
// shard's bit is set if its set is non-empty. The bit is set under the
// shard lock right after an entry is added, and cleared under the shard
// lock only by a walk that found the set empty; it may stay set over an
// empty set (entries go stale without a walk) until the next walk.
//
// A walk (each) reads the bits without the shard locks, so an entry added
// to a shard whose bit the walk read clear is not visited: that is an
// entry added after the walk passed the shard, which no walk over shards
// one lock at a time visits either.
type shardSet struct {
	words []atomic.Uint64
}

func newShardSet(shards int) shardSet {
	return shardSet{words: make([]atomic.Uint64, (shards+63)/64)}
}

// add sets shard i's bit. Caller holds shard i's lock.
func (b *shardSet) add(i int) {
	w, m := &b.words[i>>6], uint64(1)<<(i&63)
	if w.Load()&m == 0 { // the common case once set: no write to a shared line
		w.Or(m)
	}
}

// remove clears shard i's bit. Caller holds shard i's lock and has found
// the shard's set empty.
func (b *shardSet) remove(i int) {
	b.words[i>>6].And(^(uint64(1) << (i & 63)))
}

// has reports whether shard i's bit is set.
func (b *shardSet) has(i int) bool {
	return b.words[i>>6].Load()&(uint64(1)<<(i&63)) != 0
}

// each calls fn for every shard whose bit is set, in ascending order. A
// bit set or cleared during the call may or may not be visited.
func (b *shardSet) each(fn func(i int)) {
	for wi := range b.words {
		w := b.words[wi].Load()
		for w != 0 {
			fn(wi<<6 | bits.TrailingZeros64(w))
			w &= w - 1
		}
	}
}
