// Package wire is the bulk data protocol between clients and store nodes:
// chunked range writes into a node's DRAM segment, range reads out of it,
// reads of objects on a node's SSD tier, and the checksums that travel with
// them (docs/design.md, package map). It depends on neither package client
// nor package node: the client dials nodes through Pool and Peer, the node
// serves the same messages (internal/rpcpb NodePeer) with SendChunks and
// its own handlers.
//
// # Invariants
//
//   - RecvValue never allocates more than the limit its caller gives (the
//     object's size from the master, or the range length asked for), and
//     refuses a peer that announces or sends more, or fewer, bytes than
//     that (codes.ErrTransferFail): a lying peer cannot make a reader
//     allocate beyond the object (Mooncake-style unbounded pre-allocation).
//   - A value read from a node's SSD carries the CRC32C the node announced;
//     ReadSSD checks it. Range reads carry none: the reader checks the
//     object's CRC32C from its lookup (docs/design.md invariant 5).
//
// # Concurrency
//
// Peer and Pool are safe for concurrent use; Pool.mu protects its
// connection map.
package wire
