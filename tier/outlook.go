package tier

import (
	"fmt"

	"github.com/tierstore/tierstore/eviction"
)

// Outlook is the tier's fill level and the buckets it would evict next:
// what a node reports to the master so that SSD admission can compare a
// candidate with what it would displace (package admission, tinylfu).
type Outlook struct {
	// Capacity is Options.Capacity (0: unlimited; then High and Low are 0).
	Capacity int64
	// High and Low are the watermarks in bytes: a write that would take
	// Used above High evicts whole buckets down to Low.
	High, Low int64
	// Used is the bytes of bucket files plus writes in progress.
	Used int64
	// Victims are the next buckets the eviction policy would pick, first
	// to go first, leaving out those it would skip now (being read or
	// written, not yet announced).
	Victims []OutlookBucket
}

// OutlookBucket is one bucket of an Outlook.
type OutlookBucket struct {
	ID        uint64
	FileBytes int64 // file bytes its eviction frees
	// Keys are the objects the bucket still holds, Sizes their value
	// lengths.
	Keys  [][]byte
	Sizes []int64
}

// Outlook returns the fill level and, in eviction order, the buckets whose
// sizes first reach cover bytes (all evictable buckets if they do not),
// with the objects each still holds. It changes nothing, the eviction
// policy's order included. The bucket list is taken under the engine lock,
// the keys after it from the index, so a bucket evicted in between shows
// no keys.
func (e *Engine) Outlook(cover int64) (Outlook, error) {
	if err := e.begin(); err != nil {
		return Outlook{}, err
	}
	defer e.ops.Done()
	var o Outlook
	e.mu.Lock()
	o.Capacity = e.opts.Capacity
	if o.Capacity > 0 {
		o.High = int64(e.opts.HighWatermark * float64(o.Capacity))
		o.Low = int64(e.opts.LowWatermark * float64(o.Capacity))
	}
	o.Used = e.used + e.reserved
	ids := e.policy.Victims(max(cover, 1), func(id uint64) bool {
		b := e.buckets[id]
		return b == nil || b.readers.Load() > 0 || b.evicting || b.dead.Load() || !b.notified
	})
	for _, id := range ids {
		o.Victims = append(o.Victims, OutlookBucket{ID: id, FileBytes: e.buckets[id].size})
	}
	e.mu.Unlock()
	for i := range o.Victims {
		v := &o.Victims[i]
		keys, err := e.ix.BucketKeys(v.ID)
		if err != nil {
			return Outlook{}, fmt.Errorf("tier: outlook: %w", err)
		}
		locs, found, err := e.ix.GetMany(keys)
		if err != nil {
			return Outlook{}, fmt.Errorf("tier: outlook: %w", err)
		}
		for j, k := range keys {
			if found[j] && locs[j].Bucket == v.ID {
				v.Keys = append(v.Keys, k)
				v.Sizes = append(v.Sizes, int64(locs[j].ValueLen))
			}
		}
	}
	return o, nil
}

// SetWorthFreq gives a worth-ranking eviction policy (Options.Eviction
// "worth", package eviction) its WorthFunc: a bucket's worth per byte computed
// from the objects it still holds, each weighed with freq (the admission
// sketch's estimate). It reports whether the policy takes one. freq is
// called under the engine lock and must not call back into the engine.
//
// The policy weighs every evictable bucket at each victim choice, so a
// bucket's worth is cached until objects leave it or SetWorthFreq is
// called again: call it again whenever freq's answers change (the node
// does at each new sketch), and the next choice weighs every bucket once
// more (one index lookup per object on SSD).
func (e *Engine) SetWorthFreq(freq func(key []byte) uint32) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	va, ok := e.policy.(eviction.WorthAware)
	if !ok {
		return false
	}
	e.worthGen++
	gen := e.worthGen
	// The policy calls the WorthFunc from Victims, with e.mu held: the bucket
	// table is read directly, the index through its own lock.
	va.SetWorthFunc(func(id uint64) (float64, bool) {
		b := e.buckets[id]
		if b == nil {
			return 0, false
		}
		if b.worthGen == gen && b.worthLive == b.live {
			return b.worth, true
		}
		keys, err := e.ix.BucketKeys(id)
		if err != nil {
			return 0, false
		}
		locs, found, err := e.ix.GetMany(keys)
		if err != nil {
			return 0, false
		}
		var live [][]byte
		var sizes []int64
		for j, k := range keys {
			if found[j] && locs[j].Bucket == id {
				live = append(live, k)
				sizes = append(sizes, int64(locs[j].ValueLen))
			}
		}
		b.worth = eviction.Worth(b.size, live, sizes, freq).Density()
		b.worthGen, b.worthLive = gen, b.live
		return b.worth, true
	})
	return true
}
