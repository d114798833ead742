package admission

import "errors"

// ErrBadConfig: the policy settings are invalid or contradictory; the message
// names the flags.
var ErrBadConfig = errors.New("admission: invalid configuration")

// ErrBadSketch: a serialised frequency sketch does not decode.
var ErrBadSketch = errors.New("admission: malformed sketch")
