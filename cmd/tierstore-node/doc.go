// Command tierstore-node runs a tierstore store node: a DRAM segment mounted
// at a tierstore master, a peer data service, and (with --enable_offload) an
// SSD tier fed by the offload heartbeat. --master is host:port or
// etcd://h1:2379,h2:2379[/prefix] (the elected leader of highly available
// masters, docs/ha.md). See docs/node.md for the flags, or
// run "tierstore-node --help" (usage with every default on stdout, exit 0).
//
// It prints "tierstore-node listening on HOST:PORT node=ID segment=NAME" once
// it serves, and on SIGTERM or SIGINT drains in-flight work, unmounts and
// exits 0. Every bad flag value or combination stops start-up with a
// one-line error naming the flag (exit 2) before anything is mapped or
// bound; that includes --memory above the machine's physical memory or the
// process's RLIMIT_AS / RLIMIT_DATA.
//
// Invariants and concurrency are those of package client's Node: main only
// parses flags, starts the node (and the optional metrics server on its own
// goroutine) and waits for a signal.
package main
