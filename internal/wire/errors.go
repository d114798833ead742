package wire

import "errors"

// ErrClosed: the Pool was closed.
var ErrClosed = errors.New("wire: closed")
