package uring

import (
	"context"
	"math"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tierstore/tierstore/backend"
)

func TestReadHugeRanges(t *testing.T) {
	b := openOrFail(t, t.TempDir(), small(true))
	defer b.Close()
	require.NoError(t, b.WriteBucket(context.Background(), 1, [][]byte{make([]byte, backend.Alignment)}))
	ops := []backend.ReadOp{
		{Off: math.MaxInt64 - 10, Len: 100}, // Off+Len overflows int64
		{Off: 1, Len: math.MaxInt},
		{Off: backend.Alignment, Len: 1},
		{Off: backend.Alignment, Len: 0},
	}
	require.NoError(t, backend.ReadFile(context.Background(), b, 1, ops))
	for _, op := range ops[:3] {
		require.ErrorIs(t, op.Err, backend.ErrShortRead, "[%d,+%d)", op.Off, op.Len)
		require.Nil(t, op.Data)
	}
	require.NoError(t, ops[3].Err)
	require.Empty(t, ops[3].Data)
}
