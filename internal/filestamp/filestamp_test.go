package filestamp

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestStampChanges: the same file stamps alike; a rewrite in place of
// another size, a new modification time, and a rename over it each give
// another stamp; a missing file is an error.
func TestStampChanges(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "f")
	require.NoError(t, os.WriteFile(p, []byte("one"), 0o600))
	a, err := Of(p)
	require.NoError(t, err)
	b, err := Of(p)
	require.NoError(t, err)
	require.Equal(t, a, b)
	require.NotEqual(t, Stamp{}, a)

	require.NoError(t, os.WriteFile(p, []byte("three"), 0o600))
	c, err := Of(p)
	require.NoError(t, err)
	require.NotEqual(t, a, c, "another size")

	later := time.Now().Add(time.Hour)
	require.NoError(t, os.Chtimes(p, later, later))
	d, err := Of(p)
	require.NoError(t, err)
	require.NotEqual(t, c, d, "another modification time")

	q := filepath.Join(dir, "g")
	require.NoError(t, os.WriteFile(q, []byte("three"), 0o600))
	require.NoError(t, os.Chtimes(q, later, later))
	require.NoError(t, os.Rename(q, p))
	e, err := Of(p)
	require.NoError(t, err)
	require.NotEqual(t, d, e, "replaced by rename: same size and time, another inode")

	_, err = Of(filepath.Join(dir, "missing"))
	require.ErrorIs(t, err, os.ErrNotExist)
}
