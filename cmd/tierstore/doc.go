// Command tierstore is the tierstore command-line tool:
//
//	tierstore demo [--dir D] [--objects 11] [--size 1MiB]   embedded end-to-end check (Mooncake #4740)
//	tierstore serve --dir D [--port 50051]                  master + node in one process over gRPC
//	tierstore put    --master ADDR KEY [FILE]               store FILE (or stdin)
//	tierstore get    --master ADDR KEY [FILE]               write the value to FILE (or stdout)
//	tierstore exists --master ADDR KEY                      exit 0 if the key exists, 1 if not
//	tierstore rm     --master ADDR [--force] KEY
//	tierstore stats  --master ADDR [--node PEER...]         objects and bytes per tier (and per node)
//	tierstore evict  --master ADDR --tier dram [KEY...|--all]
//
// See docs/node.md. "tierstore CMD -h" prints the usage of CMD with only
// its own flags and their defaults on stdout (exit 0).
//
// Invariants: the demo exits 0 only when every object reached SSD, every
// DRAM replica was dropped, and every object read back from SSD has the
// SHA-256 it was put with. Object commands exit 1 on an error and print the
// Mooncake code name. Usage errors (bad flag values, flags of another
// command, stray or missing arguments, an empty KEY, a non-positive
// --timeout, an unknown --backend) are checked before anything starts and
// exit 2 with one line naming the flag or argument.
//
// Concurrency: each command is one sequence of client calls; serve runs a
// master and a node until SIGTERM/SIGINT, then drains the node.
package main
