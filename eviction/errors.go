package eviction

import "errors"

// ErrUnknownPolicy: New was given a name that is not a policy. The message
// names the bad value and the valid ones.
var ErrUnknownPolicy = errors.New("eviction: unknown policy")
