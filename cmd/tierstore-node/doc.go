// Command tierstore-node runs a tierstore store node: a DRAM segment mounted
// at a tierstore master, a peer data service, and (with --enable_offload) an
// SSD tier fed by the offload heartbeat. See docs/node.md for the flags.
//
// It prints "tierstore-node listening on HOST:PORT node=ID segment=NAME" once
// it serves, and on SIGTERM or SIGINT drains in-flight work, unmounts and
// exits 0. Every bad flag value or combination stops start-up with a
// one-line error naming the flag (exit 2).
//
// Invariants and concurrency are those of package client's Node.
package main
