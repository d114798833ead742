package bfile

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"

	"github.com/tierstore/tierstore/backend"
)

// Config configures Open.
type Config struct {
	Path      string       // the directory, absolute and clean; must exist
	Direct    bool         // initial O_DIRECT setting
	Pkg       string       // starts error messages and the warning ("pwrite")
	ErrDirect error        // the backend's sentinel for an O_DIRECT refusal
	Log       *slog.Logger // receives the fallback warning; required
	OpenFiles int          // files kept open for reads; 0: DefaultOpenFiles
}

// Dir is a directory of bucket files; see the package documentation.
type Dir struct {
	path, pkg string
	errDirect error
	log       *slog.Logger
	direct    atomic.Bool // only goes from true to false (Fallback)

	// mu protects closed and the validity of fd: every operation holds the
	// read lock for its whole duration, Close takes the write lock.
	mu     sync.RWMutex
	closed bool
	fd     int // the directory, open O_RDONLY for fsync
	// files caches bucket files open for reading (its own lock).
	files *fdCache
}

// WriteFunc writes data to fd (opened O_DIRECT when direct is set) from
// offset 0 and fdatasyncs it. An error wrapping Config.ErrDirect makes
// WriteBucket retry with buffered I/O.
type WriteFunc func(ctx context.Context, fd int, data [][]byte, direct bool) error

// Open opens the directory c.Path. The error is unwrapped: the caller names
// its operation.
func Open(c Config) (*Dir, error) {
	fd, err := unix.Open(c.Path, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	d := &Dir{path: c.Path, pkg: c.Pkg, errDirect: c.ErrDirect, log: c.Log, fd: fd, files: newFDCache(c.OpenFiles)}
	d.direct.Store(c.Direct)
	return d, nil
}

// Path returns the directory.
func (d *Dir) Path() string { return d.path }

// File returns the path of the bucket file of id.
func (d *Dir) File(id uint64) string { return filepath.Join(d.path, backend.FileName(id)) }

// Direct reports whether bucket files are currently opened with O_DIRECT.
func (d *Dir) Direct() bool { return d.direct.Load() }

// Name is Config.Pkg, with "+direct" while O_DIRECT is in use.
func (d *Dir) Name() string {
	if d.direct.Load() {
		return d.pkg + "+direct"
	}
	return d.pkg
}

// ForceDirect turns O_DIRECT back on, for tests of the later fallbacks.
func (d *Dir) ForceDirect() { d.direct.Store(true) }

// Fallback switches to buffered I/O and logs why, once.
func (d *Dir) Fallback(why error) {
	if d.direct.CompareAndSwap(true, false) {
		d.log.Warn(d.pkg+": O_DIRECT is not supported by the file system; using buffered I/O",
			"dir", d.path, "err", why)
	}
}

// acquire takes the read lock, or fails with backend.ErrClosed or ctx's
// error. After nil the caller calls release.
func (d *Dir) acquire(ctx context.Context) error {
	d.mu.RLock()
	if d.closed {
		d.mu.RUnlock()
		return backend.ErrClosed
	}
	if err := ctx.Err(); err != nil {
		d.mu.RUnlock()
		return err
	}
	return nil
}

func (d *Dir) release() { d.mu.RUnlock() }

// Close waits for the operations in flight, then runs release (when not nil)
// and closes the directory. A second Close fails with backend.ErrClosed.
func (d *Dir) Close(release func() error) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return fmt.Errorf("%s: close: %w", d.pkg, backend.ErrClosed)
	}
	d.closed = true
	d.files.closeAll()
	var err error
	if release != nil {
		err = release()
	}
	if cerr := unix.Close(d.fd); cerr != nil && err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("%s: close %s: %w", d.pkg, d.path, err)
	}
	return nil
}

// wrap prefixes *err, when set, with the package, what failed and the id.
func (d *Dir) wrap(err *error, what string, id uint64) {
	if *err != nil {
		*err = fmt.Errorf("%s: %s %016x: %w", d.pkg, what, id, *err)
	}
}

// NoSpace wraps ENOSPC and EDQUOT with backend.ErrNoSpace.
func NoSpace(err error) error {
	if errors.Is(err, unix.ENOSPC) || errors.Is(err, unix.EDQUOT) {
		return fmt.Errorf("%w: %w", backend.ErrNoSpace, err)
	}
	return err
}

// Fallocate reserves total bytes of fd from offset 0, so that a full device
// fails before any byte is written. A file system without fallocate is not
// an error.
func Fallocate(fd int, total int64) error {
	if total == 0 {
		return nil
	}
	if err := unix.Fallocate(fd, 0, 0, total); err != nil && !errors.Is(err, unix.EOPNOTSUPP) {
		return fmt.Errorf("fallocate %d bytes: %w", total, NoSpace(err))
	}
	return nil
}

// WriteBucket is backend.Backend.WriteBucket around write: see the package
// documentation.
func (d *Dir) WriteBucket(ctx context.Context, id uint64, data [][]byte, write WriteFunc) (err error) {
	defer d.wrap(&err, "write bucket", id)
	if err := d.acquire(ctx); err != nil {
		return err
	}
	defer d.release()
	if total := backend.TotalLen(data); total%backend.Alignment != 0 {
		return fmt.Errorf("%d bytes: %w", total, backend.ErrUnaligned)
	}
	d.files.forget(id) // a file of this id deleted behind our back
	direct := d.direct.Load()
	err = d.writeFile(ctx, d.File(id), data, direct, write)
	if direct && errors.Is(err, d.errDirect) {
		d.Fallback(err)
		err = d.writeFile(ctx, d.File(id), data, false, write)
	}
	return err
}

// writeFile creates name, runs write, closes the file and fsyncs the
// directory. On failure after the file was created it removes the file.
func (d *Dir) writeFile(ctx context.Context, name string, data [][]byte, direct bool, write WriteFunc) (err error) {
	fd, err := open(name, unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY, direct)
	switch {
	case errors.Is(err, unix.EEXIST):
		return backend.ErrExists
	case direct && errors.Is(err, unix.EINVAL):
		// Some file systems (ramfs) create the file before they refuse
		// O_DIRECT. It is ours: with O_EXCL an existing file is EEXIST.
		if unix.Unlink(name) == nil {
			_ = unix.Fsync(d.fd)
		}
		return fmt.Errorf("%w: open: %w", d.errDirect, err)
	case err != nil:
		return fmt.Errorf("create: %w", NoSpace(err))
	}
	defer func() {
		if fd >= 0 {
			unix.Close(fd)
		}
		// Best effort: the layer above removes orphans at open.
		if err != nil && unix.Unlink(name) == nil {
			_ = unix.Fsync(d.fd)
		}
	}()
	if err := write(ctx, fd, data, direct); err != nil {
		return err
	}
	cerr := unix.Close(fd)
	fd = -1
	if cerr != nil {
		return fmt.Errorf("close: %w", NoSpace(cerr))
	}
	if err := unix.Fsync(d.fd); err != nil {
		return fmt.Errorf("fsync directory: %w", NoSpace(err))
	}
	return nil
}

// open opens name with flags|O_CLOEXEC (|O_DIRECT), mode 0644 if created.
func open(name string, flags int, direct bool) (int, error) {
	if direct {
		flags |= unix.O_DIRECT
	}
	return unix.Open(name, flags|unix.O_CLOEXEC, 0o644)
}

// CheckOp checks op against a file of size bytes, its errors starting with
// pkg: a negative range fails with backend.ErrBadRange, one past the end
// with backend.ErrShortRead, a Buf shorter than Len with
// backend.ErrBufferTooSmall; an empty one gets empty Data. It reports
// whether op still needs reading.
func CheckOp(pkg string, id uint64, size int64, op *backend.ReadOp) bool {
	switch {
	case op.Off < 0 || op.Len < 0:
		op.Err = fmt.Errorf("%s: read bucket %016x [%d,+%d): %w", pkg, id, op.Off, op.Len, backend.ErrBadRange)
	case op.Buf != nil && len(op.Buf) < op.Len:
		op.Err = fmt.Errorf("%s: read bucket %016x [%d,+%d) into %d bytes: %w", pkg, id, op.Off, op.Len, len(op.Buf), backend.ErrBufferTooSmall)
	case op.Off > size || int64(op.Len) > size-op.Off: // no overflow
		op.Err = fmt.Errorf("%s: read bucket %016x [%d,+%d) of %d bytes: %w", pkg, id, op.Off, op.Len, size, backend.ErrShortRead)
	case op.Len == 0:
		op.Data = []byte{}
		if op.Buf != nil {
			op.Data = op.Buf[:0]
		}
	default:
		return true
	}
	return false
}
