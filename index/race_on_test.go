//go:build race

package index

// raceEnabled: the race detector (and pebble's invariant checks built
// with it) allocate on their own, so allocation counts are not checked.
const raceEnabled = true
