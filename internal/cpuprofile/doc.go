// Package cpuprofile writes a process's CPU profile (runtime/pprof) to a
// file from start-up to shutdown: the --cpuprofile flag of tierstore-master
// and tierstore-node, which the bench uses to say where a figure's CPU goes
// (go tool pprof FILE).
//
// Invariant: the profile is complete only once the stop function returned
// (the binaries call it on their way out, after SIGTERM's drain).
// Concurrency: Start once per process; the Go runtime allows one CPU
// profile at a time (a second Start fails with its error).
package cpuprofile
