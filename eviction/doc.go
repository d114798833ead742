// Package eviction chooses which SSD buckets to evict when the tier is above
// its high watermark.
//
// A Policy tracks buckets by id with their sizes in bytes and, on request,
// lists victims in eviction order: Victims(need, skip) walks the buckets from
// the first to be evicted, leaves out those for which skip returns true (the
// engine skips buckets being written or read), and stops as soon as the sizes
// listed sum to at least need, or when there are no more buckets. Victims does
// not remove anything: the engine deletes the bucket files, then calls Remove.
//
// Policies (New takes the name):
//
//   - "lru": least recently used first, where a use is Add or Touch (the
//     engine calls Touch when it reads from the bucket). The default.
//   - "fifo": oldest Add first; Touch does nothing. Cheapest and
//     scan-proof, but evicts hot buckets as readily as cold ones.
//   - "lru2": a segmented LRU that protects buckets read at least twice
//     from one-hit traffic. A new bucket enters a probation segment; its
//     second read promotes it to a protected segment. Victims come from
//     probation (least recently used first), then from protected. The
//     protected segment holds at most 80% of the tracked bytes: when it
//     exceeds that, its least recently used buckets are demoted to the
//     most recently used end of probation, where one more read promotes
//     them again. Under plain LRU a scan that reads many cold buckets once
//     (a long prompt prefilled once, a re-registration sweep) pushes out
//     buckets that are read over and over; under lru2 the scan's buckets
//     stay in probation and are evicted first. sim_test.go measures the
//     policies' hit ratios on a Zipf working set interleaved with one-hit
//     scans (figures: docs/benchmarks.md, "Bucket eviction policies on a
//     scan mix").
//   - "worth": a victim is the bucket of lowest worth per byte among all
//     the tracked buckets (ties: the least recently used; until churn stop
//     40 only the 8 least recently used were compared, docs/benchmarks.md). A bucket's worth is what it still holds (Worth, a
//     masterapi.SSDVictim): the
//     sum over its live objects of estimated frequency x size, per byte
//     of object space, dead space included, so a bucket hollowed out by
//     removals and re-offloads goes before a full one of equal heat. The
//     frequencies come from a WorthFunc the tier engine hands over through
//     WorthAware (the admission sketch, package admission); without one
//     the policy is lru.
//
// A Policy is not safe for concurrent use. The tier engine calls it under its
// own lock (the one that protects its bucket table), and skip and a WorthFunc
// are called with that lock held, so they must not take it again.
// Worth is a pure function of its arguments.
package eviction
