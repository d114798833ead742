package uring

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"

	"github.com/tierstore/tierstore/backend"
	"github.com/tierstore/tierstore/backend/backendtest"
	"github.com/tierstore/tierstore/backend/pwrite"
)

// errClass maps a read error to the sentinel it must match (nil: none).
func errClass(err error) error {
	for _, s := range []error{backend.ErrShortRead, backend.ErrBadRange, backend.ErrNotFound} {
		if errors.Is(err, s) {
			return s
		}
	}
	return err
}

// TestPropertySameAsPwrite: for random buckets (sizes, iovec splits) and
// random read ops, the uring backend (direct and buffered) and the pwrite
// backend leave byte-identical files and return identical reads and error
// classes.
func TestPropertySameAsPwrite(t *testing.T) {
	root := t.TempDir()
	pw, err := pwrite.Open(filepath.Join(root, "pwrite"), pwrite.Options{Direct: true})
	require.NoError(t, err)
	defer pw.Close()
	ud := openOrFail(t, filepath.Join(root, "uring-direct"), small(true))
	defer ud.Close()
	ub := openOrFail(t, filepath.Join(root, "uring-buffered"), small(false))
	defer ub.Close()
	backends := []struct {
		b   backend.Backend
		dir string
	}{{pw, filepath.Join(root, "pwrite")}, {ud, filepath.Join(root, "uring-direct")}, {ub, filepath.Join(root, "uring-buffered")}}
	ctx := context.Background()
	var id uint64
	rapid.Check(t, func(rt *rapid.T) {
		id++
		blocks := rapid.IntRange(1, 80).Draw(rt, "blocks")
		size := blocks * backend.Alignment
		data := backendtest.Pattern(rapid.Uint64().Draw(rt, "seed"), size)
		sizes := rapid.SliceOfN(rapid.IntRange(0, 3*64<<10), 1, 6).Draw(rt, "split")
		if slices.Max(sizes) == 0 {
			sizes[0] = 1 // Split cycles through sizes: all zero would never end
		}
		nops := rapid.IntRange(0, 60).Draw(rt, "nops")
		ops := make([]backend.ReadOp, nops)
		for i := range ops {
			off := rapid.Int64Range(-2, int64(size)+10).Draw(rt, "off")
			ops[i] = backend.ReadOp{Off: off, Len: rapid.IntRange(-1, 300000).Draw(rt, "len")}
		}
		var files [][]byte
		var reads [][]backend.ReadOp
		for _, be := range backends {
			require.NoError(rt, be.b.WriteBucket(ctx, id, backendtest.Split(data, sizes)), be.b.Name())
			f, err := os.ReadFile(filepath.Join(be.dir, backend.FileName(id)))
			require.NoError(rt, err)
			files = append(files, f)
			o := append([]backend.ReadOp(nil), ops...)
			require.NoError(rt, backend.ReadFile(ctx, be.b, id, o), be.b.Name())
			reads = append(reads, o)
		}
		for i := 1; i < len(backends); i++ {
			if !bytes.Equal(files[0], files[i]) {
				rt.Fatalf("%s file differs from %s", backends[i].b.Name(), backends[0].b.Name())
			}
			for j := range ops {
				a, b := reads[0][j], reads[i][j]
				if !bytes.Equal(a.Data, b.Data) || errClass(a.Err) != errClass(b.Err) || (a.Data == nil) != (b.Data == nil) {
					rt.Fatalf("op %d [%d,+%d): %s gives (%d bytes, %v), %s gives (%d bytes, %v)", j, a.Off, a.Len,
						backends[0].b.Name(), len(a.Data), a.Err, backends[i].b.Name(), len(b.Data), b.Err)
				}
			}
		}
		require.Equal(rt, data, files[0])
	})
}
