package bfile

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"slices"

	"golang.org/x/sys/unix"

	"github.com/tierstore/tierstore/backend"
)

// Delete is backend.Backend.Delete: unlink, then fsync of the directory.
func (d *Dir) Delete(id uint64) (err error) {
	defer d.wrap(&err, "delete bucket", id)
	if err := d.acquire(context.Background()); err != nil {
		return err
	}
	defer d.release()
	err = unix.Unlink(d.File(id))
	d.files.forget(id) // after the unlink: see fdCache.add
	if errors.Is(err, unix.ENOENT) {
		return backend.ErrNotFound
	} else if err != nil {
		return err
	}
	if err := unix.Fsync(d.fd); err != nil {
		return fmt.Errorf("fsync directory: %w", err)
	}
	return nil
}

// List is backend.Backend.List, in id order.
func (d *Dir) List() ([]backend.FileInfo, error) {
	if err := d.acquire(context.Background()); err != nil {
		return nil, fmt.Errorf("%s: list: %w", d.pkg, err)
	}
	defer d.release()
	var out []backend.FileInfo
	if err := d.scan(func(id uint64, st *unix.Stat_t) {
		out = append(out, backend.FileInfo{ID: id, Size: st.Size})
	}); err != nil {
		return nil, fmt.Errorf("%s: list %s: %w", d.pkg, d.path, err)
	}
	// ReadDir sorts by name, which for FileName is id order; sort anyway
	// rather than rely on it.
	slices.SortFunc(out, func(x, y backend.FileInfo) int { return cmp.Compare(x.ID, y.ID) })
	return out, nil
}

// Allocated is backend.Backend.Allocated: the sum of st_blocks*512 of the
// bucket files.
func (d *Dir) Allocated() (int64, error) {
	if err := d.acquire(context.Background()); err != nil {
		return 0, fmt.Errorf("%s: allocated: %w", d.pkg, err)
	}
	defer d.release()
	var n int64
	if err := d.scan(func(_ uint64, st *unix.Stat_t) { n += st.Blocks * 512 }); err != nil {
		return 0, fmt.Errorf("%s: allocated %s: %w", d.pkg, d.path, err)
	}
	return n, nil
}

// scan calls fn for every bucket file in the directory, with its stat.
// Files that vanish during the scan are skipped.
func (d *Dir) scan(fn func(id uint64, st *unix.Stat_t)) error {
	entries, err := os.ReadDir(d.path)
	if err != nil {
		return err
	}
	var st unix.Stat_t
	for _, e := range entries {
		id, ok := backend.ParseFileName(e.Name())
		if !ok || !e.Type().IsRegular() {
			continue
		}
		if err := unix.Fstatat(d.fd, e.Name(), &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			if errors.Is(err, unix.ENOENT) {
				continue
			}
			return fmt.Errorf("stat %s: %w", e.Name(), err)
		}
		fn(id, &st)
	}
	return nil
}
