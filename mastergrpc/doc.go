// Package mastergrpc is the master's gRPC transport (service
// tierstore.master.v1.Master, internal/rpcpb): Client, which implements
// masterapi.API over it, and the conventions the master's server shares
// with it (MaxMessageSize, TermTrailer, the replica conversion used both
// ways). The server itself is package master's (master.NewServer).
//
// Dial takes host:port, or "scheme://..." for a scheme another package
// registered (RegisterScheme). Package ha registers etcd://
// h1:2379,h2:2379[/prefix]: its connection follows the elected leader,
// refuses answers of a deposed leader's term and sends calls again across
// a failover within the caller's deadline (ha/masterconn.go, docs/ha.md).
// A program opts into it by importing package ha; one that does not links
// no etcd client (the light client, client/deps_test.go). A host:port
// connection sends a call again while the master answers "ask again"
// (UNAVAILABLE_IN_CURRENT_STATUS with gRPC's RetryInfo, AskAgainStatus:
// a restarted master still rebuilding its metadata from the nodes; a
// standby's "not the leader" is returned at once), within AskAgainFor and
// the caller's deadline
// (askagain.go): a lookup waits for the node that holds the object to
// re-register it instead of answering a miss. A call that finds such a
// connection failed asks for a connection attempt at once and waits for
// it, at most ReconnectWait, so a master back from a restart serves the
// next call instead of gRPC's backoff failing it unsent.
//
// Every call names the caller's protocol version (rpcpb.WithVersion); a
// master of another version refuses it with VERSION_MISMATCH. Errors carry
// the server's codes (errors.Is(err, codes.ErrObjectNotFound) works, and
// masterapi.ErrStalePut is restored from its code); transport failures
// wrap codes.ErrRPCFail.
//
// Client is safe for concurrent use. The scheme registry is written at
// init time and read by Dial (schemesMu).
package mastergrpc
