// Package netlab is a test network of real hosts on one machine: each host
// is a Linux network namespace with one address on a bridge of the lab's
// own, tierstore's real binaries run inside the hosts (ip netns exec), and
// faults are injected by name between them: a full partition of a host, a
// one-way partition, a split into two groups, random loss (iptables in the
// receiving host), a bandwidth cap (tc tbf), delay with jitter,
// duplication and reordering (a userspace packet relay, since this kernel
// has no netem), a flapping link and a paused process (SIGSTOP).
//
// # Layout
//
// A lab is named ts-lab-PID-SEQ. Its switch namespace of that name holds
// the bridge (also named ts-lab-PID) and one veth end per host; host H
// lives in namespace ts-lab-PID-SEQ-H with eth0 at 10.231.0.N/24. Nothing
// is created in the namespace the test runs in, so no address, route or
// rule of the machine changes and nothing is sent outside the lab: a host's
// only route is the lab's subnet (a packet for any other address is refused
// in the host, network unreachable), and IPv6 is off in every namespace of
// the lab (no link-local address, no neighbour or router solicitation). The
// test process itself cannot reach the hosts: every client is a process
// started in a host.
//
// # Faults
//
// Drops are iptables rules in the INPUT chain of the receiving host (a
// partitioned sender sees no error: its packets vanish, as on a real
// network). Each change rewrites the whole filter table of the hosts
// concerned with one iptables-restore, so a fault appears or heals
// atomically per host. A shaped link (Delay) routes the traffic between two
// groups of hosts through a tun device in each host and the lab's relay,
// which delays every packet by Delay plus or minus Jitter (packets overtake
// each other as on a real link with jitter), and duplicates, reorders or
// drops a fraction of them; TCP's own recovery is what gets exercised.
//
// # Teardown
//
// Close kills every process the lab started (by pid), removes its
// namespaces (and with them its bridge, veths and tun devices). A lab that
// dies without Close (test timeout, kill -9) is removed by its reaper, a
// shell started with the lab that waits for the end of a pipe held by this
// process only; and New removes labs of processes no longer running before
// it starts. Processes started in a lab receive SIGKILL when the process
// that started them dies (cluster.DieWithParent). What a run creates
// outside its labs (temporary directories of binaries, histories and SSD
// files) goes the same way with a Sweeper: a shell that removes the paths
// it was given when the run's pipe ends, at Close or at the run's death.
//
// # Requirements
//
// Root, iproute2 (ip, tc), iptables and /dev/net/tun. New answers
// ErrUnavailable naming what is missing; Caps says which optional parts
// work (tbf, the relay), so a scenario that needs a missing one can skip
// with one line.
//
// # Concurrency
//
// A Lab is safe for concurrent use: Lab.mu guards its hosts, processes and
// active faults; the relay has its own lock (Relay.mu) for its routes.
package netlab
