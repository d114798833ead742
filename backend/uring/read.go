package uring

import (
	"context"

	"github.com/tierstore/tierstore/backend"
	"github.com/tierstore/tierstore/backend/internal/bfile"
)

// testHookRead, when set by a test, replaces the result of every read
// completion (to simulate short reads). It is nil outside tests.
var testHookRead func(off int64, res int32) int32

var _ backend.AsyncReader = (*Backend)(nil)

// Read implements backend.Backend: the ops, of any files, go to the read
// ring together (see the package documentation) and Read waits for them.
func (b *Backend) Read(ctx context.Context, ops []backend.ReadOp) error {
	req, err := b.plan(ctx, ops)
	if err != nil {
		return err
	}
	if len(req.pieces) > 0 {
		ch := make(chan struct{})
		req.complete = func() { close(ch) }
		if err := b.rx.submit(req); err != nil {
			req.failAll(err)
		} else {
			<-ch
		}
	}
	return req.finish()
}

// ReadAsync implements backend.AsyncReader: the ops go to the read ring and
// done runs on a new goroutine when the last one completes.
func (b *Backend) ReadAsync(ctx context.Context, ops []backend.ReadOp, done func(err error)) {
	req, err := b.plan(ctx, ops)
	if err != nil {
		go done(err)
		return
	}
	req.complete = func() { go func() { done(req.finish()) }() }
	if len(req.pieces) == 0 {
		req.complete()
		return
	}
	if err := b.rx.submit(req); err != nil {
		req.failAll(err)
		req.complete()
	}
}

// plan opens the files of ops (bfile.Dir.StartRead), chooses where each
// op's bytes land and cuts the ops into pieces of at most ChunkSize:
//
//   - buffered: straight into Data (the caller's Buf, or new memory);
//   - O_DIRECT into the caller's Buf when it is aligned and long enough
//     (bfile.DirectInto): the whole blocks, no copy;
//   - O_DIRECT otherwise: the aligned range that holds the op, into an
//     aligned heap buffer; Data is cut from it (no copy) when the caller
//     gave no Buf, else it is copied into Buf at finish.
func (b *Backend) plan(ctx context.Context, ops []backend.ReadOp) (*request, error) {
	rs, err := b.d.StartRead(ctx, ops)
	if err != nil {
		return nil, err
	}
	const A = backend.Alignment
	req := &request{ctx: ctx, ops: ops, rs: rs, data: make([][]byte, len(ops)), stage: make([][]byte, len(ops))}
	for i, h := range rs.Files {
		if h == nil {
			continue
		}
		op := &ops[i]
		lo, hi := op.Off, op.Off+int64(op.Len)
		var dst []byte
		switch {
		case !h.Direct:
			dst = bfile.Dest(op)
			req.data[i] = dst
		case bfile.DirectInto(op):
			hi = (hi + A - 1) &^ (A - 1)
			dst = op.Buf[:hi-lo]
			req.data[i] = op.Buf[:op.Len:op.Len]
		default:
			lo, hi = lo&^(A-1), (hi+A-1)&^(A-1)
			dst = bfile.AlignedAlloc(int(hi - lo))
			s := op.Off - lo
			if op.Buf == nil {
				req.data[i] = dst[s : s+int64(op.Len) : s+int64(op.Len)]
			} else {
				req.data[i] = op.Buf[:op.Len:op.Len]
				req.stage[i] = dst[s : s+int64(op.Len)]
			}
		}
		for p := lo; p < hi; p += int64(b.opts.ChunkSize) {
			n := min(int64(b.opts.ChunkSize), hi-p)
			req.pieces = append(req.pieces, piece{op: i, fd: h.Fd, off: p, dst: dst[p-lo : p-lo+n], end: h.Size})
		}
	}
	for i := range req.pieces {
		req.pieces[i].req = req
	}
	req.left = len(req.pieces)
	return req, nil
}

// failAll fails every op still waiting for its bytes (the read ring is
// gone): nothing was submitted.
func (req *request) failAll(err error) {
	for i := range req.pieces {
		if op := &req.ops[req.pieces[i].op]; op.Err == nil {
			op.Err = err
		}
	}
}

// finish gives every op that succeeded its Data (copying out of the staging
// buffer where there is one), and ends the ReadSet.
func (req *request) finish() error {
	for i := range req.ops {
		op := &req.ops[i]
		if req.rs.Files[i] == nil || op.Err != nil {
			continue
		}
		if req.stage[i] != nil {
			copy(req.data[i], req.stage[i])
		}
		op.Data = req.data[i]
	}
	err := req.rs.Finish(req.ctx)
	for i := range req.ops {
		if req.ops[i].Err != nil {
			req.ops[i].Data = nil
		}
	}
	return err
}
