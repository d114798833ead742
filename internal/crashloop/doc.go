// Package crashloop is the crash-loop driver: real master and node
// processes, several clients putting objects while offload runs, kill -9 of
// a node at a random moment (every fifth cycle the master instead), restart
// on the same --ssd_dir (the same port for the master), then checks that
// every object the master had announced on SSD reads back byte-identical
// (docs/design.md invariants 1, 6 and 9), that no read returns wrong bytes
// (invariant 5), that the master lists no replica a node does not hold
// (no phantoms) and no replica twice. With Config.Replicas > 1 every put
// keeps that many DRAM replicas on as many nodes, and a node kill must also
// lose none of the objects the master listed with a replica on another
// node.
//
// `go run ./bench crashloop` runs the full form (100 node cycles, 20 master
// cycles); internal/e2e runs a short form in CI (10 and 2). Run is not safe
// for concurrent use with itself on one Config.Dir; its writers share the
// object map under loop.mu.
package crashloop
