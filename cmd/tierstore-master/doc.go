// Command tierstore-master runs the tierstore master: the metadata service
// of a tierstore cluster (package master). It accepts Mooncake's master flag
// names and units, so an existing command line such as
//
//	tierstore-master --rpc_port=39486 --eviction_high_watermark_ratio=0.7 \
//	  --eviction_ratio=0.2 --default_kv_lease_ttl=11000 \
//	  --enable_offload=true --offload_on_evict=true
//
// starts it unchanged. Once listening it prints
// "tierstore-master listening on HOST:PORT" on stdout. SIGTERM or SIGINT stop
// it cleanly (pending RPCs finish, exit status 0). Invalid flags stop start-up
// with a one-line error naming the flag and exit status 2.
//
// With --enable_ha=true --etcd_endpoints=h1:2379,h2:2379 it is one
// candidate of an etcd election (ha.go, docs/ha.md): it listens at once as a
// standby answering UNAVAILABLE_IN_CURRENT_STATUS, prints
// "tierstore-master leading term=N on HOST:PORT" when elected and serves a
// new master.Service for that term, and when the leadership ends drops it,
// prints "tierstore-master standby (term N ended)" and campaigns again.
// SIGTERM resigns.
//
// Run "tierstore-master --help" for every flag with its default (printed to
// stdout, exit status 0).
//
// Invariants: the master starts only with a valid configuration (every flag
// checked before anything binds); it binds only the address given by
// rpc_address (127.0.0.1 by default); it prints the listening line only once
// the gRPC listener is open, so a caller may connect as soon as it reads it.
//
// Concurrency: main runs the gRPC server and the optional metrics HTTP
// server on their own goroutines and waits for a signal or a server error;
// shutdown is GracefulStop bounded to 10 s, then Stop. With enable_ha one
// listener is handed to the gRPC server of the moment (standby or leader of
// a term, handoff); the next server starts before the previous stops. The
// master's own
// concurrency contract is package master's.
package main
