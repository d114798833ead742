//go:build !linux

package ha

import "time"

// systemClock uses Go's monotonic clock reading.
func systemClock() time.Duration { return time.Since(processStart) }

var processStart = time.Now()
