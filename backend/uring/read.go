package uring

import (
	"context"
	"fmt"

	"github.com/tierstore/tierstore/backend"
	"github.com/tierstore/tierstore/backend/internal/bfile"
	iuring "github.com/tierstore/tierstore/internal/uring"
)

// Read implements backend.Backend. With O_DIRECT each op is read as the
// aligned range that holds it, into an aligned heap buffer that its Data is
// cut from (no copy), in pieces of at most ChunkSize, QueueDepth pieces in
// flight on one ring. Without O_DIRECT the pieces are read straight into
// Data.
func (b *Backend) Read(ctx context.Context, id uint64, ops []backend.ReadOp) error {
	return b.d.Read(ctx, id, func(fd int, size int64, direct bool) error {
		rd := &reader{id: id, fd: fd, size: size, direct: direct, ops: ops, chunk: b.opts.ChunkSize}
		rd.plan()
		if len(rd.pieces) > 0 {
			w, err := b.pool.get(ctx)
			if err != nil {
				rd.failAll(err)
				return err
			}
			rd.w = w
			rd.depth = b.opts.QueueDepth
			err = rd.run(ctx)
			b.pool.put(w, rd.broken)
			if err != nil {
				rd.failAll(err)
			}
		}
		for i := range ops {
			if ops[i].Err != nil {
				ops[i].Data = nil
			}
		}
		return nil
	})
}

// piece is one read request: file range [off, off+n) into dst, which is
// part of the op's Data (buffered) or of the aligned buffer Data is cut from
// (direct). got counts the bytes read so far.
type piece struct {
	op        int
	off       int64
	n         int
	got       int
	first     bool  // first piece of its op: allocate the op's buffer
	base, end int64 // file range of the op's buffer
	dst       []byte
}

type reader struct {
	id     uint64
	fd     int
	size   int64
	direct bool
	chunk  int
	depth  int
	ops    []backend.ReadOp
	pieces []*piece
	w      *worker
	broken bool
	comps  []iuring.Completion
	cur    []byte // buffer of the op whose pieces are being submitted
}

// plan validates the ops and cuts them into pieces.
func (rd *reader) plan() {
	const A = backend.Alignment
	for i := range rd.ops {
		op := &rd.ops[i]
		op.Data, op.Err = nil, nil
		if !bfile.CheckOp("uring", rd.id, rd.size, op) {
			continue
		}
		lo, hi := op.Off, op.Off+int64(op.Len)
		if rd.direct {
			lo, hi = lo&^(A-1), (hi+A-1)&^(A-1)
		}
		for p := lo; p < hi; p += int64(rd.chunk) {
			rd.pieces = append(rd.pieces, &piece{op: i, off: p, n: int(min(int64(rd.chunk), hi-p)), first: p == lo, base: lo, end: hi})
		}
	}
}

// allocate gives op pc.op its Data, when its first piece is about to be
// submitted: allocating (and zeroing) while earlier reads are in flight
// keeps the device busy, where allocating every op up front left it idle.
func (rd *reader) allocate(pc *piece) {
	op := &rd.ops[pc.op]
	if rd.direct {
		buf := bfile.AlignedAlloc(int(pc.end - pc.base))
		s := op.Off - pc.base
		op.Data = buf[s : s+int64(op.Len) : s+int64(op.Len)]
		rd.cur = buf
	} else {
		op.Data = make([]byte, op.Len)
		rd.cur = op.Data
	}
}

func (rd *reader) failAll(err error) {
	for i := range rd.ops {
		if op := &rd.ops[i]; op.Err == nil && op.Len > 0 {
			op.Err = fmt.Errorf("uring: read bucket %016x [%d,+%d): %w", rd.id, op.Off, op.Len, err)
		}
	}
}

func (rd *reader) prepare(pc *piece) error {
	_, err := rd.w.ring.Prepare(iuring.Op{Opcode: iuring.OpRead, Fd: rd.fd, Off: pc.off + int64(pc.got), Buf: pc.dst[pc.got:], Tag: pc})
	return err
}

// run keeps up to depth pieces in flight until every piece is done. Per-op
// failures go to the op's Err; the returned error is for the ring or ctx.
func (rd *reader) run(ctx context.Context) error {
	next, inflight := 0, 0
	var stop error
	for {
		for stop == nil && next < len(rd.pieces) && inflight < rd.depth {
			if err := ctx.Err(); err != nil {
				stop = err
				break
			}
			pc := rd.pieces[next]
			if pc.first {
				rd.allocate(pc)
			}
			pc.dst = rd.cur[pc.off-pc.base : pc.off-pc.base+int64(pc.n)]
			if err := rd.prepare(pc); err != nil {
				stop = err
				break
			}
			next++
			inflight++
		}
		if inflight == 0 {
			return stop
		}
		rd.w.noteInFlight()
		if err := rd.w.ring.Wait(1); err != nil {
			rd.broken = true
			return err
		}
		rd.comps = rd.w.ring.Reap(rd.comps[:0])
		for _, c := range rd.comps {
			pc := c.Tag.(*piece)
			if rd.complete(pc, c) {
				inflight--
			} else if err := rd.prepare(pc); err != nil {
				rd.fail(pc, err)
				inflight--
			}
		}
		clear(rd.comps)
	}
}

func (rd *reader) fail(pc *piece, err error) {
	if op := &rd.ops[pc.op]; op.Err == nil {
		op.Err = fmt.Errorf("uring: read bucket %016x [%d,+%d) at %d: %w", rd.id, op.Off, op.Len, pc.off+int64(pc.got), err)
	}
}

// testHookRead, when set by a test, replaces the result of every read
// completion (to simulate short reads). It is nil outside tests.
var testHookRead func(off int64, res int32) int32

// complete accounts for one completion of pc. It returns false when pc must
// be resubmitted for the rest of its range (short read).
func (rd *reader) complete(pc *piece, c iuring.Completion) bool {
	if testHookRead != nil {
		c.Res = testHookRead(pc.off+int64(pc.got), c.Res)
	}
	if c.Res < 0 {
		rd.fail(pc, c.Err())
		return true
	}
	n := int(c.Res)
	op := &rd.ops[pc.op]
	pc.got += n
	if pc.got >= pc.n {
		return true
	}
	// Short: done if what the op needs is covered (a direct read of the
	// block holding the end of an unaligned file stops at end of file).
	if end := pc.off + int64(pc.got); end >= op.Off+int64(op.Len) || end >= rd.size {
		if end < min(pc.off+int64(pc.n), op.Off+int64(op.Len)) {
			rd.fail(pc, backend.ErrShortRead)
		}
		return true
	}
	if n == 0 {
		rd.fail(pc, backend.ErrShortRead)
		return true
	}
	return false
}
