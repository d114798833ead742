//go:build race

package e2e

// raceEnabled: this test binary runs under the race detector, so the
// binaries under test are built with -race too.
const raceEnabled = true
