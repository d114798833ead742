// Package admission decides which objects deserve the SSD tier: when the
// master queues an offload task for an object. The master calls a Policy at
// three moments — the end of a put, a demand lookup, and the choice of an
// object as a DRAM eviction victim — and queues a task when it answers true.
//
// Policies shipped (master flag offload_admission_policy; empty lets
// Mooncake's flags choose, exactly as Mooncake does):
//   - Eager (the default with enable_offload): every object at PutEnd.
//   - OnEvict (offload_on_evict): an object only when DRAM eviction picks it;
//     it is offloaded instead of dropped.
//   - ReadThreshold (offload_read_admission_threshold=N): after N demand
//     lookups of a DRAM-resident object.
//   - TinyLFU (offload_admission_policy=tinylfu): frequency-based admission
//     that compares a candidate with what it would displace on SSD.
//
// Counting rules of ReadThreshold (the master applies the first two, the
// policy the rest): a key looked up several times in one batch counts once;
// lookups made by the offload path do not count; an object already on SSD or
// already queued is skipped and its count is not advanced; the count lives in
// the object's metadata (Object.Reads) and is reset when the object leaves
// DRAM.
//
// # TinyLFU
//
// Frequencies. A Sketch (count-min, 4 rows of 4-bit counters, 8 counters
// per cached object and row, conservative update, behind a doorkeeper
// Bloom filter) counts every demand lookup the master answers — hits and
// misses alike, so keys that left both tiers are still remembered — and
// every put, except the put that follows a miss of the same key (one
// request, one access). Every SampleFactor x (objects the master holds)
// accesses the counters are halved and the doorkeeper cleared (TinyLFU's
// reset), so frequencies describe roughly the last period.
//
// Where it runs. On the master: it is the only place that sees every
// lookup, including misses. The node holds what admission must compare
// with — its SSD's fill level and the worth of the buckets it would evict
// next — and reports it (masterapi.SSDReport, computed from tier.Engine.Outlook with
// eviction.Worth). A bucket's worth is what it still holds: the sum over
// its live objects of estimated frequency x size, and its density is that
// per byte of object space, dead space (objects removed or re-offloaded
// elsewhere) included.
//
// When it decides. When DRAM eviction picks an object (like OnEvict): the
// SSD then holds objects DRAM dropped, not copies of what DRAM holds, so
// DRAM and SSD together keep more distinct objects (exclusive caching; on
// a loop slightly larger than both this is what makes 0.9 x MIN reachable).
// TinyLFUConfig.AtPut admits at PutEnd instead.
//
// The test. A candidate of estimated frequency f and size s on node n:
//   - n never reported: admitted (as offload_on_evict would);
//   - the SSD bytes admitted to n since its report (its tasks still
//     queued or in flight, and admissions after the report), plus the
//     candidate's, fit under the low watermark, or under the high one
//     while the room is free: admitted
//     ("room"). The room between the watermarks is free until an SSD has
//     evicted, and whenever the adaptive margin is 0 or TinyLFUConfig.
//     FreeRoom is set; otherwise a candidate that needs it must beat the
//     first victim's density by more than the margin ("won", else
//     "lost"): that room is what the next eviction takes back, and on
//     Zipf traffic with bursts of one-off keys free room let each burst
//     fill it and push out a whole bucket of popular keys (on the churn
//     bench's zipf0.9-bursts 0.829 of MIN with free room, 0.854 tested,
//     SSD writes 0.49 and 0.17 of eager's; tenants 0.621 and 0.697;
//     docs/bench/bench.md);
//   - otherwise those bytes are taken from the reported victims in
//     eviction order; the candidate is admitted ("won") only if f exceeds
//     the density of the victim where they run out by more than the
//     margin — the incumbent wins ties — else rejected ("lost"), or
//     "no_victim" when the node reported none;
//   - an object's SSD bytes are bounded by the file of a bucket holding
//     it alone (ssdCost: header block, its data to the block boundary, its
//     trailer entry and the footer; 8 KiB over the aligned data for keys
//     up to 4008 bytes), since an offload round may end with a bucket of
//     one object; outstanding tasks count at the admitted objects'
//     average. Priced at the victims' average overhead instead, the edge
//     candidate of a round was admitted to room it did not fit and the
//     tier evicted a bucket for it (about 1 run in 20 of
//     node.TestSSDReportReachesMaster under -race). The bound admits less
//     than fits while objects share buckets, until the next report counts
//     what was written;
//   - an admitted candidate may still be refused by the SSD write budget
//     ("budget", ssd_write_budget): a token bucket of one second of budget
//     per node, from which a candidate of frequency f may only spend down
//     to (1 - f/16) of the burst, so the least frequent candidates are
//     refused first.
//
// The margin. In a loop larger than the cache, a key just seen counts one
// more than a key of the same loop still waiting for its turn; with no
// margin the newcomer always wins and the SSD turns over like LRU, keeping
// nothing. A margin of one access keeps a fixed part of the loop. On
// recency-driven traffic the same margin turns away objects that come back
// soon, so the margin adapts between 0 and MaxMargin, in the manner of
// ARC's ghost lists (ghost.go), with two of the new-key window's return
// ghosts (below: sampled keys, the window's clock and horizon). One
// remembers the candidates the margin alone turned away (their estimate
// beats the victim's density, not by more than the margin) and, at margin
// 0, those admitted that one step up would turn away: the decisions the
// margin makes. The other remembers the objects pushed out of SSD. Every
// 64 outcomes (returns within the horizon, or expiries), if those
// candidates came back more often than pushed-out objects by more than
// two standard errors of the difference, the margin steps down; in the
// opposite case up; a difference within the noise moves nothing, nor
// does a step in which no pushed-out object was counted (the cost of
// admitting is then unknown; a loop that rejects everything would
// otherwise talk itself into thrashing). Until churn stop 43 every
// rejection was remembered, in a list as long as the pushed-out one: on
// the churn bench rejections came 12 to 24 times faster than objects were
// pushed out, so the two rates were of different spans of time, most
// rejected keys would have lost at any margin, and any difference moved
// the margin (docs/benchmarks.md, stop 43).
//
// Cold puts (ColdPutter, admission_cold_put_freq, default 2). The master
// orders DRAM victims least recently used first, a put counting as a use.
// On a loop or scan larger than DRAM+SSD that empties DRAM of every block
// before its next use, while the SSD keeps its fixed part: DRAM gets no
// hit. So the master asks the policy, at every PutEnd, whether the put is
// cold; a cold put is the first DRAM victim (the newest cold put first,
// before every warm object), and a lookup hit makes it warm. TinyLFU
// answers cold when the key is coming back (its estimate, this access
// included, reaches ColdPutFreq: it left DRAM and SSD before) and its
// node's SSD would turn it away now (lost or no_victim): DRAM then keeps
// the objects it holds for longer, as SSD admission keeps its incumbents.
// A key the SSD would take, and every new key, enters warm. On the churn
// loops this restores DRAM's fixed part (0.716 of MIN without, 0.908
// with); on conversations and mixed it moves nothing beyond the run-to-run
// spread (docs/bench/bench.md).
//
// The new-key window (window.go). A new key (estimate below ColdPutFreq)
// enters warm, so DRAM is a window of recency in front of the SSD, unless
// the window finds that new keys are worth less than that: a warm new key
// holds a DRAM slot for one DRAM residency (the horizon, measured: a
// moving average of the age at which DRAM evicts warm new keys, in
// lookups), and what that slot would otherwise keep longer is the cache's
// marginal object, the kind the SSD pushes out. Ghosts count, over that
// same horizon, how often new keys are looked up again after their put,
// in two classes, and how often objects the SSD evicted are looked up
// again after their eviction (counts halved every 512 outcomes). The
// classes: a key's first put, and the put of a new key cached before
// (its estimate fell below ColdPutFreq again), told apart by a Bloom
// filter of the keys put lately (two bits a key in 16 bits per cached
// object, at most 32 MiB, emptied once a quarter of its bits are set:
// about twice the population of distinct keys, 2^25 keys at the cap). While new keys of its class come back
// less often, by more than two standard errors of the difference (each
// ghost having counted at least 32 outcomes), a new key the SSD would
// turn away is put cold, as a key coming back is: a loop's first pass, a
// wide Zipf set's tail keys, a burst of one-off keys no longer push
// DRAM's frequent keys out. A conversation's new turn, the newly popular
// keys of a moving set come back within the horizon more often, and enter
// warm. The classes are different populations on KV-cache traffic (a new
// turn and a burst are first puts; a loop's blocks and a Zipf tail come
// back cached before), and pooled one rate hid the other: on the churn
// bench's tenants, tinylfu+worth went from 0.761 / 0.755 / 0.742 of MIN
// (seeds 0 / 1 / 2) to 0.776 / 0.755 / 0.753 with the classes, every
// other trace within 0.001 (docs/benchmarks.md, churn stop 44). Rates,
// not fitted thresholds (ARC's ghosts, Caffeine's adaptive window;
// Caffeine's hill climbing on the hit ratio was tried and needs more
// periods of stable traffic than the churn traces have). Keys are sampled
// (one in population/MinPopulation by hash) so the ghosts stay bounded.
// In the churn bench it puts new keys cold on tenants and prefixes (about
// 700 and 1400 puts), about 100 of zipf0.9-bursts', none on the other
// traces (stop 44; tinylfu+worth on tenants went from 0.708 of MIN to
// about 0.73 with the window, stop 37); in this package's miniature
// store, tenants-like traces go from 0.72-0.75 of MIN to 0.81-0.87.
// TinyLFUConfig.WarmNewKeys turns it off.
//
// Promotion. Promote answers whether an object read from SSD is frequent
// enough (dram_promotion_min_freq) to deserve a DRAM copy. The master asks
// it at every lookup answered by SSD only and queues the key for the node
// holding it; the node copies it from its SSD into a DRAM range the master
// allocated and the master publishes the replica once the node confirms
// (master/promote.go, docs/master.md).
//
// Metrics (TinyLFU is a prometheus.Collector the master registers):
// tierstore_admission_decisions_total{result,reason},
// tierstore_admission_lookups_total{outcome}, _ssd_hit_ratio,
// _admitted_bytes_total, _ssd_hit_bytes_total, _written_per_read_bytes,
// _promotions_total, _cold_puts_total, _sketch_halvings_total. Stats
// returns them too.
//
// # Wire format (the offload heartbeat)
//
// The offload heartbeat request carries the node's masterapi.SSDReport (High, Low,
// Used: int64; Victims: repeated {FileBytes int64, Span int64, Worth double};
// rpcpb SSDReport, converted by mastergrpc and master); the master passes it to Service.ReportSSD, which adds
// the node's outstanding tasks. The node weighs its victims with the
// master's sketch, which the heartbeat replies carry when the node's copy
// (whose version the request sends back) has fallen 1/64 of the ageing
// period behind, at most once per --admission_sketch_interval: in chunks
// (SketchChunk, sketchchunk.go: words of 4 rows of Width()/16 words of
// counters then the doorkeeper, with the geometry and the halvings so
// far), at most a quarter of the RPC message limit each, which the node
// fetches in back-to-back heartbeats and joins (SketchAssembly); the key
// hash has a fixed seed, so the estimates are the same in both processes.
// The sketch is about 24 bytes per cached object: 24,613 bytes at the
// default width (8192 counters a row, up to 1024 cached objects), 384 MiB
// at 50 million (2^26 counters a row, 2^31 doorkeeper bits: 24 chunks).
// TinyLFU.SketchChunk copies the words under the policy's lock 1 MiB at a
// time and encodes them after, so a transfer never holds up lookups; a
// halving or resize between two chunks makes the node start over (its
// words would mix periods), which the chunk's Resets and geometry reveal.
// A node without a sketch (its first transfer not complete) sends no
// report, and its candidates are admitted as "no_report".
//
// # Invariants
//
//   - A Policy never queues an object that is already on SSD or already
//     queued (every policy checks OnSSD and Queued).
//   - The sketch never under-estimates a key's accesses since the last
//     halving (up to saturation at 16).
//   - ColdPut is true only on a node whose report makes the admission
//     test reject the key (lost or no_victim, or the write budget would
//     refuse it), never when ColdPutFreq is 0, and for a key whose
//     estimate is below ColdPutFreq (a new key) only while the new-key
//     window counted enough outcomes and new keys of its class (first
//     put, or cached before) came back within the horizon less often than
//     pushed-out objects (never with WarmNewKeys).
//   - TinyLFU never admits a candidate beyond the high watermark unless its
//     frequency exceeds the displaced victim's density plus the margin
//     (ties go to the incumbent), and never spends the write budget below
//     the floor of the candidate's frequency. Once an SSD eviction was
//     observed and while the margin is above 0 (FreeRoom unset), the same
//     holds for a candidate that fits under the high watermark but not
//     under the low one, against the first victim.
//
// # Concurrency
//
// Eager, OnEvict, ReadThreshold and None are stateless values, safe for
// concurrent use. TinyLFU is safe for concurrent use: one mutex protects
// the sketch, the per-node reports, the margin and the new-key window
// (whose ghosts the margin shares, and its put filter); its counters are
// atomic. The master calls OnLookup with
// the object's shard lock held, so the *Object it passes is owned by the
// call; TinyLFU never calls back into the master.
package admission
