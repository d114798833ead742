// Package hamaster runs a highly available master: one candidate of an etcd
// election (package ha) serving on one listener. While it is a standby it
// answers every call UNAVAILABLE_IN_CURRENT_STATUS ("not the leader");
// when it wins, it serves a new master.Service (empty metadata, rebuilt
// from the nodes) under its term, fenced by the leadership and keeping its
// removal log in etcd (ha/etcdremovals); when the leadership ends (its etcd
// session expired, it was paused past its TTL, etcd unreachable) it stops
// serving at once, drops that Service and its metadata, and campaigns again
// as a standby. Cancelling Run's context resigns, so a standby takes over
// at once. docs/ha.md, "Homes", says why this is a package of its own: it
// needs both the master and the etcd client, and neither package ha
// (linked by every node and etcd:// client) nor package master (which
// runs without etcd in embedded stores and tests) may import the other.
//
// Invariants: the listener always has a server (each switch starts the
// next server before it stops the previous one); at most one term's
// Service exists at a time, and it is closed before the next campaign
// starts; a term's Service is reachable (Service, MetricsHandler) only
// while it leads.
//
// Concurrency: Run is called once. Service and MetricsHandler may be called
// from any goroutine while Run runs; Config.OnChange is called from Run's
// goroutine.
package hamaster
