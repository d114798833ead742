package uring

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"

	"golang.org/x/sys/unix"

	"github.com/tierstore/tierstore/backend"
	"github.com/tierstore/tierstore/backend/internal/bfile"
	"github.com/tierstore/tierstore/internal/crc32c"
	iuring "github.com/tierstore/tierstore/internal/uring"
)

// WriteBucket implements backend.Backend: with O_DIRECT the data is copied
// into the ring's aligned slots, ChunkSize at a time, with WriteDepth writes
// in flight; then one FSYNC(DATASYNC) and an fsync of the directory (see
// bfile.Dir.WriteBucket for the steps around the ring).
func (b *Backend) WriteBucket(ctx context.Context, id uint64, data [][]byte) error {
	return b.d.WriteBucket(ctx, id, data, func(ctx context.Context, fd int, data [][]byte, direct bool) error {
		return b.writeFile(ctx, fd, data, direct, nil)
	})
}

// WriteBucketChecked implements backend.CheckedWriter: with O_DIRECT the
// CRC32C of each checked piece is computed as it is copied into the slots
// (in pieces of copyChunk, while in cache), and a piece whose CRC differs
// stops the write before its slot is submitted. Without O_DIRECT (a
// directory that refused it) the caller's slices would be written in place:
// backend.ErrUnchecked.
func (b *Backend) WriteBucketChecked(ctx context.Context, id uint64, data [][]byte, checks []backend.PieceCRC) error {
	want := make([]pieceCheck, len(data))
	for _, c := range checks {
		if c.Piece < 0 || c.Piece >= len(data) {
			return fmt.Errorf("uring: write bucket %016x: check of piece %d of %d: %w", id, c.Piece, len(data), backend.ErrBadRange)
		}
		want[c.Piece] = pieceCheck{on: true, want: c.CRC}
	}
	return b.d.WriteBucket(ctx, id, data, func(ctx context.Context, fd int, data [][]byte, direct bool) error {
		if !direct {
			return backend.ErrUnchecked
		}
		return b.writeFile(ctx, fd, data, direct, want)
	})
}

// pieceCheck is the CRC32C a piece of a checked write must have, and what
// its bytes copied so far have.
type pieceCheck struct {
	on        bool
	want, got uint32
}

// copyChunk is how much of a checked piece is copied before its CRC32C is
// updated over the copy (while the bytes are in cache).
const copyChunk = 64 << 10

// writeFile writes data to fd through a ring and fdatasyncs it; checks,
// when not nil, has one entry per piece of data (direct only).
func (b *Backend) writeFile(ctx context.Context, fd int, data [][]byte, direct bool, checks []pieceCheck) error {
	if direct {
		// Allocate the whole file first: O_DIRECT writes inside i_size
		// run in parallel, while ext4 serialises (and io_uring punts to
		// its workers) writes that extend the file. ENOSPC shows up here,
		// before any data is written.
		if err := bfile.Fallocate(fd, backend.TotalLen(data)); err != nil {
			return err
		}
	}
	w, err := b.pool.get(ctx)
	if err != nil {
		return err
	}
	if direct {
		if err := w.ensureSlots(); err != nil {
			b.pool.put(w, false)
			return fmt.Errorf("staging buffers: %w", err)
		}
	}
	s := &writer{w: w, fd: fd, depth: b.opts.WriteDepth, yieldDepth: b.opts.WriteDepthUnderReads,
		reads: &b.rx.pending, direct: direct, checks: checks}
	data = slices.Clone(data) // consumed below; the caller's slice stays intact
	write := s.writeBuffered
	if direct {
		write = s.writeDirect
	}
	if err = write(ctx, data); err == nil {
		err = s.fdatasync()
	}
	if testHookWriteDepth != nil {
		testHookWriteDepth(s.maxInFlight, s.maxUnderReads)
	}
	b.pool.put(w, s.broken)
	return err
}

// testHookWrite, when set by a test, replaces the result of every write
// completion (to simulate short writes or EINVAL from O_DIRECT). It is nil
// outside tests.
var testHookWrite func(off int64, res int32) int32

// testHookWriteDepth, when set by a test, receives each WriteBucket's
// writer.maxInFlight and writer.maxUnderReads. It is nil outside tests.
var testHookWriteDepth func(maxInFlight, maxUnderReads int)

// writer runs the writes of one bucket file on one worker.
type writer struct {
	w     *worker
	fd    int
	depth int
	// yieldDepth replaces depth while reads is above zero: reads pending
	// on the read ring go ahead of all but yieldDepth of this bucket's
	// writes (docs/design.md, the tier's read-priority rule).
	yieldDepth int
	reads      *atomic.Int64
	// maxInFlight is the most writes this writer had in flight at once,
	// and maxUnderReads the most while reads were pending (tests read
	// them).
	maxInFlight, maxUnderReads int
	direct                     bool
	broken                     bool // the ring failed; the worker must not be reused
	// checks: the CRC32C each piece of data must have (nil: unchecked).
	checks []pieceCheck
	comps  []iuring.Completion
}

// wreq is the tag of one write in flight: what remains to be written.
type wreq struct {
	slot int      // staging slot (direct), -1 for WRITEV from caller memory
	off  int64    // file offset of buf / bufs
	buf  []byte   // direct: rest of the slot's data
	bufs [][]byte // buffered: rest of the iovecs
}

func (s *writer) prepare(r *wreq) error {
	op := iuring.Op{Opcode: iuring.OpWritev, Fd: s.fd, Off: r.off, Bufs: r.bufs, Tag: r}
	if r.slot >= 0 {
		op = iuring.Op{Opcode: iuring.OpWrite, Fd: s.fd, Off: r.off, Buf: r.buf, Tag: r}
		if s.w.fixed {
			op.Opcode = iuring.OpWriteFixed
		}
	}
	if _, err := s.w.ring.Prepare(op); err != nil {
		return err
	}
	if _, err := s.w.ring.Submit(); err != nil {
		s.broken = true
		return err
	}
	s.w.noteInFlight()
	return nil
}

// complete handles one write completion: done (true), resubmitted after a
// short write, or failed.
func (s *writer) complete(c iuring.Completion) (done bool, err error) {
	r := c.Tag.(*wreq)
	if testHookWrite != nil {
		c.Res = testHookWrite(r.off, c.Res)
	}
	if c.Res < 0 {
		err := c.Err()
		if s.direct && r.off == 0 && errors.Is(err, unix.EINVAL) {
			return true, fmt.Errorf("%w: first write: %w", errDirectUnsupported, err)
		}
		return true, fmt.Errorf("write at %d: %w", r.off, bfile.NoSpace(err))
	}
	n := int(c.Res)
	if n == 0 {
		return true, fmt.Errorf("write at %d: wrote nothing: %w", r.off, bfile.NoSpace(unix.ENOSPC))
	}
	r.off += int64(n)
	if r.slot >= 0 {
		r.buf = r.buf[n:]
		if len(r.buf) == 0 {
			return true, nil
		}
	} else {
		r.bufs = bfile.Advance(r.bufs, n)
		if len(r.bufs) == 0 {
			return true, nil
		}
	}
	if err := s.prepare(r); err != nil { // short write: the rest
		return true, fmt.Errorf("write at %d: %w", r.off, err)
	}
	return false, nil
}

// reap waits for at least one completion and handles them; slots of
// finished direct writes go back to the free list. It returns the number of
// writes that finished and the first error.
func (s *writer) reap() (finished int, first error) {
	if err := s.w.ring.Wait(1); err != nil {
		s.broken = true
		return 0, err
	}
	s.comps = s.w.ring.Reap(s.comps[:0])
	for _, c := range s.comps {
		done, err := s.complete(c)
		if err != nil && first == nil {
			first = err
		}
		if done {
			finished++
			if r := c.Tag.(*wreq); r.slot >= 0 {
				s.w.free = append(s.w.free, r.slot)
			}
		}
	}
	clear(s.comps)
	return finished, first
}

// drain waits for every write in flight, keeping the first error.
func (s *writer) drain(inflight int, first error) error {
	for inflight > 0 && !s.broken {
		n, err := s.reap()
		inflight -= n
		if first == nil {
			first = err
		}
	}
	return first
}

// writeDirect copies data into the aligned slots and writes them, up to
// depth at once, each submitted as soon as it is filled so that the copy of
// the next chunk overlaps the writes in flight.
func (s *writer) writeDirect(ctx context.Context, data [][]byte) error {
	var off int64
	inflight := 0
	piece := 0 // index of data[0] in the caller's data
	for {
		for len(data) > 0 && s.room(inflight) && len(s.w.free) > 0 {
			if err := ctx.Err(); err != nil {
				return s.drain(inflight, err)
			}
			slot := s.w.free[len(s.w.free)-1]
			s.w.free = s.w.free[:len(s.w.free)-1]
			buf := s.w.slot(slot)
			fill := 0
			for len(data) > 0 && fill < len(buf) {
				var n int
				if s.checks != nil && s.checks[piece].on {
					c := &s.checks[piece]
					n = copy(buf[fill:min(fill+copyChunk, len(buf))], data[0])
					c.got = crc32c.Update(c.got, buf[fill:fill+n])
				} else {
					n = copy(buf[fill:], data[0])
				}
				fill += n
				if data[0] = data[0][n:]; len(data[0]) == 0 {
					if s.checks != nil && s.checks[piece].on && s.checks[piece].got != s.checks[piece].want {
						s.w.free = append(s.w.free, slot)
						c := s.checks[piece]
						return s.drain(inflight, fmt.Errorf("piece %d: CRC32C %08x, want %08x: %w", piece, c.got, c.want, backend.ErrSourceChanged))
					}
					data = data[1:]
					piece++
				}
			}
			if err := s.prepare(&wreq{slot: slot, off: off, buf: buf[:fill]}); err != nil {
				s.w.free = append(s.w.free, slot)
				return s.drain(inflight, fmt.Errorf("write at %d: %w", off, err))
			}
			off += int64(fill)
			inflight++
		}
		if inflight == 0 {
			return nil
		}
		n, err := s.reap()
		inflight -= n
		if err != nil {
			return s.drain(inflight, err)
		}
	}
}

// writeBuffered writes the caller's slices with WRITEV (no copy), about a
// chunk per request, depth requests in flight.
func (s *writer) writeBuffered(ctx context.Context, data [][]byte) error {
	var off int64
	inflight := 0
	for {
		for len(data) > 0 && s.room(inflight) {
			if err := ctx.Err(); err != nil {
				return s.drain(inflight, err)
			}
			iov, rest, n := bfile.NextIovecs(nil, data, int64(s.w.chunk))
			data = rest
			if len(iov) == 0 {
				break
			}
			if err := s.prepare(&wreq{slot: -1, off: off, bufs: iov}); err != nil {
				return s.drain(inflight, fmt.Errorf("write at %d: %w", off, err))
			}
			off += n
			inflight++
		}
		if inflight == 0 {
			return nil
		}
		n, err := s.reap()
		inflight -= n
		if err != nil {
			return s.drain(inflight, err)
		}
	}
}

// room reports whether another write may go in flight beside inflight
// ones: depth of them, or yieldDepth while reads are pending. It records
// the depth reached for tests.
func (s *writer) room(inflight int) bool {
	limit := s.depth
	reading := s.reads != nil && s.reads.Load() > 0
	if reading {
		limit = s.yieldDepth
	}
	if inflight >= limit {
		return false
	}
	s.maxInFlight = max(s.maxInFlight, inflight+1)
	if reading {
		s.maxUnderReads = max(s.maxUnderReads, inflight+1)
	}
	return true
}

// fdatasync issues FSYNC with DATASYNC through the ring and waits for it.
func (s *writer) fdatasync() error {
	if _, err := s.w.ring.Prepare(iuring.Op{Opcode: iuring.OpFsync, Fd: s.fd, Datasync: true}); err != nil {
		return fmt.Errorf("fdatasync: %w", err)
	}
	if err := s.w.ring.Wait(1); err != nil {
		s.broken = true
		return fmt.Errorf("fdatasync: %w", err)
	}
	s.comps = s.w.ring.Reap(s.comps[:0])
	for _, c := range s.comps {
		if err := c.Err(); err != nil {
			return fmt.Errorf("fdatasync: %w", bfile.NoSpace(err))
		}
	}
	return nil
}
