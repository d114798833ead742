// Package fio runs the fio disk benchmark on a directory and parses its JSON
// output, so the bench command can print the engine's figures as ratios to
// what the raw device delivers through the same kernel interfaces.
//
// Detection: Available looks fio up in PATH; when it is missing every call
// returns ErrNotInstalled and the caller prints absolute figures only.
//
// Jobs are built from a Job value (never from a shell string), run with
// --output-format=json, and bounded: by Job.Size, by Job.Runtime when set, and
// by the context. The parsed Result holds bandwidth, IOPS and completion
// latency percentiles of the read or write side, whichever the job did.
//
// Concurrency: no shared state; callers may run jobs concurrently, though for
// honest figures they should not.
package fio
