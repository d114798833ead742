// Package node is tierstore's store node.
//
// A Node (Start) owns a DRAM segment: an off-heap, page-aligned
// anonymous mapping (Segment) that the master allocates object ranges in.
// It mounts the segment at the master and pings it; when the master answers
// NEED_REMOUNT (the node expired, or the master restarted) it mounts again
// and re-registers everything its SSD tier holds. It serves clients on one
// port: the data plane (package wire's frames: writes received straight
// into their claimed range, with the same put-token checks as the
// in-process WriteRange; DRAM reads sent from the mapping without a
// copy; SSD reads streamed from the tier in 256 KiB pieces through pooled
// page-aligned buffers, ssdread.go) and, beside it, gRPC for its counters
// (internal/rpcpb NodePeer: NodeStats). Put and Get latencies are
// histograms by tier (tierstore_node_{put,get}_seconds).
//
// With offload enabled the node opens the SSD tier engine (package tier) and
// runs the offload heartbeat: every HeartbeatInterval it drains its task
// queue at the master, reads each task's source bytes from its own segment
// (checking their CRC32C), calls tier.Offload, and answers every task
// through NotifyOffloadSuccess. The same heartbeat carries the tier's SSD
// report to a tinylfu master, takes its frequency sketch (bucket eviction "worth" ranks by it) and runs the
// promotions it hands out: the object is loaded from the tier into the
// segment range the master allocated, written as the promotion's put token,
// and confirmed with PromoteEnd (admission.go), up to promoteParallel at
// once beside the round's offload, answered in groups as they complete; an
// SSD read of a key whose promotion is loading takes that load's bytes
// (promote.go). The round waits for its promotions. Every ReconcileInterval it reconciles its SSD
// keys with the master's list of its replicas (a digest per hash slot,
// then the keys of the ranges that differ; reconcile.go). Bucket eviction tells the master
// (EvictSSDReplica, once per victim bucket) before the bytes disappear;
// the master refuses (OBJECT_HAS_LEASE) a bucket holding a leased object's
// only readable copy, and the node hands that error back to the tier, which
// keeps the bucket for now (invariant 4). A notify the master does not
// answer (transport failure, master down) is sent again with backoff until
// the offload task timeout (it is idempotent); a bucket the master never
// answered is kept and re-registered, and only an explicit refusal rolls it
// back (invariant 9). Close drains: the offload round in progress finishes
// and answers its tasks (notify retries stop at Close), the segment is
// unmounted, in-flight peer calls finish, then the tier is closed.
//
// # Invariants
//
//   - A data-plane read of DRAM is served only for exactly the range of a
//     complete object the node stores, no byte of which a newer put has
//     claimed (readcheck.go); any other range is refused (ErrNotAnObject),
//     so freed ranges and puts in progress are not readable remotely. A
//     read that names a put token (a client's cached replica location) is
//     served only when the range holds that put's object
//     (ReadObjectIntoParts checks the same in process).
//   - An SSD read of a key that a removal the node applied to its DRAM
//     records covers, and its SSD has not applied yet, is refused
//     (removedOnSSDPending): a forced removal of a leased object answers
//     once the holders' DRAM cursors pass it (master/removewait.go).
//   - With a grant secret (Config.Grants, --grant_secret_file) every
//     data-plane read, DRAM or SSD, must carry the read grant the master
//     made for it at the lookup (grants.go); otherwise it is refused
//     PERMISSION_DENIED (grant.ErrMissing, ErrForged, ErrExpired) and
//     counted. So must every data-plane write carry the write grant the
//     master made for its range at PutStart (node, key, range, put
//     token), checked before the range is claimed: a refused write claims
//     and writes nothing. Reads and writes of a client in this process,
//     and promotions (the node's own writes), are not checked.
//   - Commit before publish (docs/design.md invariant 1): a SSD replica is
//     announced only from the tier's per-bucket notify, which runs after the
//     bucket is durable and indexed; keys the master refuses there are
//     removed from SSD again, so the node never keeps an unannounced object.
//   - Durable stays durable (invariant 9): a bucket that is durable and
//     indexed is rolled back only when the master explicitly refuses its
//     notify. A notify that gets no answer (transport failures until
//     Config.OffloadTaskTimeout, or Close) keeps the bucket and flags a
//     re-registration; a master that answers it does not know the node
//     (restarted) gets a remount at once and the re-registration.
//   - Every offload task handed to the node is answered exactly once
//     (invariant 3): persisted (bucket notify), already present (after its
//     SSD bytes are checked against the task's CRC) or failed with a
//     retryable flag and a reason. Tasks whose source range is invalid or
//     fails its CRC are failed without touching the SSD. A task that can
//     never succeed is failed permanently (never retryable): an object
//     larger than Config.BucketSizeLimit (the largest object that fits in
//     a bucket; it stays in DRAM only) and a full SSD (tier.ErrNoSpace).
//     Failures are counted by cause (failures.go) and logged once per
//     cause and round, with the count, the SSD directory and a key prefix.
//   - The tier only ever sees a copy of a task's source bytes whose CRC32C
//     matched the task (computed while copying, in one pass, and handed to
//     the tier with the copy so that the bucket records it without a pass
//     of its own: a byte changed after that pass fails the SSD read), and a bucket whose committed size or CRC differs
//     from its tasks is refused (rolled back): a DRAM range reused under
//     the offload (a forced Remove frees it at once) can never reach SSD
//     under the old key.
//   - A corrupt SSD object found by a read is dropped at the master
//     (answered as an offload failure of the key: the node's word about its
//     own SSD drops its SSD replica even inside a lease) as well as
//     from the tier's index. The node streams SSD bytes unchecked (the
//     receiver's check is the transfer's one): an in-process read checks
//     them on the node as it copies them, a remote client that finds them
//     bad asks again with wire.FlagVerify and the node then reads them
//     through tier.Load, which checks and drops. Any replica whose bytes fail the object's CRC32C at a reader is reported
//     (ReportBadReplica) and dropped by the master.
//   - The SSD keeps only objects the master knows: a key the master refuses
//     in a notify (removed during its offload, unknown, other size/CRC) is
//     deleted again, and so are the keys a reconcile answers as unwanted.
//     Exception: after a remount (possibly a restarted master that knows no
//     keys yet) refused-as-unknown keys are kept and re-registered, and a
//     reconcile answer received across a remount is ignored.
//   - A read never returns bytes whose length or CRC32C differ from the
//     object's metadata (invariant 5): such a replica is a miss.
//   - Put ownership (invariant 8): a segment write carries its put's token
//     (PutStart's answer). The node keeps, per segment, disjoint claims
//     (range -> token of the put that last wrote it, claims.go) and refuses
//     (ErrRangeNotOwned, INVALID_PARAMS over gRPC) a write overlapping a
//     claim of a newer put, chunk by chunk, so a writer that outlived its
//     put never overwrites the bytes of the put that now owns the range.
//     A data-plane write claims its range before reading its payload and
//     receives it in place (rangeWrite, wire.RangeWriter): every socket
//     read into the segment is made under that check; a write that fails
//     (wrong CRC32C, short, disconnected) is not recorded.
//     Token 0 is refused (ErrNoPutToken) once the node has seen a token.
//     The table is bounded (claimsLimit); claims are forgotten at a
//     remount (the master may be a new one).
//   - A reconcile never races an offload commit or a re-registration: all
//     run under roundMu, so a key list sent to the master is never older
//     than a notify already sent; a pending re-registration runs first.
//   - High availability (ha.go, docs/ha.md): a complete write whose header
//     names its object is recorded per range (unless a newer put claimed
//     the range meanwhile); after every mount (HoldAllocation) the records
//     whose bytes still match their CRC32C are re-registered
//     (ReRegisterDRAMObjects), so the master allocates nothing in the
//     segment before it knows the live objects. The node keeps the highest
//     leadership term seen and ignores Ping answers and offload tasks of
//     older terms.
//   - Removals are final (removals.go, docs/design.md invariant 10): the
//     node pulls the master's removal log every PingInterval, before each
//     re-registration and between fetching an offload round's tasks and
//     writing them; it forgets the DRAM records an entry covers (and those
//     the pull's forget list names), removes the SSD keys an entry covers
//     in one synced batch and then stores its cursor with the tier
//     (SSDTier.SetMark); a tier the master's log cannot answer for drops
//     every copy. The SSD part runs under roundMu, so an SSD copy is
//     always newer than every entry the node has applied.
//
// # Concurrency
//
// A Node is safe for concurrent use. A node runs four loops
// (ping, removal log pull, offload heartbeat, reconcile); offload rounds, re-registration and
// reconcile are serialised by Node.roundMu; the ping loop never waits for
// them (a long offload round must not make the node miss its TTL), it only
// remounts and flags a re-registration for the heartbeat loop. Segment
// reads and writes copy under a read lock that Close takes exclusively
// before unmapping. Node.ownMu protects the put claims: a claim takes it
// exclusively, each write copy (an in-process copy, or one non-blocking
// socket read straight into the segment) holds it shared from its
// ownership check to the end of the copy, never across a wait for the
// socket; recording a write's object takes it exclusively too.
// nodeHA.recMu protects the records, regMu serialises DRAM
// re-registrations, pingMu serialises pings (the ping loop and the leader
// follower, a fifth goroutine when the master connection follows etcd).
// nodeRemovals.syncMu serialises pulls (taken after roundMu when the SSD
// part is applied, alone for the DRAM part), nodeRemovals.mu protects the
// cursors and the entries applied lately (a leaf).
package node
