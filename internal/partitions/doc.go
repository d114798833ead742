// Package partitions runs tierstore's network-fault scenarios: real
// tierstore-master, tierstore-node and tierstore-etcd processes and
// netlab-client processes, each in a host of a netlab test network
// (internal/netlab), under partitions, one-way cuts, delay, loss and
// flapping links; every client call is recorded and the history is
// checked (internal/netlab/history): nothing acknowledged that reached SSD
// is lost, no read is stale, no byte is wrong, no call outlives its
// deadline, and the cluster serves again within a bound after the heal.
//
// Run runs the scenarios (all, or those named) in the short form CI runs
// or the full form of `go run ./bench partitions`, and Table prints one
// row per scenario. A scenario that needs a tool the machine lacks is
// skipped with a line saying which. docs/reliability.md has the table and
// what each violation found was.
//
// Run is not safe for concurrent use with itself on one Config.Dir; a
// scenario's goroutines share its rig under rig.mu.
package partitions
