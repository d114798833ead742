package tier

// markedError carries a sentinel of this package for an error that already
// says the same thing in its own words (a bucket checksum error, a backend
// "no space"): errors.Is matches the sentinel and everything in err's
// chain, and the message is err's alone, so that it does not read
// "tier: checksum mismatch: bucket: object checksum mismatch".
type markedError struct{ sentinel, err error }

func (e *markedError) Error() string   { return e.err.Error() }
func (e *markedError) Unwrap() []error { return []error{e.sentinel, e.err} }

// mark returns err marked with sentinel.
func mark(sentinel, err error) error { return &markedError{sentinel: sentinel, err: err} }
