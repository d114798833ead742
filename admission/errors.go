package admission

import "errors"

// ErrBadConfig: the policy settings are invalid or contradictory; the message
// names the flags.
var ErrBadConfig = errors.New("admission: invalid configuration")
