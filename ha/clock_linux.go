//go:build linux

package ha

import (
	"time"

	"golang.org/x/sys/unix"
)

// systemClock reads CLOCK_BOOTTIME: monotonic, and unlike CLOCK_MONOTONIC
// (Go's time.Now monotonic reading) it also counts time spent suspended, so
// a leader whose machine slept past its TTL sees that it did.
func systemClock() time.Duration {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts); err != nil {
		// CLOCK_BOOTTIME exists since Linux 2.6.39; fall back to the
		// monotonic reading rather than fail.
		return time.Since(processStart)
	}
	return time.Duration(ts.Nano())
}

var processStart = time.Now()
