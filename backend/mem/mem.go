package mem

import (
	"context"
	"fmt"
	"slices"
	"sync"

	"github.com/tierstore/tierstore/backend"
)

type file struct {
	data    []byte // immutable once the file is in the map
	durable bool   // guarded by Backend.mu
}

// Backend is an in-memory backend.Backend. Create it with New.
type Backend struct {
	mu sync.Mutex // protects files, closed, epoch, hook and the durable flags
	// files maps bucket id to its file.
	files map[uint64]*file
	// closed is set by Close.
	closed bool
	// epoch counts Crash calls; a WriteBucket that started in an older
	// epoch is not made durable.
	epoch uint64
	// hook runs inside WriteBucket before the durable point (may be nil).
	hook func(id uint64)
}

var _ backend.Backend = (*Backend)(nil)

// New returns an empty in-memory backend.
func New() *Backend {
	return &Backend{files: make(map[uint64]*file)}
}

// SetWriteHook installs fn, called by every WriteBucket after the file exists
// with all its bytes but before it becomes durable (nil removes the hook). fn
// runs without the backend's lock held: it may call Crash, CrashClone, List or
// Read.
func (b *Backend) SetWriteHook(fn func(id uint64)) {
	b.mu.Lock()
	b.hook = fn
	b.mu.Unlock()
}

// Name returns "mem".
func (b *Backend) Name() string { return "mem" }

func copyData(data [][]byte) []byte {
	buf := make([]byte, 0, backend.TotalLen(data))
	for _, d := range data {
		buf = append(buf, d...)
	}
	return buf
}

// insert adds a volatile file; it returns the current epoch.
func (b *Backend) insert(op string, id uint64, buf []byte) (uint64, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return 0, fmt.Errorf("mem: %s bucket %016x: %w", op, id, backend.ErrClosed)
	}
	if _, ok := b.files[id]; ok {
		return 0, fmt.Errorf("mem: %s bucket %016x: %w", op, id, backend.ErrExists)
	}
	b.files[id] = &file{data: buf}
	return b.epoch, nil
}

// WriteBucket implements backend.Backend.
func (b *Backend) WriteBucket(ctx context.Context, id uint64, data [][]byte) error {
	if err := b.checkOpen("write", id); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("mem: write bucket %016x: %w", id, err)
	}
	if n := backend.TotalLen(data); n%backend.Alignment != 0 {
		return fmt.Errorf("mem: write bucket %016x: %d bytes: %w", id, n, backend.ErrUnaligned)
	}
	epoch, err := b.insert("write", id, copyData(data))
	if err != nil {
		return err
	}
	b.mu.Lock()
	hook := b.hook
	b.mu.Unlock()
	if hook != nil {
		hook(id)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	f, ok := b.files[id]
	switch {
	case b.epoch != epoch:
		// Crash already discarded the volatile file.
		return fmt.Errorf("mem: write bucket %016x: %w", id, ErrCrashed)
	case !ok:
		// Deleted while being written: a caller contract violation, but
		// do not resurrect it.
		return fmt.Errorf("mem: write bucket %016x: deleted during the write: %w", id, backend.ErrNotFound)
	case ctx.Err() != nil:
		delete(b.files, id)
		return fmt.Errorf("mem: write bucket %016x: %w", id, ctx.Err())
	}
	f.durable = true
	return nil
}

// WriteVolatile creates bucket file id holding the concatenation of data,
// without alignment checks, and leaves it volatile: it is visible to Read,
// List and Allocated but Crash discards it and CrashClone omits it. It models
// a torn write that never reached its durable point.
func (b *Backend) WriteVolatile(id uint64, data [][]byte) error {
	_, err := b.insert("write volatile", id, copyData(data))
	return err
}

func (b *Backend) checkOpen(op string, id uint64) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return fmt.Errorf("mem: %s bucket %016x: %w", op, id, backend.ErrClosed)
	}
	return nil
}

// Read implements backend.Backend: ops are copied out of the files.
func (b *Backend) Read(ctx context.Context, ops []backend.ReadOp) error {
	b.mu.Lock()
	closed := b.closed
	files := make(map[uint64]*file, len(ops))
	for i := range ops {
		if f, ok := b.files[ops[i].ID]; ok {
			files[ops[i].ID] = f
		}
	}
	b.mu.Unlock()
	if closed {
		return fmt.Errorf("mem: read: %w", backend.ErrClosed)
	}
	if err := ctx.Err(); err != nil {
		for i := range ops {
			ops[i].Data, ops[i].Err = nil, fmt.Errorf("mem: read bucket %016x: %w", ops[i].ID, err)
		}
		return fmt.Errorf("mem: read: %w", err)
	}
	for i := range ops {
		op := &ops[i]
		op.Data, op.Err = nil, nil
		f, ok := files[op.ID]
		if !ok {
			op.Err = fmt.Errorf("mem: read bucket %016x: %w", op.ID, backend.ErrNotFound)
			continue
		}
		size := int64(len(f.data))
		switch {
		case op.Off < 0 || op.Len < 0:
			op.Err = fmt.Errorf("mem: read bucket %016x [%d,+%d): %w", op.ID, op.Off, op.Len, backend.ErrBadRange)
		case op.Buf != nil && len(op.Buf) < op.Len:
			op.Err = fmt.Errorf("mem: read bucket %016x [%d,+%d) into %d bytes: %w", op.ID, op.Off, op.Len, len(op.Buf), backend.ErrBufferTooSmall)
		case op.Off > size || int64(op.Len) > size-op.Off: // no overflow
			op.Err = fmt.Errorf("mem: read bucket %016x [%d,+%d) of %d bytes: %w", op.ID, op.Off, op.Len, size, backend.ErrShortRead)
		case op.Buf != nil:
			op.Data = op.Buf[:copy(op.Buf[:op.Len], f.data[op.Off:op.Off+int64(op.Len)]):op.Len]
		default:
			op.Data = slices.Clone(f.data[op.Off : op.Off+int64(op.Len)])
			if op.Data == nil {
				op.Data = []byte{}
			}
		}
	}
	return nil
}

// Delete implements backend.Backend; the removal is durable at return.
func (b *Backend) Delete(id uint64) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return fmt.Errorf("mem: delete bucket %016x: %w", id, backend.ErrClosed)
	}
	if _, ok := b.files[id]; !ok {
		return fmt.Errorf("mem: delete bucket %016x: %w", id, backend.ErrNotFound)
	}
	delete(b.files, id)
	return nil
}

// List implements backend.Backend. Volatile files are listed too.
func (b *Backend) List() ([]backend.FileInfo, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return nil, fmt.Errorf("mem: list: %w", backend.ErrClosed)
	}
	out := make([]backend.FileInfo, 0, len(b.files))
	for id, f := range b.files {
		out = append(out, backend.FileInfo{ID: id, Size: int64(len(f.data))})
	}
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

// Allocated implements backend.Backend: file sizes rounded up to
// backend.Alignment.
func (b *Backend) Allocated() (int64, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return 0, fmt.Errorf("mem: allocated: %w", backend.ErrClosed)
	}
	var n int64
	for _, f := range b.files {
		n += (int64(len(f.data)) + backend.Alignment - 1) / backend.Alignment * backend.Alignment
	}
	return n, nil
}

// Close implements backend.Backend. The files are kept, so CrashClone still
// works after Close (a test closes the engine, then reopens on the clone).
func (b *Backend) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return fmt.Errorf("mem: close: %w", backend.ErrClosed)
	}
	b.closed = true
	return nil
}

// Crash simulates a power cut in place: every volatile file disappears, and a
// WriteBucket in progress returns ErrCrashed without leaving a file. Durable
// files and completed deletes are kept. The backend stays usable (and stays
// closed if it was closed).
func (b *Backend) Crash() {
	b.mu.Lock()
	defer b.mu.Unlock()
	for id, f := range b.files {
		if !f.durable {
			delete(b.files, id)
		}
	}
	b.epoch++
}

// CrashClone returns a new open Backend holding exactly the durable files of
// b, as a machine rebooted after a crash at this instant would find them. b
// is not modified. The clone has no write hook.
func (b *Backend) CrashClone() *Backend {
	b.mu.Lock()
	defer b.mu.Unlock()
	c := New()
	for id, f := range b.files {
		if f.durable {
			c.files[id] = &file{data: f.data, durable: true}
		}
	}
	return c
}
