package uring

import (
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/tierstore/tierstore/backend"
)

func TestAlignedAlloc(t *testing.T) {
	for _, n := range []int{1, 100, 4096, 5000, 32 << 10, 64 << 10, 68 << 10, 1 << 20, 1<<20 + 4096} {
		for range 20 {
			b := alignedAlloc(n)
			require.Len(t, b, n)
			require.Equal(t, n, cap(b))
			require.Zero(t, uintptr(unsafe.Pointer(&b[0]))%backend.Alignment, "n=%d", n)
		}
	}
}
