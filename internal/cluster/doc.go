// Package cluster builds tierstore's binaries and runs them as real
// processes on 127.0.0.1 for end-to-end tests, the crash loop and the soak:
// start a master or a node, wait for its "listening on" line, kill it with
// any signal, read what it printed. It also builds tierstore-etcd and
// starts highly available masters (ha.go: EtcdArgs, HAMasterArgs,
// WaitLeader).
//
// Nothing here is a test double: the processes are the binaries an operator
// runs. Every wait is bounded. A Proc is safe for concurrent use (its log
// buffer is guarded by Proc.mu).
package cluster
