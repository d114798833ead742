// Command bench measures what the SSD tier does on an operator's disk and
// access pattern, over the real engine (no model of it):
//
//	go run ./bench SCENARIO|all [--dir D] [--quick] [--json FILE] [--plot DIR] [--trace FILE] [--keep]
//	    [--cpuprofile F] [--mutexprofile F] [--blockprofile F] [--sizes 64K,256K,1M] [--readers N] [--keys-per-load K]
//
// Scenarios (each registers itself with a one-line help in its file; "all"
// runs throughput, recovery, churn, peers, master, e2e and replicas; README,
// Benchmarks, has the flags):
//
//   - throughput: Offload and Load of 64 KiB, 256 KiB and 1 MiB objects
//     through the tier engine for each backend (uring O_DIRECT, pwrite
//     buffered, pwrite O_DIRECT), next to fio on the same directory when fio
//     is installed (sequential write 1 MiB O_DIRECT io_uring iodepth 16;
//     random read at the object size, iodepth 32), with ratios to fio.
//   - churn: access traces replayed through a real master and a real store
//     node with the tier engine, embedded in-process, with scaled-down DRAM
//     and SSD capacities, for each admission and eviction policy (eager+lru,
//     the tinylfu variants and the rows of bench/churn.go's policy table);
//     hit ratios, SSD bytes written per byte read,
//     evictions, and Belady's MIN (package bench/internal/belady) as upper
//     bound. Traces come from bench/internal/trace: repeated scans over twice
//     the SSD capacity, Zipf multi-turn conversations with a shared prefix,
//     the same mixed with one-hit wonders, and --trace FILE ("key size" per
//     line). Beside it, not part of the command, bench/churn_objsim_test.go
//     is a trace-driven model of the two tiers under tinylfu admission
//     (TestChurnObjSim, run with TIERSTORE_OBJSIM=1) for trying an SSD
//     victim rule before building it (docs/bench/bench.md, churn stop 46).
//   - recovery: the tier engine's Open time with N objects, after a clean
//     close and after kill -9 of the process writing.
//   - peers: the same ingest and random-read workload against the tier
//     engine, pebble v2 holding the values itself, and badger v4 with its
//     value log holding them.
//   - master: lookups and put pairs per second, in-process and over gRPC.
//   - e2e: client -> node over loopback (put, get from DRAM and from SSD,
//     batch get) as ratios to a raw TCP stream and tier.Load.
//   - replicas: puts with 2 and 3 DRAM replicas on 3 nodes against 1.
//   - tls (not in "all"): a plaintext and a mutual-TLS cluster (master
//     over gRPC, node on a loopback listener) in one process, measured in
//     turns per pass: get and put of 1 MiB, batch get; MB/s and the ratio.
//   - crashloop: kill -9 of nodes and the master under puts and offload:
//     objects lost, wrong bytes, phantoms.
//   - soak (not in "all"): real master and node processes, 8 clients
//     reading, writing and removing for --duration.
//   - partitions (not in "all"; root): network faults between real
//     processes in network namespaces (internal/partitions).
//   - reconcile (not in "all": it needs about 400 B of master memory per
//     key): a tierstore-master process built from cmd/ and, in-process, a
//     real store node whose SSD tier lists --keys synthetic keys (default
//     10M, 100k with --quick) generated on the fly; it measures the node's
//     start-up re-registration and reconciles with nothing changed, with
//     100 and with 10000 keys drifted: wall time, master CPU and RSS
//     (/proc of the master process), node CPU (getrusage) and heap growth.
//   - scale (not in "all": 10M objects take ~4 GiB): one in-process master
//     filled with N objects of 108-byte vLLM-shaped keys made on the fly
//     (--scale_objects, default 1M and 10M) by PutStart+PutEnd pairs or,
//     with --scale_fill=ssd, by a node's SSD re-registration in chunks of
//     4096 (the master's compact records), or with --scale_fill=offload
//     by put pairs in chunks of 4096, each chunk recorded on the node's
//     SSD and dropped from DRAM by an eviction round (objects put through
//     DRAM, frozen back into compact records), the fill stopping at
//     --scale_rss_cap: RSS and heap per object, how many objects it held
//     when its RSS growth passed 8 GiB, put pairs per second at that size,
//     ExistKey / GetReplicaList p50 and p99, RSS and heap per object after
//     those lookups (with --scale_lookup_all after an ExistKey of every
//     object too), and the master's compact records, thawed and frozen
//     counts (issue 23 item 2).
//   - failover (not part of all): highly available masters as real
//     processes (tierstore-etcd, 3 masters with the default HA settings,
//     nodes): kill -9 of the leader 20 times (3 with --quick), the time to
//     the first Get of a pre-existing object through the new leader and the
//     objects lost per category; then the soak's 8 clients on 3 masters and
//     8 nodes through 5 failovers (2 with --quick), wrong bytes.
//   - serve: tierstore (master and node processes built from cmd/, SSD
//     tier on the same disk) side by side with Debian's memcached (with
//     extstore) and redis-server, started by the bench on 127.0.0.1 with
//     the same DRAM budget (and SSD budget where a peer has one), on vLLM
//     blocks, SGLang pages (batch_exists then batch put, batch get of 128
//     pages), LMCache chunks and Zipf multi-turn re-reads, at a working set
//     of 0.6x and 3x DRAM: GB/s, p50/p99, hit ratio, SSD bytes written,
//     tierstore's ratios to each peer and the issue-24 goal verdicts. A
//     missing peer is skipped with one line.
//
// Output: a table per scenario on stdout with a header naming the machine,
// disk, Go version and options; --json writes every figure; --plot writes PNG
// charts. Progress bars go to stderr, only when it is a terminal. --quick
// shrinks every scenario to run in well under a minute (the smoke test uses
// it); it checks that the output is well formed, never the speed.
//
// Invariants: every figure printed comes from a measured run on the --dir
// directory (default: a temporary directory next to the working directory, on
// the same disk); scratch data is removed at the end; nothing listens on a
// non-loopback address.
//
// Concurrency: scenarios run one after the other; inside one, the measured
// workload may use several goroutines, which the scenario joins before it
// reports.
package main
