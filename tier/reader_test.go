package tier

import (
	"bytes"
	"context"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tierstore/tierstore/backend"
	"github.com/tierstore/tierstore/internal/crc32c"
)

// readAll reads r's value in pieces of piece bytes, all in flight at once,
// into NewBuffer buffers, and assembles it.
func readAll(t *testing.T, r *Reader, piece int) ([]byte, error) {
	t.Helper()
	n := int(r.Size())
	out := make([]byte, n)
	errs := make([]error, (n+piece-1)/piece)
	var wg sync.WaitGroup
	for i := range errs {
		off := i * piece
		ln := min(piece, n-off)
		buf := NewBuffer(piece)
		wg.Add(1)
		r.ReadAt(bg, buf, int64(off), ln, func(data []byte, err error) {
			defer wg.Done()
			if err == nil && len(data) != ln {
				t.Errorf("piece %d: %d bytes, want %d", i, len(data), ln)
			}
			copy(out[off:], data)
			errs[i] = err
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}

// A Reader reads values in ranges, several in flight, from small packed
// objects to objects of many pieces, on the in-memory backend and on
// io_uring with O_DIRECT; it announces the index's size and CRC and does
// not check them; bad ranges and buffers are refused.
func TestReaderRanges(t *testing.T) {
	for name, open := range testBackends(t) {
		t.Run(name, func(t *testing.T) {
			e := openEngine(t, t.TempDir(), Options{Backend: open()})
			var tasks []Task
			for i, size := range []int{1, 3000, 64 << 10, 256<<10 + 17, 1 << 20} {
				tasks = append(tasks, makeTasks(string(rune('a'+i)), 1, size, uint64(i))...)
			}
			requireStatus(t, e.Offload(bg, tasks, nil), Persisted)
			for _, tk := range tasks {
				r, err := e.OpenReader(bg, tk.Key)
				require.NoError(t, err)
				t.Cleanup(r.Close) // a failing assertion must not leave Close waiting
				require.Equal(t, int64(len(tk.Value)), r.Size())
				require.Equal(t, crc32c.Checksum(tk.Value), r.CRC())
				got, err := readAll(t, r, 64<<10)
				require.NoError(t, err)
				require.True(t, bytes.Equal(tk.Value, got), "key %s", tk.Key)

				errc := make(chan error, 2)
				r.ReadAt(bg, NewBuffer(4096), r.Size()-1, 2, func(_ []byte, err error) { errc <- err })
				require.ErrorIs(t, <-errc, backend.ErrBadRange)
				r.ReadAt(bg, make([]byte, 1), 0, 2, func(_ []byte, err error) { errc <- err })
				if r.Size() >= 2 {
					require.ErrorIs(t, <-errc, ErrBufferTooSmall)
				} else {
					require.ErrorIs(t, <-errc, backend.ErrBadRange)
				}
				r.Close()
				r.Close() // a second Close does nothing
				r.ReadAt(bg, NewBuffer(1), 0, 1, func(_ []byte, err error) { errc <- err })
				require.ErrorIs(t, <-errc, ErrClosed)
			}
			st := e.Stats()
			require.Equal(t, int64(len(tasks)), st.ObjectsLoaded)
			require.Zero(t, st.ChecksumErrors)
			_, err := e.OpenReader(bg, []byte("missing"))
			require.ErrorIs(t, err, ErrNotFound)
			_, err = e.OpenReader(bg, nil)
			require.ErrorIs(t, err, ErrInvalidKey)
		})
	}
}

// A compressed object cannot be read in ranges: OpenReader says so (and
// leaves nothing pinned: Close does not wait).
func TestReaderCompressed(t *testing.T) {
	e := openEngine(t, t.TempDir(), Options{Compression: "lz4"})
	requireStatus(t, e.Offload(bg, []Task{{Key: []byte("z"), Value: make([]byte, 100<<10)}}, nil), Persisted)
	r, err := e.OpenReader(bg, []byte("z"))
	if r != nil {
		r.Close()
	}
	require.ErrorIs(t, err, ErrCompressed)
	require.NoError(t, e.Close())
	_, err = e.OpenReader(bg, []byte("z"))
	require.ErrorIs(t, err, ErrClosed)
}

// The Reader's bucket stays pinned: removing the object (its bucket dies)
// does not delete the file under an open Reader; Close does.
func TestReaderPinsBucket(t *testing.T) {
	for name, open := range testBackends(t) {
		t.Run(name, func(t *testing.T) {
			be := open()
			e := openEngine(t, t.TempDir(), Options{Backend: be})
			tasks := makeTasks("pin", 1, 300<<10, 7)
			requireStatus(t, e.Offload(bg, tasks, nil), Persisted)
			require.Len(t, fileIDs(t, be), 1)
			r, err := e.OpenReader(bg, tasks[0].Key)
			require.NoError(t, err)
			defer r.Close() // a failing assertion must not leave Close waiting
			require.NoError(t, e.Remove(tasks[0].Key))
			require.Len(t, fileIDs(t, be), 1, "the file went under an open Reader")
			got, err := readAll(t, r, 128<<10)
			require.NoError(t, err)
			require.Equal(t, tasks[0].Value, got)
			r.Close()
			require.Empty(t, fileIDs(t, be), "the dead bucket's file outlived its last reader")
		})
	}
}

// Corrupt drops the entry as Load does on a mismatch: once, told to the
// owner once, whatever the Readers and calls that report it; a re-offload
// of the key meanwhile (another location) is not dropped.
func TestReaderCorruptDropsOnce(t *testing.T) {
	var mu sync.Mutex
	var told [][]byte
	e := openEngine(t, t.TempDir(), Options{OnEvict: func(_ context.Context, keys [][]byte) ([][]byte, error) {
		mu.Lock()
		defer mu.Unlock()
		told = append(told, keys...)
		return nil, nil
	}})
	tasks := makeTasks("bad", 2, 100<<10, 3)
	requireStatus(t, e.Offload(bg, tasks, nil), Persisted)
	r1, err := e.OpenReader(bg, tasks[0].Key)
	require.NoError(t, err)
	r2, err := e.OpenReader(bg, tasks[0].Key)
	require.NoError(t, err)
	r1.Corrupt(bg)
	r1.Corrupt(bg)
	r2.Corrupt(bg)
	r1.Close()
	r2.Close()
	require.Equal(t, int64(2), e.Stats().ChecksumErrors, "one per Reader that found it")
	require.Equal(t, [][]byte{tasks[0].Key}, told, "the owner is told once")
	r4, err := e.OpenReader(bg, tasks[1].Key)
	require.NoError(t, err)
	r4.Close()
	r4.Corrupt(bg) // after Close: ignored
	require.Equal(t, int64(2), e.Stats().ChecksumErrors)
	ok, err := e.Exists(tasks[1].Key)
	require.NoError(t, err)
	require.True(t, ok, "Corrupt after Close dropped the entry")
	ok, err = e.Exists(tasks[0].Key)
	require.NoError(t, err)
	require.False(t, ok)
	require.Zero(t, e.Stats().ObjectsLoaded, "a dropped value is not a load")

	// A Reader of the old location does not drop the new one.
	r3, err := e.OpenReader(bg, tasks[1].Key)
	require.NoError(t, err)
	requireStatus(t, e.Offload(bg, []Task{{Key: tasks[1].Key, Value: []byte("new bytes")}}, nil), Persisted)
	r3.Corrupt(bg)
	r3.Close()
	res := e.Load(bg, [][]byte{tasks[1].Key})
	require.NoError(t, res[0].Err)
	require.Equal(t, []byte("new bytes"), res[0].Value)
}
