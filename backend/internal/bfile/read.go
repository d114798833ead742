package bfile

import (
	"container/list"
	"context"
	"errors"
	"fmt"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/tierstore/tierstore/backend"
)

// DefaultOpenFiles is how many bucket files a Dir keeps open for reading
// between reads (Config.OpenFiles).
const DefaultOpenFiles = 256

// Handle is a bucket file open for reading, shared through the Dir's
// descriptor cache: a read opens, fstats and closes nothing while its file
// stays in the cache. Fd, Size and Direct do not change while a reference is
// held.
type Handle struct {
	ID     uint64
	Fd     int
	Size   int64
	Direct bool // opened with O_DIRECT
	// refs, cached and elem are guarded by fdCache.mu.
	refs   int
	cached bool // in the cache: closed by the cache, not by its last user
	elem   *list.Element
}

// fdCache keeps up to max files open, least recently used evicted first. A
// handle evicted or forgotten while in use is closed by its last user.
type fdCache struct {
	mu  sync.Mutex // guards m, lru and every Handle's refs, cached, elem
	m   map[uint64]*Handle
	lru *list.List // of *Handle, most recently used at the front
	max int
}

func newFDCache(max int) *fdCache {
	if max <= 0 {
		max = DefaultOpenFiles
	}
	return &fdCache{m: map[uint64]*Handle{}, lru: list.New(), max: max}
}

// get returns a new reference to the cached handle of id, or nil.
func (c *fdCache) get(id uint64) *Handle {
	c.mu.Lock()
	defer c.mu.Unlock()
	h := c.m[id]
	if h != nil {
		h.refs++
		c.lru.MoveToFront(h.elem)
	}
	return h
}

// add caches h (with one reference, its opener's) unless another opener
// raced ahead: then it closes h and returns that one, referenced. A file
// unlinked since it was opened is not cached (Delete unlinks, then forgets:
// checking the link count under c.mu closes that race).
func (c *fdCache) add(h *Handle) *Handle {
	c.mu.Lock()
	defer c.mu.Unlock()
	if old := c.m[h.ID]; old != nil {
		unix.Close(h.Fd)
		old.refs++
		c.lru.MoveToFront(old.elem)
		return old
	}
	h.refs = 1
	var st unix.Stat_t
	if unix.Fstat(h.Fd, &st) != nil || st.Nlink == 0 {
		return h // closed by its release
	}
	h.cached = true
	h.elem = c.lru.PushFront(h)
	c.m[h.ID] = h
	for c.lru.Len() > c.max {
		c.drop(c.lru.Back().Value.(*Handle))
	}
	return h
}

// drop takes h out of the cache, closing it now if unused. c.mu is held.
func (c *fdCache) drop(h *Handle) {
	c.lru.Remove(h.elem)
	delete(c.m, h.ID)
	h.cached, h.elem = false, nil
	if h.refs == 0 {
		unix.Close(h.Fd)
	}
}

// release drops one reference to h.
func (c *fdCache) release(h *Handle) {
	c.mu.Lock()
	defer c.mu.Unlock()
	h.refs--
	if h.refs == 0 && !h.cached {
		unix.Close(h.Fd)
	}
}

// forget drops the cached handle of id, if any (its file was deleted or is
// being rewritten).
func (c *fdCache) forget(id uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if h := c.m[id]; h != nil {
		c.drop(h)
	}
}

// closeAll closes every cached handle. Nothing is in use (Close holds the
// Dir's write lock).
func (c *fdCache) closeAll() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for c.lru.Len() > 0 {
		c.drop(c.lru.Back().Value.(*Handle))
	}
}

// openRead returns a referenced handle of bucket file id: from the cache, or
// opened (O_DIRECT, falling back to buffered I/O on EINVAL) and fstatted.
// A missing file is backend.ErrNotFound. The caller holds the read lock.
func (d *Dir) openRead(id uint64) (*Handle, error) {
	if h := d.files.get(id); h != nil {
		return h, nil
	}
	direct := d.direct.Load()
	fd, err := open(d.File(id), unix.O_RDONLY, direct)
	if direct && errors.Is(err, unix.EINVAL) {
		d.Fallback(fmt.Errorf("open for reading with O_DIRECT: %w", err))
		direct = false
		fd, err = open(d.File(id), unix.O_RDONLY, false)
	}
	switch {
	case errors.Is(err, unix.ENOENT):
		return nil, backend.ErrNotFound
	case err != nil:
		return nil, fmt.Errorf("open: %w", err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("fstat: %w", err)
	}
	return d.files.add(&Handle{ID: id, Fd: fd, Size: st.Size, Direct: direct}), nil
}

// ReadSet is one Read in progress: the Dir's read lock, the files of its ops
// open, every op checked against its file.
type ReadSet struct {
	d   *Dir
	Ops []backend.ReadOp
	// Files[i] is the file of Ops[i], or nil when Ops[i] needs no I/O (it
	// failed its checks, its file is missing, or it is empty).
	Files []*Handle
	held  []*Handle
}

// StartRead begins a Read of ops: it takes the read lock, opens (through the
// descriptor cache) each distinct file once and checks each op against it
// (CheckOp); an op whose file is missing fails with backend.ErrNotFound. On
// error (closed, ctx done) nothing is held. Otherwise the caller performs
// the I/O of the ops with a file, then calls Finish, also from another
// goroutine (the lock is not tied to one).
func (d *Dir) StartRead(ctx context.Context, ops []backend.ReadOp) (*ReadSet, error) {
	if err := d.acquire(ctx); err != nil {
		return nil, fmt.Errorf("%s: read: %w", d.pkg, err)
	}
	rs := &ReadSet{d: d, Ops: ops, Files: make([]*Handle, len(ops))}
	byID := map[uint64]*Handle{}
	failed := map[uint64]error{}
	for i := range ops {
		op := &ops[i]
		op.Data, op.Err = nil, nil
		h, seen := byID[op.ID]
		if !seen && failed[op.ID] == nil {
			var err error
			if h, err = d.openRead(op.ID); err != nil {
				failed[op.ID] = fmt.Errorf("%s: read bucket %016x: %w", d.pkg, op.ID, err)
			} else {
				byID[op.ID] = h
				rs.held = append(rs.held, h)
			}
		}
		if err := failed[op.ID]; err != nil {
			op.Err = err
			continue
		}
		if CheckOp(d.pkg, op.ID, h.Size, op) {
			rs.Files[i] = h
		}
	}
	return rs, nil
}

// Finish ends the Read: it releases the files and the read lock. When ctx
// has ended, every op without Data and Err fails with ctx's error, which
// Finish returns.
func (rs *ReadSet) Finish(ctx context.Context) error {
	for _, h := range rs.held {
		rs.d.files.release(h)
	}
	rs.d.release()
	err := ctx.Err()
	if err != nil {
		for i := range rs.Ops {
			if op := &rs.Ops[i]; op.Err == nil && op.Data == nil {
				op.Err = fmt.Errorf("%s: read bucket %016x [%d,+%d): %w", rs.d.pkg, op.ID, op.Off, op.Len, err)
			}
		}
	}
	return err
}

// DirectInto reports whether op can be read with O_DIRECT straight into its
// Buf: an aligned offset, an aligned Buf with room for the whole blocks.
func DirectInto(op *backend.ReadOp) bool {
	return op.Buf != nil && op.Off%backend.Alignment == 0 && backend.Aligned(op.Buf) &&
		len(op.Buf) >= backend.DirectLen(op.Len)
}

// Dest returns the memory op's bytes go to, Len bytes long: Buf[:Len], or a
// new slice when Buf is nil.
func Dest(op *backend.ReadOp) []byte {
	if op.Buf != nil {
		return op.Buf[:op.Len:op.Len]
	}
	return make([]byte, op.Len)
}
