package ha

import "time"

// clock returns a reading of a clock that never goes backwards and keeps
// running while this process is stopped (SIGSTOP) or, on Linux, while the
// machine is suspended (CLOCK_BOOTTIME). The fence compares readings of this
// clock only with each other, never with wall-clock time, so NTP steps
// cannot extend a leadership.
type clock func() time.Duration
