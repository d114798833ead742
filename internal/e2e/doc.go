// Package e2e holds tierstore's end-to-end tests: real processes
// (tierstore-master, tierstore-node, tierstore) built with go build into a
// temporary directory, talking gRPC over 127.0.0.1, with real bucket files
// and pebble indexes under t.TempDir().
//
// Scenarios (issue 5): two nodes cross-read after the DRAM replicas are
// dropped; kill -9 of a node mid-offload and restart on the same SSD
// directory; kill -9 of the master and restart; a node that stops pinging
// (SIGSTOP) gives REPLICA_IS_GONE inside the lease and OBJECT_NOT_FOUND
// after it; the demo command prints PASS; objects put with 2 replicas on
// three nodes (library and `tierstore put --replicas 2`) read back
// byte-identical after kill -9 of a holder, and leave nothing once removed
// (issue 21).
//
// Invariants checked: no object is ever read with wrong bytes (every value is
// compared with the bytes that were put, independently of the CRC the client
// checks); every object the master reported on SSD before a crash is
// readable after the restart.
//
// Concurrency: each test owns its processes and kills them (by pid) in
// t.Cleanup. Every wait polls with a deadline; nothing sleeps in place of
// synchronisation. The binaries are built once per package run (TestMain).
package e2e
