package main

/*
#include "queue.h"
*/
import "C"

import (
	"context"
	"log/slog"
	"os"
	"sync"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/tierstore/tierstore/internal/errcode"
	"github.com/tierstore/tierstore/internal/wire"
)

// onCallerThread marks ctx for a call that came straight from its
// caller's C thread (queue.c ran it directly): the goroutine is locked to
// that thread, so its data-plane calls wait for their sockets on it
// (wire.WithCallerThread) instead of being woken through the scheduler.
// Must be called on the call's own goroutine.
func onCallerThread(ctx context.Context) context.Context {
	if C.tsq_caller_thread() != 0 {
		return wire.WithCallerThread(ctx)
	}
	return ctx
}

// The call queue (queue.c has the C half and the why): the dispatcher
// goroutine waits on an eventfd in the runtime's poller, takes every queued
// call at each wake and runs each on a goroutine of its own, which writes
// the result and wakes the caller's futex. No thread of the caller's ever
// runs Go code for a queued call.

// Call modes, from the environment variable TIERSTORE_CALLS read once at
// load: "auto" (the default: queue a call when another is in flight),
// "direct" (never queue: every call runs on its caller's thread, as
// before the queue existed) or "queue" (always queue).
var callModes = map[string]C.int{"": C.TSQ_AUTO, "auto": C.TSQ_AUTO, "direct": C.TSQ_DIRECT, "queue": C.TSQ_QUEUE}

func init() {
	mode, ok := callModes[os.Getenv("TIERSTORE_CALLS")]
	if !ok {
		slog.Warn("libtierstore: TIERSTORE_CALLS is auto, direct or queue; using auto", "got", os.Getenv("TIERSTORE_CALLS"))
	}
	if mode == C.TSQ_DIRECT {
		C.tsq_init(-1, mode)
		return
	}
	fd, err := unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC)
	if err != nil {
		slog.Warn("libtierstore: no eventfd, every call runs on its caller's thread", "err", err)
		C.tsq_init(-1, C.TSQ_DIRECT)
		return
	}
	f := os.NewFile(uintptr(fd), "tierstore-call-queue")
	go dispatch(f)
	C.tsq_init(C.int(fd), mode)
}

// dispatch runs queued calls for the life of the process. A failed read of
// the eventfd (never seen) degrades to taking the queue every millisecond,
// so that no queued call is left waiting.
func dispatch(f *os.File) {
	var b [8]byte
	var warn sync.Once
	for {
		if _, err := f.Read(b[:]); err != nil {
			warn.Do(func() { slog.Error("libtierstore: the call queue's eventfd failed; polling it", "err", err) })
			time.Sleep(time.Millisecond)
		}
		for r := C.tsq_take(); r != nil; {
			next := r.next // r belongs to its caller again once it is done
			select {
			case work <- r:
			default:
				go worker(r)
			}
			r = next
		}
	}
}

// work hands queued calls to idle workers. Workers outlive their calls so
// that their stacks, grown by the first call, serve the next ones (a
// goroutine per call spent a measurable share of the queue's CPU copying
// stacks as they grew).
var work = make(chan *C.tsq_req)

// workerIdle is how long a worker waits for another call before it ends.
const workerIdle = 10 * time.Second

// worker runs r, then the calls it is handed, until it has waited
// workerIdle for one.
func worker(r *C.tsq_req) {
	t := time.NewTimer(workerIdle)
	defer t.Stop()
	for {
		r.ret = runQueued(r)
		C.tsq_done(r)
		t.Reset(workerIdle)
		select {
		case r = <-work:
		case <-t.C:
			return
		}
	}
}

// runQueued calls the exported function r.op names with r's arguments, in
// the order queue.c stored them.
func runQueued(r *C.tsq_req) C.int64_t {
	i, p := &r.i, &r.p
	switch r.op {
	case C.TSQ_PUT:
		return ts_put(i[0], (*C.char)(p[0]), i[1], p[1], i[2], i[3], i[4], (*C.char)(p[2]), (*C.char)(p[3]), i[5])
	case C.TSQ_PUT_PARTS:
		return ts_put_parts(i[0], (*C.char)(p[0]), i[1], (*unsafe.Pointer)(p[1]), (*C.int64_t)(p[2]), i[2],
			i[3], i[4], (*C.char)(p[3]), (*C.char)(p[4]), i[5])
	case C.TSQ_GET_INTO:
		return ts_get_into(i[0], (*C.char)(p[0]), i[1], p[1], i[2], (*C.char)(p[2]), i[3])
	case C.TSQ_GET_INTO_PARTS:
		return ts_get_into_parts(i[0], (*C.char)(p[0]), i[1], (*unsafe.Pointer)(p[1]), (*C.int64_t)(p[2]), i[2],
			(*C.char)(p[3]), i[3])
	case C.TSQ_BATCH_PUT:
		return ts_batch_put(i[0], i[1], (**C.char)(p[0]), (*C.int64_t)(p[1]), (*unsafe.Pointer)(p[2]), (*C.int64_t)(p[3]),
			i[2], i[3], (*C.char)(p[4]), (*C.int64_t)(p[5]), (*C.char)(p[6]), i[4])
	case C.TSQ_BATCH_PUT_PARTS:
		return ts_batch_put_parts(i[0], i[1], (**C.char)(p[0]), (*C.int64_t)(p[1]), (*C.int64_t)(p[2]), (*unsafe.Pointer)(p[3]),
			(*C.int64_t)(p[4]), i[2], i[3], (*C.char)(p[5]), (*C.int64_t)(p[6]), (*C.char)(p[7]), i[4])
	case C.TSQ_BATCH_GET_INTO:
		return ts_batch_get_into(i[0], i[1], (**C.char)(p[0]), (*C.int64_t)(p[1]), (*unsafe.Pointer)(p[2]), (*C.int64_t)(p[3]),
			(*C.int64_t)(p[4]), (*C.char)(p[5]), i[2])
	case C.TSQ_BATCH_GET_INTO_PARTS:
		return ts_batch_get_into_parts(i[0], i[1], (**C.char)(p[0]), (*C.int64_t)(p[1]), (*C.int64_t)(p[2]), (*unsafe.Pointer)(p[3]),
			(*C.int64_t)(p[4]), (*C.int64_t)(p[5]), (*C.char)(p[6]), i[2])
	case C.TSQ_GET:
		return ts_get(i[0], (*C.char)(p[0]), i[1], (*unsafe.Pointer)(p[1]), (*C.char)(p[2]), i[2])
	case C.TSQ_EXISTS:
		return ts_exists(i[0], (*C.char)(p[0]), i[1], (*C.char)(p[1]), i[2])
	case C.TSQ_BATCH_EXISTS:
		return ts_batch_exists(i[0], i[1], (**C.char)(p[0]), (*C.int64_t)(p[1]), (*C.int64_t)(p[2]), (*C.char)(p[3]), i[2])
	}
	return C.int64_t(errcode.InternalError) // queue.c queues only the operations above
}
