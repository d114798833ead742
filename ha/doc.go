// Package ha gives tierstore highly available masters on top of etcd:
// leader election for masters, a fence that tells a leader when it must stop
// acting, and a resolver that tells nodes and clients which master leads.
// Consensus is etcd's (docs/design.md, "High availability"); this package
// adds no protocol of its own. The integration rules for master, node and
// client are in docs/ha.md.
//
// # Election
//
// Campaign(ctx, Config) opens an etcd session (a lease of SessionTTL,
// default 3 s, kept alive by the etcd client) and runs
// go.etcd.io/etcd/client/v3/concurrency's Election under Config.Prefix
// (default "/tierstore/master"): each candidate puts a key
// Prefix/<lease-id> holding its RPC address, attached to its lease; the
// candidate whose key has the lowest create revision leads, the others block
// in Campaign until every older key is gone (deleted on Resign, or expired
// with its lease when the leader died). After etcd's Campaign returns,
// Campaign re-checks that its own key still exists with its lease (etcd's
// Campaign waits for older keys only and would not notice its own key
// expiring meanwhile), and retries with a new session after any failure,
// until ctx ends.
//
// # Terms
//
// Leadership.Term() is the create revision of the leader's key. It is
// strictly greater for every later leader: etcd revisions only grow, a key
// is never re-created with an old revision, and a candidate leads only
// after every key created before its own is gone, so no later leader can
// hold an older key. Terms survive etcd restarts (revisions are persisted)
// but not a wipe of etcd's data. Resolvers report the same number
// (the key's CreateRevision), so nodes can reject commands stamped with an
// older term than one they have seen.
//
// # Fencing
//
// A leader must stop acting once another candidate may have been elected.
// Leadership.Valid() (and Check, its error form) is that test, and the
// argument for it is:
//
//  1. The keepalive goroutine reads the clock (sentAt) before it sends each
//     keepalive request, and when etcd confirms it with a TTL, sets
//     validUntil = max(validUntil, sentAt + TTL - SafetyMargin).
//  2. etcd renewed the lease while handling that request, no earlier than
//     sentAt, to expire TTL after that moment (a new etcd leader only
//     extends leases). So the lease, and with it our key, exists until at
//     least sentAt + TTL; etcd deletes an expired lease's keys only after
//     expiry (its expiry scan runs every 500 ms).
//  3. A standby can win only after our key is deleted, hence not before
//     sentAt + TTL > validUntil (Resign and a deleted key take the fence
//     down first, in this process, before the key goes).
//  4. Valid reads the clock itself at each call and compares it with
//     validUntil; it does not rely on a goroutine having noticed anything.
//     The clock is CLOCK_BOOTTIME on Linux: it keeps running while the
//     process is stopped (SIGSTOP) and while the machine is suspended, and
//     NTP never steps it. A leader paused past its TTL therefore gets false
//     from its first Valid call after it resumes, before any write.
//  5. Once false, Valid stays false (even if a confirmation of a request
//     sent before the pause arrives later); the process must campaign again
//     and lead under a new term.
//
// SafetyMargin (default SessionTTL/6) absorbs clock-rate differences
// between this host and etcd and the short step from a successful Valid to
// the write it guards. No local check can cover a pause that falls between
// the check and the write reaching its target; that gap is closed by the
// term: nodes reject commands from a term older than one they have
// registered with (docs/ha.md).
//
// Done() is closed (and Err says why) when the fence goes down, etcd says
// the lease is gone, the session ends, the leader key is deleted, its watch
// fails, or Resign is called; the Leadership then deletes its key if it is
// still its own and revokes the lease (best effort), so a standby need not
// wait for the TTL.
//
// # Resolution
//
// ParseMasterURL reads a --master value: a plain host:port is one master
// used directly (Term 0); etcd://h1:2379,h2:2379[/prefix] names an etcd
// cluster; a query ?ca=FILE&cert=FILE&key=FILE reaches it over TLS
// (EtcdTLS, also Config.TLS of a candidate). A Resolver reads the leader (the first-created key under the
// prefix, etcd's own rule) and watches the prefix; on any watch failure it
// re-reads and re-watches with capped backoff, and it re-reads every
// ResyncInterval even when the watch is quiet. It survives etcd restarts and
// leadership changes; while etcd is unreachable it keeps the last leader.
// Current, Changed, WaitLeader and WaitNewer expose it.
//
// # Following the leader
//
// Linking this package registers the etcd:// scheme of mastergrpc.Dial
// (masterconn.go): a mastergrpc.Client dialed with an etcd:// address sends
// each call to the resolved leader, refuses answers stamped with a term
// older than the newest seen (mastergrpc.TermTrailer), and sends a call
// again across a failover within the caller's deadline when it cannot have
// been applied, or when applying it twice is harmless. Programs that take
// etcd:// addresses (tierstore, tierstore-node) import this package; the
// light client does not, and links no etcd.
//
// # Dependencies
//
// This package imports the etcd client and the master's gRPC transport
// (mastergrpc), never the etcd server: that is imported by ha/etcdserver,
// ha/hatest and cmd/tierstore-etcd only, for tests and development.
//
// # Concurrency
//
// Every exported method of Leadership and Resolver may be called from any
// goroutine. A Leadership runs two goroutines (keepalive, monitor) until it
// ends; Resign waits for them. A Resolver runs one until Close. A
// master connection (masterconn.go) is safe for concurrent calls; it runs
// one goroutine per call in flight to watch for a newer leader. Locks and
// atomics are documented where they are declared.
package ha
