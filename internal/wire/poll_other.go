//go:build !unix

package wire

import (
	"errors"
	"time"
)

// ownSupported: no poll(2), no own connections (DataPool.Acquire shares).
const ownSupported = false

func pollIn(uintptr, time.Duration) error {
	return errors.New("wire: own connections need poll(2)")
}

func pollReady(uintptr) bool { return true }
