package pwrite

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"

	"github.com/tierstore/tierstore/backend"
)

// Options configure Open.
type Options struct {
	// Direct opens bucket files with O_DIRECT (no page cache). When the file
	// system refuses O_DIRECT (EINVAL, e.g. tmpfs) the backend falls back to
	// buffered I/O and logs why, once.
	Direct bool
	// Logger receives the fallback warning; default slog.Default().
	Logger *slog.Logger
}

const (
	// maxIovecs bounds one pwritev call (IOV_MAX on Linux).
	maxIovecs = 1024
	// syncEvery is how many bytes a buffered WriteBucket writes before it
	// asks the kernel to start write-back (sync_file_range), so that the
	// final fdatasync has less to wait for.
	syncEvery = 8 << 20
	// readWorkers is how many goroutines serve the ops of one Read.
	readWorkers = 4
	// splitSize is the piece size of a large O_DIRECT read op (see
	// preadDirectSplit).
	splitSize = 256 << 10
	// writeDepth is how many O_DIRECT chunk writes of one WriteBucket are
	// in flight at once.
	writeDepth = 4
)

// Backend stores bucket files in one directory with pwritev/pread, see the
// package documentation.
type Backend struct {
	dir string
	log *slog.Logger

	// direct is true while bucket files are opened with O_DIRECT; it only
	// ever goes from true to false (fallback).
	direct atomic.Bool

	// mu protects closed and the validity of dirFD: every operation holds
	// the read lock for its whole duration, Close takes the write lock.
	mu     sync.RWMutex
	closed bool
	dirFD  int // the directory, open O_RDONLY for fsync
}

var _ backend.Backend = (*Backend)(nil)

// Open returns a backend storing bucket files in dir, which must be an
// absolute path. dir is created (mode 0755, parents included) when missing;
// Open fails, naming the path, when it is not a directory or a file cannot be
// created and removed in it.
func Open(dir string, opts Options) (*Backend, error) {
	if !filepath.IsAbs(dir) {
		return nil, fmt.Errorf("pwrite: open %q: %w", dir, ErrRelativeDir)
	}
	dir = filepath.Clean(dir)
	log := opts.Logger
	if log == nil {
		log = slog.Default()
	}
	_, statErr := os.Stat(dir)
	created := errors.Is(statErr, os.ErrNotExist)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		if errors.Is(err, unix.ENOTDIR) || errors.Is(err, unix.EEXIST) {
			return nil, fmt.Errorf("pwrite: open %s: %w: %w", dir, ErrNotDirectory, err)
		}
		return nil, fmt.Errorf("pwrite: open %s: create directory: %w: %w", dir, ErrNotWritable, err)
	}
	fi, err := os.Stat(dir)
	if err != nil {
		return nil, fmt.Errorf("pwrite: open %s: %w", dir, err)
	}
	if !fi.IsDir() {
		return nil, fmt.Errorf("pwrite: open %s: %w", dir, ErrNotDirectory)
	}
	if created {
		// Make the new directory's own entry durable.
		if err := fsyncPath(filepath.Dir(dir)); err != nil {
			return nil, fmt.Errorf("pwrite: open %s: fsync parent directory: %w", dir, err)
		}
	}
	// Probe files of an Open that crashed; they are never bucket files.
	if stale, err := filepath.Glob(filepath.Join(dir, probePrefix+"*")); err == nil {
		for _, name := range stale {
			_ = os.Remove(name)
		}
	}
	directOK, why, err := probe(dir, opts.Direct)
	if err != nil {
		return nil, err
	}
	dirFD, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("pwrite: open %s: %w", dir, err)
	}
	b := &Backend{dir: dir, log: log, dirFD: dirFD}
	if opts.Direct {
		b.direct.Store(true)
		if !directOK {
			b.fallback(why)
		}
	}
	return b, nil
}

// probePrefix starts the names of the files Open creates to probe dir.
const probePrefix = ".pwrite-probe-"

// probe creates, writes and removes a file in dir to check that it is
// writable and, when direct is set, whether O_DIRECT works there (directOK;
// why says why not).
func probe(dir string, direct bool) (directOK bool, why error, err error) {
	f, err := os.CreateTemp(dir, probePrefix+"*")
	if err != nil {
		return false, nil, fmt.Errorf("pwrite: open %s: %w: %w", dir, ErrNotWritable, err)
	}
	name := f.Name()
	defer os.Remove(name)
	if err := f.Close(); err != nil {
		return false, nil, fmt.Errorf("pwrite: open %s: %w: %w", dir, ErrNotWritable, err)
	}
	if !direct {
		return false, nil, nil
	}
	fd, err := unix.Open(name, unix.O_WRONLY|unix.O_DIRECT|unix.O_CLOEXEC, 0)
	if err != nil {
		if errors.Is(err, unix.EINVAL) {
			return false, fmt.Errorf("open with O_DIRECT: %w", err), nil
		}
		return false, nil, fmt.Errorf("pwrite: open %s: %w: %w", dir, ErrNotWritable, err)
	}
	defer unix.Close(fd)
	c := getChunk()
	defer putChunk(c)
	if _, err := unix.Pwrite(fd, (*c)[:backend.Alignment], 0); err != nil {
		if errors.Is(err, unix.EINVAL) {
			return false, fmt.Errorf("O_DIRECT write: %w", err), nil
		}
		return false, nil, fmt.Errorf("pwrite: open %s: %w: %w", dir, ErrNotWritable, err)
	}
	return true, nil, nil
}

// fallback switches to buffered I/O and logs why, once.
func (b *Backend) fallback(why error) {
	if b.direct.CompareAndSwap(true, false) {
		b.log.Warn("pwrite: O_DIRECT is not supported by the file system; using buffered I/O",
			"dir", b.dir, "err", why)
	}
}

// Direct reports whether bucket files are currently opened with O_DIRECT.
func (b *Backend) Direct() bool { return b.direct.Load() }

// Dir returns the directory of the bucket files.
func (b *Backend) Dir() string { return b.dir }

// Name returns "pwrite+direct" while O_DIRECT is in use, else "pwrite".
func (b *Backend) Name() string {
	if b.direct.Load() {
		return "pwrite+direct"
	}
	return "pwrite"
}

func (b *Backend) path(id uint64) string { return filepath.Join(b.dir, backend.FileName(id)) }

// lock takes the read lock, or fails with ErrClosed. The caller unlocks.
func (b *Backend) lock() error {
	b.mu.RLock()
	if b.closed {
		b.mu.RUnlock()
		return backend.ErrClosed
	}
	return nil
}

// noSpace wraps ENOSPC and EDQUOT with backend.ErrNoSpace.
func noSpace(err error) error {
	if errors.Is(err, unix.ENOSPC) || errors.Is(err, unix.EDQUOT) {
		return fmt.Errorf("%w: %w", backend.ErrNoSpace, err)
	}
	return err
}

// WriteBucket implements backend.Backend.
func (b *Backend) WriteBucket(ctx context.Context, id uint64, data [][]byte) error {
	if err := b.lock(); err != nil {
		return fmt.Errorf("pwrite: write bucket %016x: %w", id, err)
	}
	defer b.mu.RUnlock()
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("pwrite: write bucket %016x: %w", id, err)
	}
	total := backend.TotalLen(data)
	if total%backend.Alignment != 0 {
		return fmt.Errorf("pwrite: write bucket %016x: %d bytes: %w", id, total, backend.ErrUnaligned)
	}
	direct := b.direct.Load()
	err := b.writeFile(ctx, b.path(id), data, direct)
	if direct && errors.Is(err, errDirectUnsupported) {
		b.fallback(err)
		err = b.writeFile(ctx, b.path(id), data, false)
	}
	if err != nil {
		return fmt.Errorf("pwrite: write bucket %016x: %w", id, err)
	}
	return nil
}

// writeFile creates name, writes data, fdatasyncs it and fsyncs the
// directory. On failure after the file was created it removes the file.
func (b *Backend) writeFile(ctx context.Context, name string, data [][]byte, direct bool) (err error) {
	flags := unix.O_CREAT | unix.O_EXCL | unix.O_WRONLY | unix.O_CLOEXEC
	if direct {
		flags |= unix.O_DIRECT
	}
	fd, err := unix.Open(name, flags, 0o644)
	switch {
	case errors.Is(err, unix.EEXIST):
		return backend.ErrExists
	case direct && errors.Is(err, unix.EINVAL):
		// Some file systems (ramfs) create the file before they refuse
		// O_DIRECT. It is ours: with O_EXCL an existing file is EEXIST.
		if unix.Unlink(name) == nil {
			_ = unix.Fsync(b.dirFD)
		}
		return fmt.Errorf("%w: open: %w", errDirectUnsupported, err)
	case err != nil:
		return fmt.Errorf("create: %w", noSpace(err))
	}
	defer func() {
		if fd >= 0 {
			unix.Close(fd)
		}
		if err != nil {
			// Best effort: the layer above removes orphans at open.
			if unix.Unlink(name) == nil {
				_ = unix.Fsync(b.dirFD)
			}
		}
	}()
	if total := backend.TotalLen(data); total > 0 {
		// Reserve the space first: a full device fails here, before any
		// byte is written, and the extents are laid out in one go.
		if ferr := unix.Fallocate(fd, 0, 0, total); ferr != nil && !errors.Is(ferr, unix.EOPNOTSUPP) {
			return fmt.Errorf("fallocate %d bytes: %w", total, noSpace(ferr))
		}
	}
	if direct {
		err = writeDirect(ctx, fd, data)
	} else {
		err = writeBuffered(ctx, fd, data)
	}
	if err != nil {
		return err
	}
	if err := unix.Fdatasync(fd); err != nil {
		return fmt.Errorf("fdatasync: %w", noSpace(err))
	}
	cerr := unix.Close(fd)
	fd = -1
	if cerr != nil {
		return fmt.Errorf("close: %w", noSpace(cerr))
	}
	if err := unix.Fsync(b.dirFD); err != nil {
		return fmt.Errorf("fsync directory: %w", noSpace(err))
	}
	return nil
}

// writeBuffered writes data from offset 0 with pwritev, at most maxIovecs
// iovecs and about syncEvery bytes per call, looping on short writes.
func writeBuffered(ctx context.Context, fd int, data [][]byte) error {
	iov := make([][]byte, 0, min(len(data), maxIovecs))
	var off, synced int64
	for len(data) > 0 {
		if err := ctx.Err(); err != nil {
			return err
		}
		iov = iov[:0]
		var batch int64
		for len(data) > 0 && len(iov) < maxIovecs && batch < syncEvery {
			if len(data[0]) > 0 {
				iov = append(iov, data[0])
				batch += int64(len(data[0]))
			}
			data = data[1:]
		}
		for len(iov) > 0 {
			n, err := unix.Pwritev(fd, iov, off)
			if errors.Is(err, unix.EINTR) {
				continue
			}
			if err != nil {
				return fmt.Errorf("pwritev at %d: %w", off, noSpace(err))
			}
			if n == 0 {
				return fmt.Errorf("pwritev at %d: wrote nothing: %w", off, noSpace(unix.ENOSPC))
			}
			off += int64(n)
			for n > 0 {
				if n >= len(iov[0]) {
					n -= len(iov[0])
					iov = iov[1:]
				} else {
					iov[0] = iov[0][n:]
					n = 0
				}
			}
		}
		if off-synced >= syncEvery {
			// Start write-back of what is written so far; errors show
			// up again at fdatasync.
			_ = unix.SyncFileRange(fd, synced, off-synced, unix.SYNC_FILE_RANGE_WRITE)
			synced = off
		}
	}
	return nil
}

// pwriteFull writes p at off, looping on short writes and EINTR.
func pwriteFull(fd int, p []byte, off int64) error {
	for len(p) > 0 {
		n, err := unix.Pwrite(fd, p, off)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return err
		}
		if n == 0 {
			return unix.ENOSPC
		}
		p = p[n:]
		off += int64(n)
	}
	return nil
}

// writeDirect copies data into aligned chunkSize buffers and writes them with
// pwrite from writeDepth goroutines, so that several writes are in flight
// (the device's queue depth matters far more for O_DIRECT than for buffered
// writes, which the page cache absorbs). The file was opened with O_DIRECT.
func writeDirect(ctx context.Context, fd int, data [][]byte) error {
	type chunk struct {
		buf *[]byte
		n   int
		off int64
	}
	var (
		wg       sync.WaitGroup
		failed   atomic.Bool
		errMu    sync.Mutex // protects firstErr
		firstErr error
	)
	fail := func(err error) {
		errMu.Lock()
		if firstErr == nil {
			firstErr = err
		}
		errMu.Unlock()
		failed.Store(true)
	}
	work := make(chan chunk)
	for range writeDepth {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for c := range work {
				if !failed.Load() {
					err := pwriteFull(fd, (*c.buf)[:c.n], c.off)
					if errors.Is(err, unix.EINVAL) {
						fail(fmt.Errorf("%w: write at %d: %w", errDirectUnsupported, c.off, err))
					} else if err != nil {
						fail(fmt.Errorf("pwrite at %d: %w", c.off, noSpace(err)))
					}
				}
				putChunk(c.buf)
			}
		}()
	}
	var off int64
	cur := chunk{buf: getChunk()}
	send := func() bool {
		if err := ctx.Err(); err != nil {
			fail(err)
		}
		if failed.Load() {
			return false
		}
		cur.off = off
		off += int64(cur.n)
		work <- cur
		cur = chunk{buf: getChunk()}
		return true
	}
produce:
	for _, d := range data {
		for len(d) > 0 {
			n := copy((*cur.buf)[cur.n:], d)
			cur.n += n
			d = d[n:]
			if cur.n == chunkSize && !send() {
				break produce
			}
		}
	}
	if cur.n > 0 && !failed.Load() {
		send()
	}
	putChunk(cur.buf)
	close(work)
	wg.Wait()
	return firstErr
}

// Read implements backend.Backend.
func (b *Backend) Read(ctx context.Context, id uint64, ops []backend.ReadOp) error {
	if err := b.lock(); err != nil {
		return fmt.Errorf("pwrite: read bucket %016x: %w", id, err)
	}
	defer b.mu.RUnlock()
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("pwrite: read bucket %016x: %w", id, err)
	}
	name := b.path(id)
	direct := b.direct.Load()
	fd, err := openRead(name, direct)
	if direct && errors.Is(err, unix.EINVAL) {
		b.fallback(fmt.Errorf("open for reading with O_DIRECT: %w", err))
		direct = false
		fd, err = openRead(name, false)
	}
	if errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("pwrite: read bucket %016x: %w", id, backend.ErrNotFound)
	}
	if err != nil {
		return fmt.Errorf("pwrite: read bucket %016x: open: %w", id, err)
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return fmt.Errorf("pwrite: read bucket %016x: fstat: %w", id, err)
	}
	r := reader{id: id, fd: fd, size: st.Size, direct: direct}
	if len(ops) < 2 {
		for i := range ops {
			r.do(ctx, &ops[i])
		}
	} else {
		var next atomic.Int64
		var wg sync.WaitGroup
		for range min(readWorkers, len(ops)) {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					i := int(next.Add(1) - 1)
					if i >= len(ops) {
						return
					}
					r.do(ctx, &ops[i])
				}
			}()
		}
		wg.Wait()
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("pwrite: read bucket %016x: %w", id, err)
	}
	return nil
}

func openRead(name string, direct bool) (int, error) {
	flags := unix.O_RDONLY | unix.O_CLOEXEC
	if direct {
		flags |= unix.O_DIRECT
	}
	return unix.Open(name, flags, 0)
}

type reader struct {
	id     uint64
	fd     int
	size   int64
	direct bool
}

// do serves one op; it never returns an error but sets op.Err.
func (r *reader) do(ctx context.Context, op *backend.ReadOp) {
	op.Data, op.Err = nil, nil
	if err := ctx.Err(); err != nil {
		op.Err = err
		return
	}
	switch {
	case op.Off < 0 || op.Len < 0:
		op.Err = fmt.Errorf("pwrite: read bucket %016x [%d,+%d): %w", r.id, op.Off, op.Len, backend.ErrBadRange)
		return
	case op.Off > r.size || int64(op.Len) > r.size-op.Off: // no overflow
		op.Err = fmt.Errorf("pwrite: read bucket %016x [%d,+%d) of %d bytes: %w", r.id, op.Off, op.Len, r.size, backend.ErrShortRead)
		return
	case op.Len == 0:
		op.Data = []byte{}
		return
	}
	var err error
	if r.direct {
		op.Data, err = r.readDirect(op.Off, op.Len)
	} else {
		op.Data = make([]byte, op.Len)
		err = r.preadFull(op.Data, op.Off)
	}
	if err != nil {
		op.Data = nil
		op.Err = fmt.Errorf("pwrite: read bucket %016x [%d,+%d): %w", r.id, op.Off, op.Len, err)
	}
}

// preadFull fills p from off; reaching the end of the file first is
// ErrShortRead.
func (r *reader) preadFull(p []byte, off int64) error {
	for len(p) > 0 {
		n, err := unix.Pread(r.fd, p, off)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return err
		}
		if n == 0 {
			return backend.ErrShortRead
		}
		p = p[n:]
		off += int64(n)
	}
	return nil
}

// readDirect reads [off, off+n) through the aligned range that holds it. When
// the alignment slack is small the caller gets a sub-slice of the aligned
// buffer (no copy); otherwise the range goes through pooled staging chunks
// and is copied into an exact-size slice.
func (r *reader) readDirect(off int64, n int) ([]byte, error) {
	const A = backend.Alignment
	lo := off &^ (A - 1)
	hi := (off + int64(n) + A - 1) &^ (A - 1)
	span := int(hi - lo)
	if hi > r.size {
		// Only a file of unaligned length (not written by a backend)
		// ends inside a block: read up to its end.
		span = int(r.size - lo)
	}
	if slack := span - n; slack <= n/8 || span > chunkSize {
		buf := alignedAlloc(int(hi - lo))
		if err := r.preadDirectSplit(buf[:span], lo); err != nil {
			return nil, err
		}
		s := int(off - lo)
		return buf[s : s+n : s+n], nil
	}
	c := getChunk()
	defer putChunk(c)
	buf := (*c)[:span]
	if err := r.preadDirect(buf, lo); err != nil {
		return nil, err
	}
	s := int(off - lo)
	return slices.Clone(buf[s : s+n]), nil
}

// preadDirectSplit is preadDirect for large ranges: a range of at least
// 2*splitSize is cut into splitSize pieces read by up to readWorkers
// goroutines, so that a single large op keeps several requests in flight.
func (r *reader) preadDirectSplit(p []byte, off int64) error {
	if len(p) < 2*splitSize {
		return r.preadDirect(p, off)
	}
	pieces := (len(p) + splitSize - 1) / splitSize
	var next atomic.Int64
	errs := make([]error, pieces)
	var wg sync.WaitGroup
	for range min(readWorkers, pieces) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= pieces {
					return
				}
				lo := i * splitSize
				hi := min(lo+splitSize, len(p))
				// The last piece keeps p's capacity for the rounded-up
				// tail of an unaligned file.
				errs[i] = r.preadDirect(p[lo:hi:max(hi, min(cap(p), lo+splitSize))], off+int64(lo))
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// preadDirect is preadFull for O_DIRECT, whose transfer length must be a
// multiple of the block size except at the end of the file: it reads the
// rounded-up length and accepts a short count only at end of file.
func (r *reader) preadDirect(p []byte, off int64) error {
	const A = backend.Alignment
	want := len(p)
	full := p[:(len(p)+A-1)&^(A-1)]
	if cap(p) >= len(full) {
		full = p[:len(full):cap(p)]
	} else {
		// Unaligned tail of an unaligned file: need room for the whole block.
		tmp := alignedAlloc(len(full))
		if err := r.preadDirect(tmp, off); err != nil {
			return err
		}
		copy(p, tmp)
		return nil
	}
	got := 0
	for got < want {
		m, err := unix.Pread(r.fd, full[got:], off+int64(got))
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return err
		}
		if m == 0 {
			return backend.ErrShortRead
		}
		got += m
	}
	return nil
}

// Delete implements backend.Backend.
func (b *Backend) Delete(id uint64) error {
	if err := b.lock(); err != nil {
		return fmt.Errorf("pwrite: delete bucket %016x: %w", id, err)
	}
	defer b.mu.RUnlock()
	if err := unix.Unlink(b.path(id)); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return fmt.Errorf("pwrite: delete bucket %016x: %w", id, backend.ErrNotFound)
		}
		return fmt.Errorf("pwrite: delete bucket %016x: %w", id, err)
	}
	if err := unix.Fsync(b.dirFD); err != nil {
		return fmt.Errorf("pwrite: delete bucket %016x: fsync directory: %w", id, err)
	}
	return nil
}

// scan calls fn for every bucket file in the directory, with its stat.
// Files that vanish during the scan are skipped.
func (b *Backend) scan(fn func(id uint64, st *unix.Stat_t)) error {
	entries, err := os.ReadDir(b.dir)
	if err != nil {
		return err
	}
	var st unix.Stat_t
	for _, e := range entries {
		id, ok := backend.ParseFileName(e.Name())
		if !ok || !e.Type().IsRegular() {
			continue
		}
		if err := unix.Fstatat(b.dirFD, e.Name(), &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			if errors.Is(err, unix.ENOENT) {
				continue
			}
			return fmt.Errorf("stat %s: %w", e.Name(), err)
		}
		fn(id, &st)
	}
	return nil
}

// List implements backend.Backend.
func (b *Backend) List() ([]backend.FileInfo, error) {
	if err := b.lock(); err != nil {
		return nil, fmt.Errorf("pwrite: list: %w", err)
	}
	defer b.mu.RUnlock()
	var out []backend.FileInfo
	err := b.scan(func(id uint64, st *unix.Stat_t) {
		out = append(out, backend.FileInfo{ID: id, Size: st.Size})
	})
	if err != nil {
		return nil, fmt.Errorf("pwrite: list %s: %w", b.dir, err)
	}
	// ReadDir sorts by name, which for FileName is id order; sort anyway
	// rather than rely on it.
	slices.SortFunc(out, func(x, y backend.FileInfo) int {
		switch {
		case x.ID < y.ID:
			return -1
		case x.ID > y.ID:
			return 1
		}
		return 0
	})
	return out, nil
}

// Allocated implements backend.Backend: the sum of st_blocks*512 of the
// bucket files.
func (b *Backend) Allocated() (int64, error) {
	if err := b.lock(); err != nil {
		return 0, fmt.Errorf("pwrite: allocated: %w", err)
	}
	defer b.mu.RUnlock()
	var n int64
	err := b.scan(func(_ uint64, st *unix.Stat_t) { n += st.Blocks * 512 })
	if err != nil {
		return 0, fmt.Errorf("pwrite: allocated %s: %w", b.dir, err)
	}
	return n, nil
}

// Close implements backend.Backend. It waits for operations in flight.
func (b *Backend) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return fmt.Errorf("pwrite: close: %w", backend.ErrClosed)
	}
	b.closed = true
	if err := unix.Close(b.dirFD); err != nil {
		return fmt.Errorf("pwrite: close %s: %w", b.dir, err)
	}
	return nil
}

func fsyncPath(path string) error {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	return unix.Fsync(fd)
}
