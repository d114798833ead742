//go:build !linux

package master

import "unsafe"

// populate does nothing here: the pages of a new slab fault in at their
// first write.
func populate(p unsafe.Pointer, n uintptr) {}
