package trace

import "errors"

var (
	// ErrBadConfig: a generator Config field is out of range; the message
	// names the field.
	ErrBadConfig = errors.New("trace: invalid config")
	// ErrBadLine: a trace file line is not "key size"; the message names the
	// line number.
	ErrBadLine = errors.New("trace: malformed line")
	// ErrEmpty: a trace file holds no request.
	ErrEmpty = errors.New("trace: empty trace")
)
