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
	"github.com/tierstore/tierstore/backend/internal/bfile"
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
	d *bfile.Dir // the directory, its lock and the direct flag
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
	d, err := bfile.Open(bfile.Config{Path: dir, Direct: opts.Direct, Pkg: "pwrite", ErrDirect: errDirectUnsupported, Log: log})
	if err != nil {
		return nil, fmt.Errorf("pwrite: open %s: %w", dir, err)
	}
	if opts.Direct && !directOK {
		d.Fallback(why)
	}
	return &Backend{d: d}, nil
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

// Direct reports whether bucket files are currently opened with O_DIRECT.
func (b *Backend) Direct() bool { return b.d.Direct() }

// Dir returns the directory of the bucket files.
func (b *Backend) Dir() string { return b.d.Path() }

// Name returns "pwrite+direct" while O_DIRECT is in use, else "pwrite".
func (b *Backend) Name() string { return b.d.Name() }

// WriteBucket implements backend.Backend: create, fallocate, write,
// fdatasync, close, fsync of the directory (see bfile.Dir.WriteBucket).
func (b *Backend) WriteBucket(ctx context.Context, id uint64, data [][]byte) error {
	return b.d.WriteBucket(ctx, id, data, writeFile)
}

// writeFile is the bfile.WriteFunc of WriteBucket.
func writeFile(ctx context.Context, fd int, data [][]byte, direct bool) error {
	// Reserve the space first: a full device fails here, before any byte is
	// written, and the extents are laid out in one go.
	if err := bfile.Fallocate(fd, backend.TotalLen(data)); err != nil {
		return err
	}
	write := writeBuffered
	if direct {
		write = writeDirect
	}
	if err := write(ctx, fd, data); err != nil {
		return err
	}
	if err := unix.Fdatasync(fd); err != nil {
		return fmt.Errorf("fdatasync: %w", bfile.NoSpace(err))
	}
	return nil
}

// writeBuffered writes data from offset 0 with pwritev, at most
// bfile.MaxIovecs iovecs and about syncEvery bytes per call, looping on
// short writes.
func writeBuffered(ctx context.Context, fd int, data [][]byte) error {
	iov := make([][]byte, 0, min(len(data), bfile.MaxIovecs))
	var off, synced int64
	for len(data) > 0 {
		if err := ctx.Err(); err != nil {
			return err
		}
		iov, data, _ = bfile.NextIovecs(iov[:0], data, syncEvery)
		for len(iov) > 0 {
			n, err := unix.Pwritev(fd, iov, off)
			if errors.Is(err, unix.EINTR) {
				continue
			}
			if err != nil {
				return fmt.Errorf("pwritev at %d: %w", off, bfile.NoSpace(err))
			}
			if n == 0 {
				return fmt.Errorf("pwritev at %d: wrote nothing: %w", off, bfile.NoSpace(unix.ENOSPC))
			}
			off += int64(n)
			iov = bfile.Advance(iov, n)
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
						fail(fmt.Errorf("pwrite at %d: %w", c.off, bfile.NoSpace(err)))
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

// Read implements backend.Backend; the ops (of any files) are served by up
// to readWorkers goroutines.
func (b *Backend) Read(ctx context.Context, ops []backend.ReadOp) error {
	rs, err := b.d.StartRead(ctx, ops)
	if err != nil {
		return err
	}
	var todo []int
	for i, h := range rs.Files {
		if h != nil {
			todo = append(todo, i)
		}
	}
	if len(todo) < 2 {
		for _, i := range todo {
			do(ctx, &ops[i], rs.Files[i])
		}
		return rs.Finish(ctx)
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(readWorkers, len(todo)) {
		wg.Go(func() {
			for n := int(next.Add(1) - 1); n < len(todo); n = int(next.Add(1) - 1) {
				do(ctx, &ops[todo[n]], rs.Files[todo[n]])
			}
		})
	}
	wg.Wait()
	return rs.Finish(ctx)
}

// reader reads from one open bucket file.
type reader struct {
	fd     int
	size   int64
	direct bool
}

// do serves one op from its file h; it never returns an error but sets
// op.Err. A done ctx leaves op to ReadSet.Finish.
func do(ctx context.Context, op *backend.ReadOp, h *bfile.Handle) {
	if ctx.Err() != nil {
		return
	}
	r := reader{fd: h.Fd, size: h.Size, direct: h.Direct}
	var err error
	switch {
	case !r.direct:
		op.Data = bfile.Dest(op)
		err = r.preadFull(op.Data, op.Off)
	case bfile.DirectInto(op):
		// Straight into the caller's aligned buffer; the whole blocks fit.
		op.Data = op.Buf[:op.Len:len(op.Buf)]
		err = r.preadDirectSplit(op.Data, op.Off)
		op.Data = op.Data[:op.Len:op.Len]
	default:
		op.Data, err = r.readDirect(op.Off, op.Len, op.Buf)
	}
	if err != nil {
		op.Data = nil
		op.Err = fmt.Errorf("pwrite: read bucket %016x [%d,+%d): %w", h.ID, op.Off, op.Len, err)
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

// readDirect reads [off, off+n) through the aligned range that holds it,
// into dst (len >= n) when not nil, else into new memory. Without dst, when
// the alignment slack is small the caller gets a sub-slice of an aligned
// buffer (no copy); otherwise the range goes through pooled staging chunks
// and is copied out.
func (r *reader) readDirect(off int64, n int, dst []byte) ([]byte, error) {
	const A = backend.Alignment
	lo := off &^ (A - 1)
	hi := (off + int64(n) + A - 1) &^ (A - 1)
	span := int(hi - lo)
	if hi > r.size {
		// Only a file of unaligned length (not written by a backend)
		// ends inside a block: read up to its end.
		span = int(r.size - lo)
	}
	s := int(off - lo)
	if slack := span - n; span > chunkSize || (dst == nil && slack <= n/8) {
		buf := bfile.AlignedAlloc(int(hi - lo))
		if err := r.preadDirectSplit(buf[:span], lo); err != nil {
			return nil, err
		}
		if dst == nil {
			return buf[s : s+n : s+n], nil
		}
		return dst[:copy(dst[:n], buf[s:s+n]):n], nil
	}
	c := getChunk()
	defer putChunk(c)
	buf := (*c)[:span]
	if err := r.preadDirect(buf, lo); err != nil {
		return nil, err
	}
	if dst == nil {
		return slices.Clone(buf[s : s+n]), nil
	}
	return dst[:copy(dst[:n], buf[s:s+n]):n], nil
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
		tmp := bfile.AlignedAlloc(len(full))
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

// Delete implements backend.Backend: unlink, fsync of the directory.
func (b *Backend) Delete(id uint64) error { return b.d.Delete(id) }

// List implements backend.Backend.
func (b *Backend) List() ([]backend.FileInfo, error) { return b.d.List() }

// Allocated implements backend.Backend: the sum of st_blocks*512 of the
// bucket files.
func (b *Backend) Allocated() (int64, error) { return b.d.Allocated() }

// Close implements backend.Backend. It waits for operations in flight.
func (b *Backend) Close() error { return b.d.Close(nil) }

func fsyncPath(path string) error {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	return unix.Fsync(fd)
}
