// Package master is tierstore's metadata service: the compact process that
// store nodes and clients talk to. It keeps each object's size, CRC32C and
// replicas (DRAM: in a node's DRAM segment; SSD: in a node's SSD tier),
// allocates DRAM ranges inside the segments nodes mount, grants read leases,
// evicts DRAM under pressure, expires silent nodes, and tells each node which
// objects to offload to its SSD (the offload mailbox). It never touches SSD
// files: it knows the SSD tier only through what nodes report.
//
// API (masterapi.API) is the interface. *Service implements it in-process
// (embedded deployments call it without a socket); NewServer exposes a
// Service over gRPC (service tierstore.master.v1.Master) and mastergrpc.Dial
// returns a *mastergrpc.Client that implements API over that service. Errors wrap the sentinels of package
// internal/errcode and keep them across gRPC.
//
// # Metadata
//
// Objects live in Config.Shards shards (a power of two), each a map under one
// mutex, so operations on keys of different shards do not contend. A walk
// over every object of a shard by a client's call (RemoveAll,
// RemoveByRegex, EvictDRAM of all) or by the sweep after a node died
// (shard.scanAll) releases the shard's lock every scanHold objects, so
// lookups and other keys' puts wait for at most that many objects, not a
// whole shard of a 50M-object master. The sweep clears sweepDirty before
// its walk, so a replica that becomes unreadable during it is swept next.
//
// What runs per eviction round or per tick walks only the shards that
// hold DRAM objects (shard.dram: eviction rounds, the reclaim of abandoned
// puts, promotion's victims) or objects held for their lease (shard.held:
// settleHeld), through an index of those shards (shardSets, a bitmap of
// atomic words: shardset.go), not every one of the 65536. Invariant
// (Check): a shard whose dram or held set is non-empty has its bit set;
// the bit is set under the shard lock with each entry added and cleared
// under it by the walk that finds the set empty. Segments
// are allocated by a best-fit, coalescing offset allocator (alloc.go,
// O(log n)); allocation, eviction rounds and the wait for room are in
// room.go; PutStart picks the preferred node's segment when it has room,
// else the segment with the most free bytes whose largest free extent fits.
//
// # Read and write grants
//
// With Config.Grants (--grant_secret_file) every replica GetReplicaList
// and BatchGetReplicaList answer carries a read grant for that read (node,
// key, DRAM range or SSD length; read.go, signGrants), expiring with the
// lookup's read lease, and every DRAM range PutStart and BatchPutStart
// answer carries a write grant for that put's write (node, key, range,
// put token; put.go, signWriteGrants), expiring at the put's discard
// deadline; both signed with the secret file's newest secret. The nodes
// check them (docs/security.md, Read grants, Write grants). Promotion
// tasks carry none: the node writes a promoted object itself.
//
// # Leases (Mooncake #4508, invariant 4)
//
// ExistKey and GetReplicaList grant a read lease of default_kv_lease_ttl on a
// hit. A lease promises that the object stays readable, not that a
// particular replica stays, and never that the store stops taking writes or
// SSD admissions. Every removal path honours it (docs/master.md has the
// table):
//   - DRAM eviction drops a leased object's DRAM replica only when a
//     SSD replica on a live node stays readable and every reader of
//     the lease was given one (object.dramLeaseUntil); it re-checks under
//     the shard lock before dropping a victim;
//   - Remove and RemoveAll fail with OBJECT_HAS_LEASE unless forced;
//   - the stale-handle sweep (after a node expires or a segment is
//     unmounted) removes unreadable replicas, and objects left without
//     replicas, only once the lease has expired;
//   - EvictSSDReplica (a node's SSD bucket eviction) decides key by key:
//     a leased key whose only readable replica is that node's SSD
//     one is kept (answered in Keep; the node keeps it readable), every
//     other key's replica goes;
//   - a reconcile, ReportBadReplica and an offload failure (the
//     node says the key is not on its SSD: its SSD replica goes,
//     whatever the task's state) remove the replica at once — the bytes
//     are gone — but keep a leased object's metadata until the lease
//     expires (settleEmpty).
//
// A replica on a dead node or unmounted segment is unreadable at once. A
// lookup of an object whose every replica is unreadable answers
// REPLICA_IS_GONE (-712), never OBJECT_NOT_FOUND (-704): within a lease, a
// lookup hit is followed either by a successful GetReplicaList or by
// REPLICA_IS_GONE. If another replica is readable (SSD on a live node)
// the read succeeds from it.
//
// # Puts (invariant 8)
//
// A put owns its DRAM range from PutStart until PutEnd, PutRevoke or
// put_start_discard_timeout. PutStart issues a put token (token.go: strictly
// increasing, also across restarts); PutEnd and PutRevoke must carry it,
// and a token that is not the key's current put gets
// masterapi.ErrStalePut. A non-forced Remove of a put in progress answers
// REPLICA_IS_NOT_READY; a forced one parks the range (Service.parked) until
// the put ends or its discard deadline. When eviction cannot make room at
// once, PutStart waits on the room broadcast (room.go), bounded by its
// context and put_start_max_wait; so it does while no segment is mounted
// in the start-up grace (startup_grace after New: a restarted master's or
// a new leader's nodes mount again at their next call).
// An abandoned put (PROCESSING past put_start_discard_timeout) is
// reclaimed by Tick at most every quarter of that timeout; the reclaim
// visits only the objects with a DRAM replica (shard.dram), and only a
// sweep after a node died or a segment went (sweepDirty) visits every
// object (sweep.go; BenchmarkAbandonedPutReclaim measures both,
// docs/benchmarks.md). An object kept for its lease without a replica
// (settleEmpty), or with replicas on a dead node (the sweep's clearDead),
// waits in its shard's held set; the tick revisits that set alone
// (settleHeld), not every object.
//
// # Replicas
//
// A put may ask for several DRAM replicas (PutStartRequest.Replicas),
// placed on distinct nodes by placement.go (strict by default: every one
// or the put fails; AllowFewer: as many as fit now). They belong to one
// put: one token, all Complete at PutEnd at once, which fails when any of
// their segments died. object.dram is the first, object.more the others
// (replicas.go iterates them: drams, dramOn, dramAt, removeDRAMAt). Lookups
// list every readable one; the offload task reads from one (dramSource) and
// moves to another replica's node when its source goes; DRAM eviction
// drops all of a victim's; a bad-replica report or a dead node's sweep
// drops one. docs/master.md, "Replicas on several nodes".
//
// # Eviction
//
// When a segment's use passes eviction_high_watermark_ratio (background
// loop) or an allocation fails (synchronously, then retried), one round
// drops about eviction_ratio of the evictable DRAM replicas: unpinned before
// soft-pinned, least recently used first (the last lookup hit, or the put
// for an object never read). Never evicted: hard-pinned objects, objects
// whose lease needs their DRAM replica, replicas pinned by an offload task,
// incomplete puts. Objects that keep a SSD replica keep their
// metadata. With offload_on_evict a victim without an SSD copy is queued
// for offload instead of dropped, unless its offload already failed for
// good (permanently, or maxOffloadAttempts times): then it is dropped like
// any cache entry and counted (tierstore_master_offload_dropped_victims_total).
//
// # Offload mailbox
//
// A node fetches its tasks on its heartbeat tick and whenever its offload
// is pressing (wake.go: WaitOffload answers as soon as a task of the node
// is queued while a put waits for room or while queued bytes reach a
// quarter of its DRAM, or a promotion is queued that was not tried yet:
// one that found no room waits until the node answered the offload tasks
// it fetched, its victims' among them). Prefetch (prefetch.go) is
// a promotion asked for by an ExistKey hit on an SSD-only object or by
// Prefetch, within prefetch_budget, evicting only colder objects.
//
// Each node has a bounded mailbox (offloading_queue_limit tasks, queued plus
// in flight; KEYS_ULTRA_LIMIT beyond). A key is queued at most once. Queuing
// pins the DRAM replica until NotifyOffloadSuccess answers the key (persisted
// or failed), the node expires, the task times out (offload_task_timeout),
// or the object is removed (which also deletes the task). A retryable
// failure or a timeout queues the task again, at most maxOffloadAttempts
// deliveries in all; a permanent failure does not. When to queue is the
// admission policy's decision (package admission).
//
// The offload heartbeat also carries admission state
// (masterapi.NodeAPI.Heartbeat, admission_hooks.go): the node's SSD report goes to the
// policy, the policy's sketch to the node in chunks when it asks
// (promote.go, sketchForNode). With tinylfu and
// dram_promotion_min_freq, an SSD hit of a frequent object queues a
// promotion (promote.go): a range of the node's segment owned by a new put
// token, which the node fills from its SSD before the master publishes
// the DRAM replica (PromoteEnd; invariants 1 and 8). A Remove, a new put
// or the loss of the SSD copy abandons it; nothing is published and the
// range is freed once the node answers.
//
// Removing an object (forced Remove, ReportBadReplica of its DRAM replica)
// whose task the node has already fetched does not free the DRAM range: the
// node may be copying it. The range becomes an orphan of the node's mailbox,
// freed when the node answers (a persisted answer is refused per key with
// OBJECT_NOT_FOUND, and the node deletes its copy), when the node dies, or
// at the task's deadline; a new task for the same key is not handed out
// while the orphan exists.
//
// NotifyOffloadSuccess is idempotent: one SSD replica per node and
// key. It never creates objects (that would resurrect removed keys); only
// ReRegisterSSDObjects does. A reconcile drops the node's SSD
// replicas of keys its SSD no longer holds and answers the keys the node
// must delete: a session (reconcile.go) compares per-slot digests of the
// node's keys first (kept per node id as replicas come and go) and then
// only the slots that differ, key by key, so neither side holds a key list
// and nothing is scanned when nothing changed; ReconcileEnd then scans only
// the shards of the slots where a replica went unnamed (the Keys calls
// count the replicas they stamp per slot, the digest marks the slots that
// change during the session); with 65536 shards (Config.Shards, the
// default) a shard holds ~760 objects at 50M.
// A key's shard is the low bits of masterapi.KeyHash, the same bits as its
// reconcile slot. Locks: a digest's session lock (ssdDigest.mu) is taken
// before shard locks, never under one; digestMu (the map of digests) is a
// leaf.
//
// # Liveness
//
// Nodes Ping (heartbeats and mounts count too). A node silent for
// client_ttl is expired by the background loop: its segments are unmounted,
// its replicas become unreadable, its mailbox is dropped and the lease-aware
// sweep runs. A returning node's Ping answers NEED_REMOUNT; it mounts again
// and re-registers its SSD objects (ReRegisterSSDObjects). A mount with a
// new Incarnation (or endpoint) under a known node id retires the previous
// incarnation the same way at once.
//
// # Removals are final (invariant 10)
//
// A forced removal of a leased object also waits, after its entry is
// durable, until every node that held a copy reported a DRAM cursor past
// it (its next pull; the master rings it through WaitOffload) or the
// lease ended (removewait.go): clients read keys from cached replica
// locations within the lease (docs/design.md, "Replica-location cache").
// A PutStart of such a key waits for that removal to answer.
//
// Remove, RemoveAll and RemoveByRegex send every key through removeObj
// (remove.go) and append one entry to the removal log (removals.go) under
// the shard lock that deletes the object; the entry's sequence number is a
// put token, so it covers the copies whose put token is below it and never
// a later put. The removal is acknowledged once a RemovalStore holds the
// entry (FileRemovalStore for --state_dir, ha/etcdremovals for HA, memory
// otherwise); a PutStart of a key an entry still being written covers
// waits for it. EvictDRAM appends DRAM-only entries (EvictionKey,
// EvictionEvery) the same way and answers once they are durable; a put
// never waits for those. Nodes pull durable entries (PullRemovals) with
// the DRAM records to forget (replicas dropped without an entry: evicted
// for room, bad, abandoned); ReRegisterDRAMObjects refuses a record an
// entry covers (LatestDRAM) or older than the log's origin,
// ReRegisterSSDObjects a key an entry above the node's last reported SSD
// cursor covers. Tick trims entries past removal_log_retention or beyond
// removal_log_limit. Locks: the log's mutex is a leaf, taken under shard
// locks; the store is written by one caller at a time (group commit),
// under no lock of the Service; cursorMu is a leaf.
//
// # High availability
//
// With Config.HA set the Service is one elected leader of several masters
// (ha.go, docs/ha.md): check consults HA.Fence before every call (once the
// leadership is not valid every call answers ErrNotLeader, code
// UNAVAILABLE_IN_CURRENT_STATUS, and changes nothing), HA.Term is stamped
// on Ping answers, offload tasks and (Interceptor) every gRPC answer. A
// Service serves one term and starts empty: nodes mount with
// HoldAllocation and re-register their DRAM objects
// (ReRegisterDRAMObjects, dramreg.go; nothing is allocated in a held
// segment) and their SSD objects. During the rebuild window misses are
// answered ErrNotLeader so callers ask again; rebuilt objects get a read
// lease of default_kv_lease_ttl; when it closes, offloads are queued again.
// A single master restarted on the removal log a predecessor wrote
// (--state_dir) rebuilds the same way, window included (rebuild.go).
//
// # Stats
//
// Stats has cluster totals and one row per node incarnation (PerNode):
// segment size and use, replicas and bytes per tier, offload queue; retired
// incarnations are listed (Alive false) while replicas still point at them;
// the replica totals count live incarnations only.
//
// # Concurrency
//
// *Service and mastergrpc.Client are safe for concurrent use. Lock order: shard.mu,
// then segment.mu or mailbox.mu (never both mailbox.mu and segment.mu: an
// orphan is taken out of its mailbox before its range is freed);
// Service.nodesMu is never held while taking a shard lock. parkMu (the
// parked puts) and the room broadcast's mutex are leaves: taken under a
// shard lock or none, nothing taken under them. Check holds every shard
// lock, taken in ascending shard index order; an SSD re-registration chunk
// holds up to lookWindow (32) of them at once, each taken with TryLock
// (it waits, with Lock, only while it holds none), so neither waits for
// the other in a cycle. evictMu (one eviction round at a time) and a reconcile session's
// ssdDigest.mu are taken before shard locks; digestMu is a leaf. Counters,
// reconcile digests and the shard indexes (shardSets; a shard's bit
// changes only under its lock, read under none) are atomics; a path that adds a shard's counters
// once for several objects (an SSD re-registration chunk) adds them before
// releasing that shard's lock, so Check, under every shard lock, finds
// them equal to the metadata. An SSD re-registration chunk takes its
// shards' locks in windows of up to lookWindow shards, in an order that
// starts at a shard chosen per chunk (reRegisterTurn, an atomic), with
// TryLock: a busy shard is taken after the free ones, so the chunks in
// flight do not queue on the same locks; it looks up every key of a window
// before recording any (their cache misses overlap) and adds the window's
// counters before its unlocks. Its new objects are compact records
// (compact.go): an SSD-only object with no DRAM copy, pin or task is a
// 32-byte pointer-free crec in a cblock (records and key bytes after the
// block's prefix, the chunk's common key prefix kept once; one block
// filled by one chunk, or the shared loose block for single
// re-registrations and the shared frozen block for freezes, both under
// cstore.mu), referenced from its shard's compactSet (an open-addressing
// index guarded by the shard lock). A key is in sh.objs or in sh.c,
// never both (Check verifies it, and that each block's live count equals
// the references to it). A record carries its read lease (crec.lease)
// and the rebuild lease (a flag): ExistKey, GetReplicaList, their
// batches and Prefetch answer from the record in place, writing the
// lease into it, and every removal path reads it (recLeased). s.obj
// thaws a record into an *object, leases included, under the shard lock
// at every other lookup that would change it; sweeps, removals by
// pattern and reconciles change records in place and thaw only a leased
// record they would drop. A DRAM eviction or a promotion not loaded that
// leaves an *object as what a record stands for freezes it back into one
// (Service.freeze), unless a RemoveAll or RemoveByRegex is scanning
// (removeScans); a non-forced Remove refused by a record's lease leaves
// it a record. A block is released when its last record goes and no one
// is filling it; the block table (an atomic pointer, grown by doubling)
// is read without a lock, blocks are written only under the shard lock
// of the record's key.
// Time comes from Config.Clock, so tests
// drive leases and TTLs with a ManualClock and call Tick instead of sleeping.
package master
