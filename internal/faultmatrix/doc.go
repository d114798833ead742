// Package faultmatrix is a test-only package: it drives the real SSD tier
// engine (tier.Open, Offload, Load, Close, Open again) through storage
// faults and records what the engine does in docs/faults.md.
//
// Faults are injected below the engine, through its exported seams only:
// pebble's own vfs/errorfs around the index (tier.Options.IndexFS, on a real
// temporary directory) and backend/faulty around the real pwrite backend
// (tier.Options.Backend, on a real temporary directory). Each row of the
// matrix checks, whatever the fault:
//
//   - the faulted offload answers Failed for every task it could not make
//     durable, with an error naming the cause (docs/design.md invariant 3);
//   - the notify callback only ever sees keys whose bucket file is on disk
//     and whose index entry is committed and readable (invariant 1): it
//     checks Exists, Load and the file itself for every key it is given;
//   - no Load ever returns bytes other than the ones offloaded (invariant 5);
//   - once the fault clears, the engine either works again or fails closed
//     (every call fails with an error naming the storage failure);
//   - after Close and Open, every object that was announced is intact,
//     except the ones the fault itself destroyed (a bucket file deleted
//     under the engine), which are then reported missing, never wrong
//     (invariant 6).
//
// Run `go test ./internal/faultmatrix -run TestFaultMatrix -update` to
// rewrite docs/faults.md from a run; the plain run fails when the document
// no longer matches what the engine does.
//
// The package has no non-test code; it only exists so the matrix has a home
// that depends on the tier's exported API alone.
package faultmatrix
