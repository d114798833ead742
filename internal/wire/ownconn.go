package wire

import (
	"bufio"
	"context"
	"errors"
	"os"
	"syscall"
	"time"

	"github.com/tierstore/tierstore/internal/errcode"
)

// Calls on the caller's thread.
//
// A goroutine locked to its OS thread (a cgo callback from a thread the Go
// runtime did not create: the Python package's calls) pays for every
// network wait twice: its thread sleeps, the runtime's poller wakes on
// another thread, and hands the goroutine back to the locked thread
// through the scheduler (runtime.startlockedm). With a shared connection
// the reply is also read by the connection's reader goroutine on yet
// another thread. A call whose context carries WithCallerThread instead
// takes a connection of its own from the pool (DataPool.Acquire) and
// reads its reply itself, waiting for the socket with poll(2) on its own
// thread: one sleep and one wake per wait, as a plain goroutine gets from
// the runtime's poller.

// A goroutine that is not locked to its thread (a Go caller) pays for a
// shared connection's hand-off too: the connection's reader goroutine
// reads the reply, then wakes the caller's goroutine, and on a machine
// with idle Ps the runtime wakes another thread to run it. A call whose
// context carries WithCallerReads takes a connection of its own as well
// and reads its reply on its own goroutine, waiting for the socket
// through the runtime's poller (bounded by the socket's read deadline,
// set from its context), not with poll(2). At most OwnBusy such calls of
// a pool hold own connections at once; the next ones share (a burst of
// many concurrent calls must not dial a connection each).

type callerThreadKey struct{}

type callerReadsKey struct{}

// WithCallerReads marks ctx's data-plane calls as made by a goroutine that
// should read its own reply (see above): the client's single gets and
// puts. Over TLS, on a system without poll(2), or with OwnBusy calls of
// the pool on own connections already, calls share the pool's
// connections as without it.
func WithCallerReads(ctx context.Context) context.Context {
	return context.WithValue(ctx, callerReadsKey{}, true)
}

// callerReads reports whether ctx carries WithCallerReads.
func callerReads(ctx context.Context) bool {
	v, _ := ctx.Value(callerReadsKey{}).(bool)
	return v
}

// WithCallerThread marks ctx's data-plane calls as made by a goroutine
// that should do its socket waits on its own OS thread (see above). The
// mark is a preference: over TLS, or on a system without poll(2), calls
// use the shared connections as without it.
func WithCallerThread(ctx context.Context) context.Context {
	return context.WithValue(ctx, callerThreadKey{}, true)
}

// callerThread reports whether ctx carries WithCallerThread.
func callerThread(ctx context.Context) bool {
	v, _ := ctx.Value(callerThreadKey{}).(bool)
	return v
}

// ownPollSlice bounds one poll(2) wait of an own connection, so that a
// context cancelled without a deadline is noticed within it.
const ownPollSlice = 50 * time.Millisecond

// ownRaw is an own connection's socket seen as a syscall.RawConn whose
// Read waits for the socket with poll(2) on the calling thread instead of
// the runtime's poller. The context of the call in progress (one at a
// time: the connection is its caller's alone) bounds the waits.
type ownRaw struct {
	raw syscall.RawConn
	ctx context.Context // the call in progress; set by awaitOwn
	dc  *DataConn
	// runtime: the call in progress waits through the runtime's poller
	// (WithCallerReads, not WithCallerThread), bounded by the socket's
	// read deadline; set by awaitOwn.
	runtime bool
	// timedOut: a wait of the call in progress ended at the socket's read
	// deadline (runtime), i.e. at its context's deadline.
	timedOut bool
}

func (r *ownRaw) Control(f func(fd uintptr)) error           { return r.raw.Control(f) }
func (r *ownRaw) Write(f func(fd uintptr) (done bool)) error { return r.raw.Write(f) }

// Read calls f until it reports done, polling the socket for input on this
// thread between calls (or through the runtime's poller: runtime); it
// fails with a ContextCanceled error once the call's context ends.
func (r *ownRaw) Read(f func(fd uintptr) (done bool)) error {
	if r.runtime {
		err := r.raw.Read(f)
		if errors.Is(err, os.ErrDeadlineExceeded) {
			r.timedOut = true
			err = errcode.Errorf(errcode.ContextCanceled, "wire: waiting for %s: %v", r.dc.endpoint, context.DeadlineExceeded)
		}
		return err
	}
	var werr error
	err := r.raw.Read(func(fd uintptr) bool {
		for !f(fd) {
			if werr = r.wait(fd); werr != nil {
				return true
			}
		}
		return true
	})
	if err == nil {
		err = werr
	}
	return err
}

// wait polls fd for input until it is readable or the call's context ends.
func (r *ownRaw) wait(fd uintptr) error {
	if err := r.ctx.Err(); err != nil {
		return errcode.Errorf(errcode.ContextCanceled, "wire: waiting for %s: %v", r.dc.endpoint, err)
	}
	slice := ownPollSlice
	if dl, ok := r.ctx.Deadline(); ok {
		slice = min(slice, time.Until(dl))
	}
	if err := pollIn(fd, slice); err != nil {
		return errcode.Errorf(errcode.TransferFail, "wire: poll of the connection to %s: %v", r.dc.endpoint, err)
	}
	return nil
}

// idleDead reports whether an idle own connection can no longer carry a
// call: with no request outstanding nothing may be readable, so input, a
// hang-up or an error on the socket means the node closed it (a restart)
// or broke the protocol. Checked before an idle connection is reused, as
// no reader goroutine watches it.
func (dc *DataConn) idleDead() bool {
	if dc.Broken() {
		return true
	}
	if dc.br.Buffered() > 0 {
		return true
	}
	dead := false
	if err := dc.own.raw.Control(func(fd uintptr) { dead = pollReady(fd) }); err != nil {
		return true
	}
	return dead
}

// ownReader is an own connection's io.Reader for its bufio.Reader: read(2)
// with ownRaw's waits. Its read function is made once (not a closure per
// Read); p, n and rerr are the Read in progress (one at a time: the
// connection's caller's).
type ownReader struct {
	r       *ownRaw
	p       []byte
	n       int
	rerr    error
	readOne func(fd uintptr) bool
}

func newOwnReader(r *ownRaw) *ownReader {
	o := &ownReader{r: r}
	o.readOne = func(fd uintptr) bool {
		o.n, o.rerr = readFD(fd, o.p)
		return o.rerr != errAgain
	}
	return o
}

func (o *ownReader) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	o.p = p
	err := o.r.Read(o.readOne)
	o.p = nil
	if err != nil {
		return 0, err
	}
	return o.n, o.rerr
}

// makeOwn makes dc an own connection: no reader goroutine; its callers read
// their replies (awaitOwn).
func (dc *DataConn) makeOwn() {
	dc.own = &ownRaw{raw: dc.raw, dc: dc}
	dc.raw = dc.own
	dc.br = bufio.NewReaderSize(newOwnReader(dc.own), 16<<10)
	dc.hb, dc.meta = make([]byte, HeaderLen), make([]byte, 0, MaxMeta)
	close(dc.readerDone)
}

// awaitOwn is await on an own connection: the caller reads reply frames
// itself until c is answered. A failure, the context's end included,
// breaks the connection (it is the caller's alone, and a reply cut
// short leaves the stream unusable).
func (dc *DataConn) awaitOwn(ctx context.Context, c *call) error {
	dc.own.ctx = ctx
	defer func() { dc.own.ctx = nil }()
	dc.own.timedOut = false
	if dc.own.runtime = !callerThread(ctx); dc.own.runtime {
		// The runtime's poller waits; the socket's read deadline is the
		// context's, and its cancellation moves it to the past.
		dl, _ := ctx.Deadline()
		_ = dc.conn.SetReadDeadline(dl)
		stop := context.AfterFunc(ctx, func() { _ = dc.conn.SetReadDeadline(time.Unix(1, 0)) })
		defer func() {
			if !stop() {
				// The context ended: its deadline in the past may be set
				// at any moment from now, so the connection is not used
				// again (a reply read whole before that stays read).
				dc.fail(errcode.Errorf(errcode.ContextCanceled, "wire: %v to %s: %v", c.op, dc.endpoint, ctx.Err()))
				return
			}
			// No deadline left behind: the next call may wait with
			// poll(2) (WithCallerThread), which the socket's deadline
			// would end at once once past.
			_ = dc.conn.SetReadDeadline(time.Time{})
		}()
	}
	for {
		select {
		case <-c.done:
			return c.err
		default:
		}
		h, m, err := ReadFrameHead(dc.br, dc.hb, dc.meta)
		dc.meta = m
		if err == nil {
			err = dc.reply(h, dc.meta)
		}
		if err != nil {
			if cerr := ctx.Err(); cerr != nil {
				err = errcode.Errorf(errcode.ContextCanceled, "wire: %v to %s: %v", c.op, dc.endpoint, cerr)
			} else if dc.own.timedOut {
				// The socket's deadline is the context's, which its own
				// timer reports a moment later.
				err = errcode.Errorf(errcode.ContextCanceled, "wire: %v to %s: %v", c.op, dc.endpoint, context.DeadlineExceeded)
			}
			dc.broken(err)
		}
	}
}
