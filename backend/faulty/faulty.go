package faulty

import (
	"context"
	"errors"
	"fmt"

	"sync"

	"github.com/tierstore/tierstore/backend"
)

// Op names an operation of backend.Backend for rules and counters.
type Op int

// Operations. OpSync is the durability point at the end of WriteBucket.
const (
	OpWrite Op = iota
	OpRead
	OpDelete
	OpList
	OpAllocated
	OpSync
	OpClose
	numOps
)

var opNames = [numOps]string{"write", "read", "delete", "list", "allocated", "sync", "close"}

func (o Op) String() string {
	if o >= 0 && o < numOps {
		return opNames[o]
	}
	return fmt.Sprintf("Op(%d)", int(o))
}

type ruleKind int

const (
	kindFail ruleKind = iota
	kindShortWrite
)

type rule struct {
	op   Op
	kind ruleKind
	nth  int // fire at the nth matching call; 0 = every call
	seen int // matching calls since the rule was installed
	err  error
	done bool
}

type corruption struct {
	id  uint64
	off int64
}

// Backend is a fault-injecting wrapper; create it with Wrap.
type Backend struct {
	inner backend.Backend

	mu          sync.Mutex // protects rules, corrupt, calls, beforeWrite, onWrite
	rules       []*rule
	corrupt     []corruption
	calls       [numOps]int
	beforeWrite func(id uint64)
	onWrite     func(id uint64)
}

var _ backend.Backend = (*Backend)(nil)

// Wrap returns a wrapper around b with no rules: it behaves exactly as b.
func Wrap(b backend.Backend) *Backend { return &Backend{inner: b} }

// Inner returns the wrapped backend.
func (f *Backend) Inner() backend.Backend { return f.inner }

func (f *Backend) addRule(r *rule) {
	if r.op < 0 || r.op >= numOps {
		panic(fmt.Sprintf("faulty: unknown op %d", int(r.op)))
	}
	f.mu.Lock()
	f.rules = append(f.rules, r)
	f.mu.Unlock()
}

// FailNth makes the n-th call (n >= 1) of op from now on fail with err.
func (f *Backend) FailNth(op Op, n int, err error) {
	if n < 1 {
		panic(fmt.Sprintf("faulty: FailNth(%v, %d): n must be >= 1", op, n))
	}
	f.addRule(&rule{op: op, kind: kindFail, nth: n, err: err})
}

// FailAll makes every call of op fail with err until Clear.
func (f *Backend) FailAll(op Op, err error) {
	f.addRule(&rule{op: op, kind: kindFail, err: err})
}

// NoSpace makes every WriteBucket fail with backend.ErrNoSpace until Clear.
func (f *Backend) NoSpace() { f.FailAll(OpWrite, backend.ErrNoSpace) }

// ShortWrite makes the n-th WriteBucket (n >= 1) from now on write half its
// bytes, leave the torn file behind and fail.
func (f *Backend) ShortWrite(n int) {
	if n < 1 {
		panic(fmt.Sprintf("faulty: ShortWrite(%d): n must be >= 1", n))
	}
	f.addRule(&rule{op: OpWrite, kind: kindShortWrite, nth: n})
}

// SyncFail makes the n-th WriteBucket (n >= 1) that the inner backend
// completes fail at its durability point; the file is removed.
func (f *Backend) SyncFail(n int) { f.FailNth(OpSync, n, nil) }

// Corrupt inverts the byte at file offset off of bucket id in every Read.
func (f *Backend) Corrupt(id uint64, off int64) {
	f.mu.Lock()
	f.corrupt = append(f.corrupt, corruption{id: id, off: off})
	f.mu.Unlock()
}

// Clear removes every rule and corruption (hooks stay).
func (f *Backend) Clear() {
	f.mu.Lock()
	f.rules, f.corrupt = nil, nil
	f.mu.Unlock()
}

// BeforeWrite installs fn (nil removes it), called with the bucket id before
// a WriteBucket reaches the inner backend.
func (f *Backend) BeforeWrite(fn func(id uint64)) {
	f.mu.Lock()
	f.beforeWrite = fn
	f.mu.Unlock()
}

// OnWrite installs fn (nil removes it), called with the bucket id after the
// inner backend made the bucket durable, before WriteBucket returns.
func (f *Backend) OnWrite(fn func(id uint64)) {
	f.mu.Lock()
	f.onWrite = fn
	f.mu.Unlock()
}

// Calls returns how many times op was called since Wrap.
func (f *Backend) Calls(op Op) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls[op]
}

// sentinels are returned unwrapped by ErrInjected when injected.
var sentinels = []error{
	backend.ErrNotFound, backend.ErrExists, backend.ErrNoSpace, backend.ErrClosed,
	backend.ErrUnaligned, backend.ErrShortRead, backend.ErrBadRange, backend.ErrInjected,
}

func injected(err error) error {
	if err == nil {
		return backend.ErrInjected
	}
	for _, s := range sentinels {
		if errors.Is(err, s) {
			return err
		}
	}
	return fmt.Errorf("%w: %w", backend.ErrInjected, err)
}

// enter counts a call of op and returns the rule that fires for it, if any.
func (f *Backend) enter(op Op) *rule {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls[op]++
	var fired *rule
	for _, r := range f.rules {
		if r.op != op || r.done {
			continue
		}
		r.seen++
		if fired == nil && (r.nth == 0 || r.seen == r.nth) {
			fired = r
			if r.nth != 0 {
				r.done = true
			}
		}
	}
	return fired
}

func (f *Backend) hooks() (before, after func(uint64)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.beforeWrite, f.onWrite
}

// volatileWriter is implemented by mem.Backend.
type volatileWriter interface {
	WriteVolatile(id uint64, data [][]byte) error
}

// WriteBucket implements backend.Backend with the OpWrite, ShortWrite and
// OpSync rules.
func (f *Backend) WriteBucket(ctx context.Context, id uint64, data [][]byte) error {
	return f.writeBucket(ctx, id, data, f.inner.WriteBucket)
}

// WriteBucketChecked implements backend.CheckedWriter with the rules of
// WriteBucket, around the inner backend's checked write
// (backend.ErrUnchecked when it has none).
func (f *Backend) WriteBucketChecked(ctx context.Context, id uint64, data [][]byte, checks []backend.PieceCRC) error {
	cw, ok := f.inner.(backend.CheckedWriter)
	if !ok {
		return fmt.Errorf("faulty: write bucket %016x: %w", id, backend.ErrUnchecked)
	}
	return f.writeBucket(ctx, id, data, func(ctx context.Context, id uint64, data [][]byte) error {
		return cw.WriteBucketChecked(ctx, id, data, checks)
	})
}

func (f *Backend) writeBucket(ctx context.Context, id uint64, data [][]byte, write func(context.Context, uint64, [][]byte) error) error {
	if r := f.enter(OpWrite); r != nil {
		if r.kind == kindShortWrite {
			return f.shortWrite(ctx, id, data)
		}
		return fmt.Errorf("faulty: write bucket %016x: %w", id, injected(r.err))
	}
	before, after := f.hooks()
	if before != nil {
		before(id)
	}
	if err := write(ctx, id, data); err != nil {
		return err
	}
	if r := f.enter(OpSync); r != nil {
		if err := f.inner.Delete(id); err != nil {
			return fmt.Errorf("faulty: write bucket %016x: sync: %w (and removing the file: %v)", id, injected(r.err), err)
		}
		return fmt.Errorf("faulty: write bucket %016x: sync: %w", id, injected(r.err))
	}
	if after != nil {
		after(id)
	}
	return nil
}

func (f *Backend) shortWrite(ctx context.Context, id uint64, data [][]byte) error {
	half := backend.TotalLen(data) / 2
	var werr error
	if vw, ok := f.inner.(volatileWriter); ok {
		werr = vw.WriteVolatile(id, prefix(data, half))
	} else if half = half / backend.Alignment * backend.Alignment; half > 0 {
		werr = f.inner.WriteBucket(ctx, id, prefix(data, half))
	}
	if werr != nil {
		return fmt.Errorf("faulty: write bucket %016x: short write of %d bytes: %w", id, half, werr)
	}
	return fmt.Errorf("faulty: write bucket %016x: short write: only %d of %d bytes written: %w",
		id, half, backend.TotalLen(data), backend.ErrInjected)
}

// prefix returns the first n bytes of data as iovecs.
func prefix(data [][]byte, n int64) [][]byte {
	var out [][]byte
	for _, d := range data {
		if n <= 0 {
			break
		}
		if int64(len(d)) > n {
			d = d[:n]
		}
		out = append(out, d)
		n -= int64(len(d))
	}
	return out
}

// Read implements backend.Backend with the OpRead rules and corruptions.
func (f *Backend) Read(ctx context.Context, ops []backend.ReadOp) error {
	if r := f.enter(OpRead); r != nil {
		return fmt.Errorf("faulty: read: %w", injected(r.err))
	}
	if err := f.inner.Read(ctx, ops); err != nil {
		return err
	}
	f.mu.Lock()
	corrupt := f.corrupt
	f.mu.Unlock()
	for _, c := range corrupt {
		for i := range ops {
			op := &ops[i]
			if op.ID == c.id && op.Err == nil && c.off >= op.Off && c.off < op.Off+int64(len(op.Data)) {
				op.Data[c.off-op.Off] ^= 0xff
			}
		}
	}
	return nil
}

// Delete implements backend.Backend with the OpDelete rules.
func (f *Backend) Delete(id uint64) error {
	if r := f.enter(OpDelete); r != nil {
		return fmt.Errorf("faulty: delete bucket %016x: %w", id, injected(r.err))
	}
	return f.inner.Delete(id)
}

// List implements backend.Backend with the OpList rules.
func (f *Backend) List() ([]backend.FileInfo, error) {
	if r := f.enter(OpList); r != nil {
		return nil, fmt.Errorf("faulty: list: %w", injected(r.err))
	}
	return f.inner.List()
}

// Allocated implements backend.Backend with the OpAllocated rules.
func (f *Backend) Allocated() (int64, error) {
	if r := f.enter(OpAllocated); r != nil {
		return 0, fmt.Errorf("faulty: allocated: %w", injected(r.err))
	}
	return f.inner.Allocated()
}

// Name returns "faulty(" + the inner backend's name + ")".
func (f *Backend) Name() string { return "faulty(" + f.inner.Name() + ")" }

// Close closes the inner backend; an OpClose rule replaces its result.
func (f *Backend) Close() error {
	r := f.enter(OpClose)
	err := f.inner.Close()
	if r != nil {
		return fmt.Errorf("faulty: close: %w", injected(r.err))
	}
	return err
}
