package uring

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"
)

type randWrite struct {
	off    int64
	data   []byte
	vector bool // WRITEV split in two iovecs
}

// TestPropertyWritesMatchWriteAt: any sequence of writes issued through the
// ring (batches of non-overlapping writes in flight together, WRITE or
// WRITEV) leaves the same file as the same writes done with os.File.WriteAt.
func TestPropertyWritesMatchWriteAt(t *testing.T) {
	r := newRing(t, Config{Entries: 8})
	dir := t.TempDir()
	iter := 0
	rapid.Check(t, func(rt *rapid.T) {
		iter++
		ringF, err := os.Create(filepath.Join(dir, "ring"+itoaTest(iter)))
		require.NoError(rt, err)
		defer ringF.Close()
		refF, err := os.Create(filepath.Join(dir, "ref"+itoaTest(iter)))
		require.NoError(rt, err)
		defer refF.Close()

		writes := rapid.SliceOfN(rapid.Custom(func(rt *rapid.T) randWrite {
			n := rapid.IntRange(1, 20000).Draw(rt, "len")
			seed := rapid.Byte().Draw(rt, "seed")
			data := make([]byte, n)
			for i := range data {
				data[i] = seed + byte(i*7)
			}
			return randWrite{
				off:    rapid.Int64Range(0, 100000).Draw(rt, "off"),
				data:   data,
				vector: rapid.Bool().Draw(rt, "vector"),
			}
		}), 1, 40).Draw(rt, "writes")

		var batch []randWrite
		flush := func() {
			for _, w := range batch {
				op := Op{Opcode: OpWrite, Fd: int(ringF.Fd()), Off: w.off, Buf: w.data}
				if w.vector && len(w.data) > 1 {
					h := len(w.data) / 2
					op = Op{Opcode: OpWritev, Fd: int(ringF.Fd()), Off: w.off, Bufs: [][]byte{w.data[:h], w.data[h:]}}
				}
				_, err := r.Prepare(op)
				require.NoError(rt, err)
			}
			require.NoError(rt, r.Wait(r.InFlight()))
			for _, c := range r.Reap(nil) {
				require.NoError(rt, c.Err())
			}
			batch = batch[:0]
		}
		for _, w := range writes {
			overlaps := false
			for _, b := range batch {
				if w.off < b.off+int64(len(b.data)) && b.off < w.off+int64(len(w.data)) {
					overlaps = true
				}
			}
			if overlaps || len(batch) == r.SQEntries() {
				flush()
			}
			batch = append(batch, w)
			_, err := refF.WriteAt(w.data, w.off)
			require.NoError(rt, err)
		}
		flush()
		got, err := os.ReadFile(ringF.Name())
		require.NoError(rt, err)
		want, err := os.ReadFile(refF.Name())
		require.NoError(rt, err)
		if !bytes.Equal(got, want) {
			rt.Fatalf("files differ: ring %d bytes, WriteAt %d bytes", len(got), len(want))
		}
	})
}

func itoaTest(n int) string { return strconv.Itoa(n) }
