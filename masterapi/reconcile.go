package masterapi

import (
	"fmt"
	"math/bits"
	"unsafe"
)

// Reconcile at scale (docs/design.md invariant 6). A node holding tens of
// millions of SSD objects cannot send its whole key list in one message,
// and a master must not scan every object of the cluster per node per
// reconcile when nothing changed. So a reconcile is a session of three
// calls, each bounded by one batch:
//
//  1. ReconcileBegin: the node sends a SlotDigest of its SSD keys: the key
//     space is cut into Slots hash slots (KeyHash), and each slot has a
//     count and a sum of a per-key hash. The master keeps the same digest
//     of the SSD replicas it lists for the node, maintained as
//     replicas come and go, and answers the slots whose digests differ.
//     Equal digests mean equal key sets (but for a 64-bit hash collision),
//     so when nothing changed the call costs O(Slots) at both ends and
//     nothing else.
//  2. ReconcileKeys, repeated: the node sends, in batches, every key it
//     holds in the differing slots; the master marks the node's replica of
//     each as seen and answers the keys it does not want on that node
//     (ReconcileKeysResult.Unwanted).
//  3. ReconcileEnd: the master drops the node's SSD replicas in the
//     differing slots that no batch of the session marked, and answers how
//     many. Only the metadata shards holding those slots are scanned, and
//     of those only the ones holding a slot where the master lists more
//     of the node's replicas than the batches named (a slot whose keys
//     the node only gained is not scanned at all).
//
// The master's memory is a batch (plus a fixed-size digest per node id,
// and per session a count per slot); the node's is a batch plus its
// digest. Replicas the master records for
// the node during the session count as seen (they are on the node's SSD).
// Sessions of one node id do not overlap: a Begin supersedes the previous
// session, whose Keys and End are then refused (ErrInvalidParams), so a
// stale session never drops anything.

// MaxReconcileSlots is the finest digest resolution: a SlotDigest has a
// power of two slots, at most this many. 2^18 since master protocol 9
// (2^14 before): at 50M keys a slot holds about 190, so D drifted keys
// send about 190*D (10,000 random drifts touch 3.7% of the slots, not the
// 46% of 2^14); the digest is 12 bytes a slot (3 MiB at the master per
// node id that holds SSD replicas, a Begin message of up to 2.6 MiB).
const MaxReconcileSlots = 1 << 18

// keysPerSlot is the number of keys per slot a node aims at when it
// chooses its digest's resolution (SlotsFor).
const keysPerSlot = 256

// KeyHash is the stable 64-bit hash of a key that master and nodes share:
// a key's reconcile slot is its low bits, and the master's metadata shard
// its low bits too (so a slot lies in known shards). It is not keyed and
// not for security; it only needs to spread keys evenly, and to be the same
// in every process and build.
func KeyHash(key string) uint64 { return keyHash(key) }

// KeyHashBytes is KeyHash of a key held as bytes.
func KeyHashBytes(key []byte) uint64 {
	return keyHash(unsafe.String(unsafe.SliceData(key), len(key))) // read only, not retained
}

const (
	h0 = 0x9e3779b97f4a7c15
	h1 = 0xc2b2ae3d27d4eb4f
	h2 = 0x165667b19e3779f9
)

// fold multiplies a and b into 128 bits and xors the halves.
func fold(a, b uint64) uint64 {
	hi, lo := bits.Mul64(a, b)
	return hi ^ lo
}

// le64 reads 8 bytes of k at i, little endian.
func le64(k string, i int) uint64 {
	_ = k[i+7]
	return uint64(k[i]) | uint64(k[i+1])<<8 | uint64(k[i+2])<<16 | uint64(k[i+3])<<24 |
		uint64(k[i+4])<<32 | uint64(k[i+5])<<40 | uint64(k[i+6])<<48 | uint64(k[i+7])<<56
}

func keyHash(k string) uint64 {
	n := len(k)
	h := h0 ^ uint64(n)*h1
	i := 0
	for ; n-i >= 16; i += 16 {
		h = fold(le64(k, i)^h^h1, le64(k, i+8)^h2)
	}
	var a, b uint64
	if n-i >= 8 {
		a = le64(k, i)
		i += 8
	}
	for s := 0; i < n; i, s = i+1, s+8 {
		b |= uint64(k[i]) << s
	}
	h = fold(a^h^h1, b^h2)
	return mix64(h)
}

// mix64 is a 64-bit finaliser: every input bit affects every output bit.
func mix64(h uint64) uint64 {
	h ^= h >> 33
	h *= 0xff51afd7ed558ccd
	h ^= h >> 33
	h *= 0xc4ceb9fe1a85ec53
	h ^= h >> 33
	return h
}

// DigestAddend is what one key with hash h adds to its slot's sum: a second
// mix of h, so that the sum does not depend on the bits that chose the
// slot.
func DigestAddend(h uint64) uint64 { return mix64(h ^ h2) }

// SlotOf is the slot of a key with hash h in a digest of slots slots
// (a power of two).
func SlotOf(h uint64, slots int) int { return int(h & uint64(slots-1)) }

// SlotsFor is the digest resolution a node holding keys SSD objects uses:
// about keysPerSlot keys per slot, a power of two between 1 and
// MaxReconcileSlots.
func SlotsFor(keys int64) int {
	r := 1
	for r < MaxReconcileSlots && int64(r)*keysPerSlot < keys {
		r <<= 1
	}
	return r
}

// ValidSlots reports whether r is a digest resolution the master accepts:
// a power of two between 1 and MaxReconcileSlots.
func ValidSlots(r int) bool {
	return r >= 1 && r <= MaxReconcileSlots && r&(r-1) == 0
}

// SlotDigest summarises a set of keys: per hash slot, how many keys and
// the sum (modulo 2^64) of their DigestAddend. Adding and removing a key are
// inverse operations, so the master keeps its digest up to date as
// replicas come and go.
type SlotDigest struct {
	Counts []uint32
	Sums   []uint64
}

// NewSlotDigest returns an empty digest of slots slots (ValidSlots).
func NewSlotDigest(slots int) SlotDigest {
	return SlotDigest{Counts: make([]uint32, slots), Sums: make([]uint64, slots)}
}

// Slots is the digest's resolution.
func (d SlotDigest) Slots() int { return len(d.Counts) }

// Add adds a key with hash h.
func (d SlotDigest) Add(h uint64) {
	r := SlotOf(h, len(d.Counts))
	d.Counts[r]++
	d.Sums[r] += DigestAddend(h)
}

// addBatchBucketBits is how many high bits of a slot AddHashes groups a
// batch by: a group's slots span slots>>addBatchBucketBits of the digest
// (1024 slots, 12 KiB, at 2^18), which stay in the core's cache while the
// group is added. (6 bits, 48 KiB groups: 74-93 ns a key in the measure
// of AddHashes' comment; 8 bits: 63-76.)
const addBatchBucketBits = 8

// AddHashes adds keys with hashes hs, as Add does for each (the digest is
// the same). A digest larger than a core's cache (2^18 slots: 3 MiB) is
// added in groups of nearby slots: adding keys one by one in hash order
// misses the cache twice a key. A node's digest pass over 10M synthetic
// keys (key, KeyHashBytes, add; CPU per key on this loaded 2-core VM):
// 2^14 slots one by one 66-74 ns, 2^18 one by one 140-178 ns, 2^18 in
// batches of 8192 63-76 ns (docs/benchmarks.md, stop 37). scratch is
// reused between calls; its new value is returned.
func (d SlotDigest) AddHashes(hs, scratch []uint64) []uint64 {
	slots := len(d.Counts)
	if slots <= 1<<14 {
		for _, h := range hs {
			d.Add(h)
		}
		return scratch
	}
	shift := bits.Len(uint(slots-1)) - addBatchBucketBits
	var start [1<<addBatchBucketBits + 1]int
	for _, h := range hs {
		start[SlotOf(h, slots)>>shift+1]++
	}
	for g := 1; g < len(start); g++ {
		start[g] += start[g-1]
	}
	if cap(scratch) < len(hs) {
		scratch = make([]uint64, len(hs))
	}
	scratch = scratch[:len(hs)]
	next := start
	for _, h := range hs {
		g := SlotOf(h, slots) >> shift
		scratch[next[g]] = h
		next[g]++
	}
	for _, h := range scratch {
		d.Add(h)
	}
	return scratch
}

// Validate reports a malformed digest.
func (d SlotDigest) Validate() error {
	if !ValidSlots(len(d.Counts)) || len(d.Sums) != len(d.Counts) {
		return fmt.Errorf("masterapi: reconcile digest of %d counts and %d sums: want a power of two up to %d, the same for both",
			len(d.Counts), len(d.Sums), MaxReconcileSlots)
	}
	return nil
}

// ReconcileSession answers ReconcileBegin.
type ReconcileSession struct {
	// ID names the session in ReconcileKeys and ReconcileEnd.
	ID uint64
	// Differ lists, in increasing order, the slots (of the node's digest
	// resolution) whose digests differ: the node sends every key it holds
	// in them. Empty: the node's SSD and the master agree; the session is
	// over (no ReconcileEnd needed).
	Differ []uint32
}

// ReconcileKeysResult answers one ReconcileKeys batch.
type ReconcileKeysResult struct {
	// Unwanted lists the keys of the batch the master does not want on
	// that node: no such object (never known, or removed), or an object
	// that lists no replica of the node and has no offload task of it. The
	// node deletes them from its SSD.
	Unwanted []string
}
