package mem

import "errors"

// ErrCrashed: a WriteBucket was in progress when Crash was called; the bucket
// was discarded, as it would be by a power cut before its durable point.
var ErrCrashed = errors.New("mem: write interrupted by a simulated crash")
