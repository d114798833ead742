package uring

import (
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"sync"

	"github.com/tierstore/tierstore/backend"
	"github.com/tierstore/tierstore/backend/internal/bfile"
	"github.com/tierstore/tierstore/backend/pwrite"
	iuring "github.com/tierstore/tierstore/internal/uring"
)

// Defaults of Options; DefaultOptions returns them with Direct set.
const (
	DefaultQueueDepth = 32
	DefaultWriteDepth = 8
	// DefaultWriteDepthUnderReads: chunk writes in flight per bucket while
	// reads wait (Options.WriteDepthUnderReads).
	DefaultWriteDepthUnderReads = 2
	DefaultChunkSize            = 1 << 20
	DefaultMaxRings             = 64
	DefaultReadDepth            = 128
	// MaxQueueDepth bounds QueueDepth (ring entries and staging slots).
	MaxQueueDepth = 1024
	// MaxChunkSize bounds ChunkSize.
	MaxChunkSize = 16 << 20
)

// Options configure Open. Zero numeric fields take the defaults above.
type Options struct {
	// Direct opens bucket files with O_DIRECT. Recommended (DefaultOptions
	// sets it); the zero value means buffered I/O, as in package pwrite.
	// When the file system refuses O_DIRECT (EINVAL at open or at the first
	// write, e.g. tmpfs) the backend switches to buffered I/O and logs why,
	// once.
	Direct bool
	// QueueDepth is the size of each write ring. Default 32.
	QueueDepth int
	// ReadDepth is the most read pieces in flight on the shared read ring,
	// across every Read in progress. Default 128.
	ReadDepth int
	// WriteDepth is the number of chunk writes one WriteBucket keeps in
	// flight (<= QueueDepth), and so the number of ChunkSize staging slots
	// of each ring. Default 8.
	WriteDepth int
	// WriteDepthUnderReads is the most chunk writes one WriteBucket keeps
	// in flight while reads are waiting on the read ring (<= WriteDepth),
	// so that a read queues behind at most this many chunk writes on the
	// device instead of WriteDepth: reads take priority over offload
	// writes, which run at full depth again as soon as no read is
	// pending. Default 2; set it to WriteDepth to turn the yield off.
	WriteDepthUnderReads int
	// ChunkSize is the size of one write and of one staging slot; a
	// multiple of backend.Alignment. Default 1 MiB.
	ChunkSize int
	// MaxRings bounds the write rings, one per WriteBucket in progress;
	// calls beyond it wait for a ring. Default 64. At most
	// max(4, 2*GOMAXPROCS) unused rings are kept open. Reads use one shared
	// ring of their own and never wait for a write ring.
	MaxRings int
	// Logger receives the fallback warnings; default slog.Default().
	Logger *slog.Logger
}

// DefaultOptions returns the recommended options: O_DIRECT, queue depth 32,
// 8 writes of 1 MiB in flight.
func DefaultOptions() Options {
	return Options{Direct: true, QueueDepth: DefaultQueueDepth, WriteDepth: DefaultWriteDepth, ChunkSize: DefaultChunkSize}
}

func (o *Options) fill() error {
	if o.QueueDepth == 0 {
		o.QueueDepth = DefaultQueueDepth
	}
	if o.WriteDepth == 0 {
		o.WriteDepth = min(DefaultWriteDepth, o.QueueDepth)
	}
	if o.WriteDepthUnderReads == 0 {
		o.WriteDepthUnderReads = min(DefaultWriteDepthUnderReads, o.WriteDepth)
	}
	if o.ChunkSize == 0 {
		o.ChunkSize = DefaultChunkSize
	}
	if o.MaxRings == 0 {
		o.MaxRings = DefaultMaxRings
	}
	if o.ReadDepth == 0 {
		o.ReadDepth = DefaultReadDepth
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	switch {
	case o.QueueDepth < 1 || o.QueueDepth > MaxQueueDepth:
		return fmt.Errorf("%w: QueueDepth %d not in 1..%d", ErrBadOptions, o.QueueDepth, MaxQueueDepth)
	case o.WriteDepth < 1 || o.WriteDepth > o.QueueDepth:
		return fmt.Errorf("%w: WriteDepth %d not in 1..QueueDepth(%d)", ErrBadOptions, o.WriteDepth, o.QueueDepth)
	case o.WriteDepthUnderReads < 1 || o.WriteDepthUnderReads > o.WriteDepth:
		return fmt.Errorf("%w: WriteDepthUnderReads %d not in 1..WriteDepth(%d)", ErrBadOptions, o.WriteDepthUnderReads, o.WriteDepth)
	case o.ChunkSize < backend.Alignment || o.ChunkSize > MaxChunkSize || o.ChunkSize%backend.Alignment != 0:
		return fmt.Errorf("%w: ChunkSize %d not a multiple of %d in %d..%d", ErrBadOptions, o.ChunkSize, backend.Alignment, backend.Alignment, MaxChunkSize)
	case o.MaxRings < 1:
		return fmt.Errorf("%w: MaxRings %d < 1", ErrBadOptions, o.MaxRings)
	case o.ReadDepth < 1 || o.ReadDepth > MaxQueueDepth:
		return fmt.Errorf("%w: ReadDepth %d not in 1..%d", ErrBadOptions, o.ReadDepth, MaxQueueDepth)
	}
	return nil
}

// fallbackOnce makes the "io_uring unavailable" warning appear once per
// process, not once per Open.
var fallbackOnce sync.Once

// Open returns a backend storing bucket files in dir with io_uring. dir must
// be absolute; it is created when missing and must be writable (the same
// rules and errors as pwrite.Open, which validates it).
//
// When io_uring cannot be used (io_uring_setup fails with ENOSYS, EPERM,
// ENOMEM, ... — an iuring.SetupError), Open logs why, once per process, and
// returns a pwrite backend with the same Direct setting instead.
func Open(dir string, opts Options) (backend.Backend, error) {
	if err := opts.fill(); err != nil {
		return nil, err
	}
	pw, err := pwrite.Open(dir, pwrite.Options{Direct: opts.Direct, Logger: opts.Logger})
	if err != nil {
		return nil, err
	}
	p := newPool(opts.MaxRings, max(4, 2*runtime.GOMAXPROCS(0)), opts.QueueDepth, opts.WriteDepth, opts.ChunkSize)
	w, err := p.create() // proves io_uring works here; kept as the first idle ring
	if err != nil {
		if errors.Is(err, iuring.ErrUnavailable) {
			fallbackOnce.Do(func() {
				opts.Logger.Warn("uring: io_uring unavailable, using the pwrite backend", "dir", dir, "err", err)
			})
			return pw, nil
		}
		pw.Close()
		return nil, fmt.Errorf("uring: open %s: %w", dir, err)
	}
	fixedOK, err := checkOpcodes(w.ring)
	if err != nil {
		w.close()
		opts.Logger.Warn("uring: kernel lacks opcodes, using the pwrite backend", "dir", dir, "err", err)
		return pw, nil
	}
	rx, err := newReactor(opts.ReadDepth)
	if err != nil {
		w.close()
		pw.Close()
		return nil, fmt.Errorf("uring: open %s: read ring: %w", dir, err)
	}
	// pw has validated dir (and logged a probe's fallback); d takes over.
	d, err := bfile.Open(bfile.Config{Path: pw.Dir(), Direct: pw.Direct(), Pkg: "uring", ErrDirect: errDirectUnsupported, Log: opts.Logger})
	pw.Close()
	if err != nil {
		w.close()
		rx.stop()
		return nil, fmt.Errorf("uring: open %s: %w", dir, err)
	}
	p.fixedOK = fixedOK
	w.fixedOK = fixedOK
	p.sem <- struct{}{}
	p.idle <- w
	return &Backend{d: d, opts: opts, pool: p, rx: rx}, nil
}

// checkOpcodes probes the kernel for the opcodes the backend needs, and
// reports whether WRITE_FIXED is there too.
func checkOpcodes(r *iuring.Ring) (fixedOK bool, err error) {
	pr, err := r.Probe()
	if err != nil {
		return false, err
	}
	for _, op := range []iuring.Opcode{iuring.OpRead, iuring.OpWrite, iuring.OpWritev, iuring.OpFsync} {
		if !pr.Supported(op) {
			return false, fmt.Errorf("uring: opcode %v not supported", op)
		}
	}
	return pr.Supported(iuring.OpWriteFixed), nil
}

// Backend stores bucket files with io_uring: see the package documentation.
type Backend struct {
	opts Options
	pool *pool    // write rings
	rx   *reactor // the read ring
	// d holds the direct flag and the lock: every operation holds its read
	// lock throughout, Close its write lock, so the pool outlives them.
	d *bfile.Dir
}

var _ backend.Backend = (*Backend)(nil)

// Name is "uring+direct" while O_DIRECT is in use, else "uring".
func (b *Backend) Name() string { return b.d.Name() }

// Direct reports whether bucket files are currently opened with O_DIRECT.
func (b *Backend) Direct() bool { return b.d.Direct() }

// Dir is the directory of the bucket files.
func (b *Backend) Dir() string { return b.d.Path() }

// Delete implements backend.Backend: unlink, fsync of the directory.
func (b *Backend) Delete(id uint64) error { return b.d.Delete(id) }

// List implements backend.Backend.
func (b *Backend) List() ([]backend.FileInfo, error) { return b.d.List() }

// Allocated implements backend.Backend.
func (b *Backend) Allocated() (int64, error) { return b.d.Allocated() }

// Close waits for the operations in flight, then closes the rings.
func (b *Backend) Close() error {
	return b.d.Close(func() error {
		b.rx.stop()
		return b.pool.close()
	})
}
