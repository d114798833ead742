package uring

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"

	"github.com/tierstore/tierstore/backend"
	"github.com/tierstore/tierstore/backend/internal/bfile"
	iuring "github.com/tierstore/tierstore/internal/uring"
)

// errReactorStopped: the read ring failed or the backend is closing.
var errReactorStopped = errors.New("uring: read ring stopped")

// reactor owns the read ring: one goroutine, locked to its thread, that
// submits the pieces of every Read in progress and reaps their completions.
// Reads of all callers share its queue, so that 32 callers reading one
// object each keep 32 reads in flight, and one Read of many files is one
// submission. Callers hand it requests through incoming and wake it through
// an eventfd whose READ is always armed on the ring.
type reactor struct {
	ring  *iuring.Ring
	efd   int    // eventfd: a write wakes the loop out of io_uring_enter
	wbuf  []byte // the armed eventfd READ's 8 bytes
	depth int    // most pieces in flight

	// mu guards incoming, sleeping, stopping and dead. Everything else is
	// owned by the loop goroutine.
	mu       sync.Mutex
	incoming []*request
	sleeping bool  // the loop is (about to be) blocked in the kernel
	stopping bool  // Close: finish what is queued, then exit
	dead     error // the loop has exited; later requests fail with it
	exited   chan struct{}

	active   []*request          // requests with pieces not yet submitted
	rr       int                 // round-robin position in active
	inflight int                 // pieces in the ring (the eventfd READ excluded)
	live     map[*piece]struct{} // the pieces in the ring
	comps    []iuring.Completion
	// maxInFlight is the most pieces in flight at once (tests read it).
	maxInFlight atomic.Int64
	// pending counts the requests submitted and not yet complete; writers
	// read it to yield to reads (Options.WriteDepthUnderReads).
	pending atomic.Int64
}

// wakeTag marks the eventfd READ's completion.
type wakeTag struct{}

// request is one Read (or ReadAsync) on its way through the reactor.
type request struct {
	ctx    context.Context
	ops    []backend.ReadOp
	rs     *bfile.ReadSet
	pieces []piece
	next   int // first piece not yet submitted (loop-owned)
	left   int // pieces not done (loop-owned)
	// data[i] is what ops[i].Data becomes on success; stage[i], when not
	// nil, is where its bytes land first (copied into data[i] at finish).
	data, stage [][]byte
	// complete is called by the loop once every piece is done; it must
	// not block (it closes a channel or starts a goroutine).
	complete func()
}

// piece is one read of a request: file range [off, off+len(dst)) into dst.
// got counts the bytes read so far.
type piece struct {
	req *request
	op  int
	fd  int
	off int64
	dst []byte
	got int
	end int64 // file size: a short read there is the end of the file
}

func newReactor(depth int) (*reactor, error) {
	ring, err := newRing(iuring.Config{Entries: uint32(2*depth + 2)})
	if err != nil {
		return nil, err
	}
	efd, err := unix.Eventfd(0, unix.EFD_CLOEXEC)
	if err != nil {
		ring.Close()
		return nil, fmt.Errorf("uring: eventfd: %w", err)
	}
	r := &reactor{ring: ring, efd: efd, wbuf: make([]byte, 8), depth: depth, exited: make(chan struct{}),
		live: map[*piece]struct{}{}}
	go r.loop()
	return r, nil
}

// submit hands req to the loop. It fails only when the loop is gone.
func (r *reactor) submit(req *request) error {
	r.mu.Lock()
	if r.dead != nil || r.stopping {
		err := r.dead
		r.mu.Unlock()
		if err == nil {
			err = errReactorStopped
		}
		return err
	}
	r.pending.Add(1)
	r.incoming = append(r.incoming, req)
	if r.sleeping {
		// Under mu: exit closes the eventfd under mu too, so this never
		// writes to a closed (or reused) descriptor.
		r.sleeping = false
		r.wake()
	}
	r.mu.Unlock()
	return nil
}

func (r *reactor) wake() {
	var one [8]byte
	binary.NativeEndian.PutUint64(one[:], 1)
	for {
		if _, err := unix.Write(r.efd, one[:]); err != unix.EINTR {
			return
		}
	}
}

// stop makes the loop finish the requests it has and exit, and waits.
func (r *reactor) stop() {
	r.mu.Lock()
	r.stopping = true
	if r.dead == nil {
		r.wake()
	}
	r.mu.Unlock()
	<-r.exited
}

func (r *reactor) arm() error {
	_, err := r.ring.Prepare(iuring.Op{Opcode: iuring.OpRead, Fd: r.efd, Buf: r.wbuf, Tag: wakeTag{}})
	return err
}

// loop is the reactor goroutine.
func (r *reactor) loop() {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	err := r.arm()
	for err == nil {
		if r.take() {
			break
		}
		r.fill()
		if err = r.ring.Wait(1); err != nil {
			break
		}
		r.comps = r.ring.Reap(r.comps[:0])
		for _, c := range r.comps {
			if _, ok := c.Tag.(wakeTag); ok {
				err = r.arm()
				continue
			}
			r.done(c)
		}
		clear(r.comps)
	}
	r.exit(err)
}

// testHookTake, when set by a test before Open, runs at the start of every
// take (to hold the loop while requests arrive).
var testHookTake func()

// take moves incoming requests to active. It reports whether the loop
// should exit (stopping, and nothing left to do). It marks the loop asleep
// when there is nothing new, before the loop enters the kernel.
func (r *reactor) take() (exit bool) {
	if testHookTake != nil {
		testHookTake()
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.active = append(r.active, r.incoming...)
	clear(r.incoming)
	r.incoming = r.incoming[:0]
	if r.stopping && len(r.active) == 0 && r.inflight == 0 {
		return true
	}
	r.sleeping = true
	return false
}

// fill submits pieces of the active requests, one per request in turn, up
// to depth in flight. A request whose context ended has its unsubmitted
// pieces failed instead.
func (r *reactor) fill() {
	for r.inflight < r.depth && len(r.active) > 0 {
		r.rr %= len(r.active)
		req := r.active[r.rr]
		if req.next == len(req.pieces) {
			r.active = append(r.active[:r.rr], r.active[r.rr+1:]...)
			continue
		}
		if err := req.ctx.Err(); err != nil {
			for ; req.next < len(req.pieces); req.next++ {
				r.finish(&req.pieces[req.next], err)
			}
			continue
		}
		pc := &req.pieces[req.next]
		if err := r.prepare(pc); err != nil {
			break // the SQ is full: Wait submits it
		}
		req.next++
		r.rr++
	}
	if n := int64(r.inflight); n > r.maxInFlight.Load() {
		r.maxInFlight.Store(n)
	}
}

func (r *reactor) prepare(pc *piece) error {
	_, err := r.ring.Prepare(iuring.Op{Opcode: iuring.OpRead, Fd: pc.fd, Off: pc.off + int64(pc.got), Buf: pc.dst[pc.got:], Tag: pc})
	if err == nil {
		r.inflight++
		r.live[pc] = struct{}{}
	}
	return err
}

// done accounts for one completion: the piece is finished, failed, or
// resubmitted for the rest of its range (short read).
func (r *reactor) done(c iuring.Completion) {
	pc := c.Tag.(*piece)
	r.inflight--
	delete(r.live, pc)
	if testHookRead != nil {
		c.Res = testHookRead(pc.off+int64(pc.got), c.Res)
	}
	if c.Res < 0 {
		r.finish(pc, c.Err())
		return
	}
	pc.got += int(c.Res)
	op := &pc.req.ops[pc.op]
	switch end := pc.off + int64(pc.got); {
	case pc.got >= len(pc.dst):
		r.finish(pc, nil)
	case end >= op.Off+int64(op.Len) || end >= pc.end:
		// Short at the end of the file (a direct read of the block that
		// holds the end of an unaligned file): fine if the op's range is
		// covered.
		var err error
		if end < min(pc.off+int64(len(pc.dst)), op.Off+int64(op.Len)) {
			err = backend.ErrShortRead
		}
		r.finish(pc, err)
	case c.Res == 0:
		r.finish(pc, backend.ErrShortRead)
	default:
		if err := r.prepare(pc); err != nil {
			r.finish(pc, err)
		}
	}
}

// finish ends pc (with err, if not nil) and completes its request when it
// was the last piece.
func (r *reactor) finish(pc *piece, err error) {
	req := pc.req
	if op := &req.ops[pc.op]; err != nil && op.Err == nil {
		op.Err = fmt.Errorf("uring: read bucket %016x [%d,+%d) at %d: %w", op.ID, op.Off, op.Len, pc.off+int64(pc.got), err)
	}
	req.left--
	if req.left == 0 {
		r.pending.Add(-1)
		req.complete()
	}
}

// exit fails every request left (the ring broke) and closes the ring once
// nothing is in flight.
func (r *reactor) exit(err error) {
	if err == nil {
		err = errReactorStopped
	}
	r.mu.Lock()
	r.dead = err
	r.active = append(r.active, r.incoming...)
	r.incoming = nil
	r.mu.Unlock()
	for _, req := range r.active {
		for ; req.next < len(req.pieces); req.next++ {
			r.finish(&req.pieces[req.next], err)
		}
	}
	r.active = nil
	// Complete the armed eventfd READ, and the pieces in flight if the
	// ring still works, so that Close does not wait for them.
	r.wake()
	for r.inflight > 0 && r.ring.Wait(1) == nil {
		r.comps = r.ring.Reap(r.comps[:0])
		for _, c := range r.comps {
			if _, ok := c.Tag.(wakeTag); !ok {
				r.done(c)
			}
		}
	}
	r.ring.Close()
	// Completions were lost: Close kept their memory reachable (the
	// kernel may still write it); their requests fail so that no caller
	// waits forever.
	for pc := range r.live {
		r.inflight--
		delete(r.live, pc)
		r.finish(pc, err)
	}
	unix.Close(r.efd)
	close(r.exited)
}
