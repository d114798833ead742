// Package master is tierstore's metadata service (see doc comment in
// service.go once implemented): objects, replicas, leases, pins, DRAM
// segments and their allocator, eviction, node liveness and the offload
// mailbox. API is the interface; *Service implements it in-process and
// *Remote over gRPC.
package master
