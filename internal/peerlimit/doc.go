// Package peerlimit bounds what one peer can make a tierstore server
// spend, so that a misbehaving or hostile peer (even one with a valid
// certificate) cannot stall the others (docs/security.md, Bounds per
// peer; issue 25).
//
// A Guard holds one process's Limits and the per-address records they
// are enforced on: connections open per peer address (Listener: a
// connection beyond --max_conns_per_peer is closed as soon as it is
// accepted), bytes a peer's requests hold in the process (Hold:
// --max_peer_buffer, the node's SSD reads), and the gRPC options of
// --max_streams_per_conn (HTTP/2 SETTINGS_MAX_CONCURRENT_STREAMS: gRPC
// clients wait for a free stream) and --tls_handshake_timeout (a
// connection must finish its TLS handshake, or send its first bytes,
// within it). Every refusal is one of the sentinels below, counted in
// tierstore_peer_refusals_total{limit} and logged at most once a second
// per limit.
//
// A peer is an IP address (the host of the connection's remote address):
// clients behind one NAT share a budget, and a peer with many addresses
// has one per address; the bounds make one address unable to starve the
// others, not a distributed attack harmless.
//
// # Invariants
//
//   - A peer address never has more than Limits.ConnsPerPeer connections
//     accepted and not closed through Listener.
//   - The bytes held for one address (Hold, not yet released) never
//     exceed Limits.PeerBuffer.
//   - Every refusal increments exactly one counter (its limit's label).
//
// # Concurrency
//
// A Guard is safe for concurrent use: Guard.mu protects the per-address
// records and the time of each limit's last log line; the counters are
// Prometheus's (atomic).
package peerlimit
