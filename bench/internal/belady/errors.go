package belady

import "errors"

// ErrBadCapacity: the capacity is not positive.
var ErrBadCapacity = errors.New("belady: capacity must be > 0")
