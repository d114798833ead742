// Package client is tierstore's client library: Put, Get, Exists, Remove,
// DRAM eviction and their batch forms, against a master (in-process
// masterapi.ClientAPI or a gRPC address) and the store nodes that hold the
// bytes. Config.MasterAddr is host:port, or etcd://h1:2379,h2:2379 for the
// elected leader of highly available masters when the program imports
// package ha (import _ "github.com/tierstore/tierstore/ha", which registers
// the scheme): calls follow the leader and are sent again across a
// failover within their deadline (mastergrpc.Dial, docs/ha.md). Without it
// an etcd:// address is refused at New, and the client links no etcd.
//
// New connects a Client to a master. Put asks the master for a DRAM range (on the local node when
// there is one), writes the bytes and completes the put; PutWith and
// BatchPutWith take PutOptions (Replicas: that many DRAM replicas on as
// many nodes, written in parallel, published together); Get (or GetInto,
// into the caller's buffer without an allocation) asks for the
// replica list (which grants a read lease) and reads the best replica
// first: local DRAM, remote DRAM (of several, the next in turn, so that the
// readers of a replicated object share its nodes), local SSD, remote SSD, verifying size and
// CRC32C and falling back to the next replica on any failure; a replica
// that fails the checksum, and an SSD replica whose node answers that it
// does not hold the object, are reported to the master (ReportBadReplica),
// which stops listing them (a node that cannot be reached is not reported:
// plain fallback). When every replica fails the checksum, or the master
// answers that the replicas read are no longer the object's (removed,
// evicted or put again under the read: its range reused, its SSD key
// re-offloaded; not corruption, counted in ReadStats.RemovedUnderRead),
// Get, GetInto and the batch forms look the key up once more and read the
// new object, or answer OBJECT_NOT_FOUND (REPLICA_IS_GONE inside a lease),
// never CHECKSUM_MISMATCH for bytes that were not damaged.
//
// Replica-location cache (loccache.go): a lookup's answer whose best
// replica is in DRAM is kept per key until shortly before the read lease
// it granted ends (a quarter of the lease, at most 1 s, before), bounded by
// Config.LocationCacheEntries and LocationCacheBytes (LRU; negative
// disables it), and Get, GetInto, GetIntoParts, GetAlloc and the batch
// gets read a cached key straight from its nodes, without the master's
// round trip. A cached read names the put it expects (the node refuses a
// range that holds another put's object); any failure drops the entry and
// ends as a lookup's read would, or looks the key up once. This client's
// Put drops the key's entry, Remove, RemoveAll and RemoveByRegex the
// entries they concern; another client's forced removal of a leased object
// answers only once the holders refuse it (docs/design.md,
// "Replica-location cache"). ReadStats counts hits, misses and stale
// entries. A call's follow-ups (a failed put's revoke, a bad-replica
// report) run within its deadline and, once it has passed, in the
// background (Close waits for them). Exists, Remove, RemoveAll,
// RemoveByRegex, EvictDRAM and the batch forms complete the API; BatchPut goes in pipelined waves (the next
// wave's ranges are asked for while the current one is written). Single
// puts made concurrently share their PutEnds (coalesce.go): a PutEnd that
// finds one in flight waits and goes with the others that did as one
// BatchPutEnd when it returns. Errors
// wrap the sentinels this package re-exports from
// internal/errcode (ErrObjectNotFound, ErrReplicaGone, ..., and Code, CodeOf),
// checked with errors.Is, whether the master is local or remote.
//
// Gather and scatter: PutParts, BatchPutParts, GetIntoParts and
// BatchGetIntoParts take one object as several of the caller's buffers (a
// KV-cache block from one buffer per layer): one object, one CRC32C over
// the whole computed part by part, the parts written to the socket with
// one writev (or copied straight into the local node's segment) and read
// from the socket (or the local segment or SSD) straight into each part in
// order; no part is copied into an intermediate buffer.
//
// Values travel on the nodes' data plane (package wire): frames over TCP,
// several transfers in flight per connection, written from and read into
// the caller's memory, each checked once against the object's CRC32C by
// the receiver. A single get's read and a single put's write take a
// connection of their own (up to wire.OwnBusy at once) and their
// goroutine reads the reply itself (wire.WithCallerReads); batches share
// the pooled connections, their replies read by each connection's reader. Config.Observer is told the latency of every Put and Get
// by tier; package client/clientmetrics turns that into Prometheus
// histograms without this package depending on Prometheus.
//
// A node in the same process (package node) is reached without a socket
// through Config.LocalNode, an interface (LocalNode) defined here so that
// the client does not depend on the node: a program that only puts and
// gets links neither pebble, io_uring, the SSD tier nor the master's
// implementation (docs/design.md, package map). Package embedded runs a
// master, a node and a client in one process.
//
// # Invariants
//
//   - A read never returns bytes whose length or CRC32C differ from the
//     object's metadata (docs/design.md invariant 5): such a replica is a
//     miss, and the next replica is tried.
//   - A remote reader never allocates more than the object's size from the
//     master, whatever a peer announces, and GetInto never writes beyond
//     its buffer (a buffer shorter than the object is ErrBufferTooSmall,
//     with nothing written).
//   - A cached replica location is used only inside the read lease its
//     lookup granted (docs/design.md invariant 4), and a cached get that
//     starts after a Remove (of any client) returned never returns the
//     removed object's bytes.
//
// # Concurrency
//
// A Client is safe for concurrent use; batch calls run up to
// batchParallelism items at once. The location cache is one LRU under
// one mutex (locCache.mu), held only to find, insert or drop an entry.
package client
