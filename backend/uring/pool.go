package uring

import (
	"context"
	"fmt"
	"runtime"
	"sync/atomic"

	iuring "github.com/tierstore/tierstore/internal/uring"
)

// newRing creates a ring; tests replace it to simulate io_uring_setup
// failures.
var newRing = iuring.New

// registerFixed: try to register the slots as a fixed buffer. Without
// CAP_IPC_LOCK the kernel charges registered memory to RLIMIT_MEMLOCK
// (WriteDepth*ChunkSize per ring); when that is exhausted registration fails
// and the worker uses plain WRITE. Tests turn it off to cover that path.
var registerFixed = true

// worker is one ring, plus the staging memory of its writes: slots
// chunk-sized, page-aligned slices of one anonymous mapping, made on the
// first write and registered as fixed buffer 0 when the kernel allows it.
// Reads need no slots (they land in the caller's aligned Data).
//
// A worker is owned by one goroutine at a time (taken from and returned to
// the pool), which holds LockOSThread while it uses the ring. It is returned
// only with nothing in flight.
type worker struct {
	pool    *pool
	ring    *iuring.Ring
	mem     *iuring.Buffer // nil until the first write
	fixed   bool           // mem registered as fixed buffer 0
	fixedOK bool           // the kernel supports WRITE_FIXED (probed)
	chunk   int
	slots   int
	free    []int // indices of unused slots
	// maxInFlight is the most requests this worker has had in flight at
	// once (tests check the queue depth with it).
	maxInFlight int
}

func (w *worker) noteInFlight() {
	if n := w.ring.InFlight(); n > w.maxInFlight {
		w.maxInFlight = n
	}
}

// ensureSlots maps (and tries to register) the staging slots.
func (w *worker) ensureSlots() error {
	if w.mem != nil {
		return nil
	}
	mem, err := iuring.NewBuffer(w.slots * w.chunk)
	if err != nil {
		return err
	}
	w.mem = mem
	w.pool.slotHolders.Add(1)
	w.fixed = registerFixed && w.fixedOK && w.ring.RegisterBuffers([]*iuring.Buffer{mem}) == nil
	w.free = make([]int, 0, w.slots)
	for i := w.slots - 1; i >= 0; i-- {
		w.free = append(w.free, i)
	}
	return nil
}

// releaseSlots unregisters and unmaps the staging slots (with nothing in
// flight), so that an idle read ring holds no staging memory.
func (w *worker) releaseSlots() {
	if w.mem == nil {
		return
	}
	if w.fixed {
		if err := w.ring.UnregisterBuffers(); err != nil {
			return // keep them: the kernel still references the memory
		}
	}
	if err := w.mem.Free(); err != nil {
		return
	}
	w.mem, w.fixed, w.free = nil, false, nil
	w.pool.slotHolders.Add(-1)
}

func (w *worker) slot(i int) []byte { return w.mem.Bytes()[i*w.chunk : (i+1)*w.chunk] }

// idle reports whether nothing is in flight and every slot is free.
func (w *worker) idle() bool {
	return w.ring.InFlight() == 0 && (w.mem == nil || len(w.free) == w.slots)
}

func (w *worker) close() error {
	err := w.ring.Close()
	if w.ring.Abandoned() {
		// The kernel may still write into the slots: leak them.
		return err
	}
	if w.mem != nil {
		if ferr := w.mem.Free(); ferr != nil && err == nil {
			err = ferr
		}
		w.pool.slotHolders.Add(-1)
	}
	return err
}

// pool hands out workers. At most cap(sem) exist at once (calls beyond that
// wait for one), and every one of them is kept when unused, so that many
// concurrent Loads reuse rings instead of setting up and tearing down one per
// call. Staging slots (WriteDepth*ChunkSize each) are the costly part: at most
// maxSlotHolders workers keep them when returned; the others give them back.
type pool struct {
	idle chan *worker  // workers nobody owns
	sem  chan struct{} // one token per existing worker
	// slotHolders counts workers holding staging slots (atomic: workers
	// are owned by different goroutines).
	slotHolders    atomic.Int32
	maxSlotHolders int
	depth          int // ring SQ entries
	slots          int // staging slots per worker (the write depth)
	chunk          int
	// fixedOK: the kernel supports WRITE_FIXED (probed at Open, before
	// the pool is shared; read-only afterwards).
	fixedOK bool
}

func newPool(maxRings, maxIdle, depth, slots, chunk int) *pool {
	return &pool{
		idle:           make(chan *worker, maxRings),
		sem:            make(chan struct{}, maxRings),
		maxSlotHolders: maxIdle,
		depth:          depth,
		slots:          slots,
		chunk:          chunk,
	}
}

// create makes a worker (its slots come with its first write).
func (p *pool) create() (*worker, error) {
	r, err := newRing(iuring.Config{Entries: uint32(p.depth)})
	if err != nil {
		return nil, err
	}
	return &worker{pool: p, ring: r, chunk: p.chunk, slots: p.slots, fixedOK: p.fixedOK}, nil
}

// get takes an idle worker or creates one; only when MaxRings exist does it
// wait for one to be returned. The caller's goroutine is locked to its
// thread until put.
func (p *pool) get(ctx context.Context) (*worker, error) {
	var w *worker
	select {
	case w = <-p.idle:
	default:
		select {
		case w = <-p.idle:
		case p.sem <- struct{}{}:
			var err error
			if w, err = p.create(); err != nil {
				<-p.sem
				return nil, fmt.Errorf("create ring: %w", err)
			}
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	runtime.LockOSThread()
	return w, nil
}

// put returns w to the pool, or closes it when it failed, still has work in
// flight, or the idle list is full.
func (p *pool) put(w *worker, broken bool) {
	runtime.UnlockOSThread()
	if !broken && w.idle() {
		if w.mem != nil && int(p.slotHolders.Load()) > p.maxSlotHolders {
			w.releaseSlots()
		}
		select {
		case p.idle <- w:
			return
		default:
		}
	}
	w.close()
	<-p.sem
}

// close closes every idle worker. The caller guarantees no worker is in use.
func (p *pool) close() error {
	var first error
	for {
		select {
		case w := <-p.idle:
			if err := w.close(); err != nil && first == nil {
				first = err
			}
			<-p.sem
		default:
			return first
		}
	}
}
