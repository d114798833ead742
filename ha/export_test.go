package ha

import "time"

// SetFailoverWait sets how long a non-idempotent call waits for a new
// leader after a transport failure, and returns a function restoring it.
func SetFailoverWait(d time.Duration) func() {
	old := failoverWait
	failoverWait = d
	return func() { failoverWait = old }
}
