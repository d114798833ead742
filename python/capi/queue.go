package main

/*
#include "queue.h"
*/
import "C"

import (
	"log/slog"
	"os"
	"slices"
	"sync"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/tierstore/tierstore/internal/errcode"
)

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
		handOut(C.tsq_take())
	}
}

// job is a worker's unit of work: one queued call (r), or the queued
// get_into calls of one handle run as one batch read (batch).
type job struct {
	r     *C.tsq_req
	batch []*C.tsq_req
}

// maxCoalesced bounds the calls one coalesced batch read serves.
const maxCoalesced = 64

// handOut gives the calls of the list rs to workers: the get_into calls of
// one handle that were queued at the same moment go as one batch read (one
// master lookup and one pipelined transfer for all of them, instead of one
// each); every other call goes as it is.
func handOut(rs *C.tsq_req) {
	var gets [][]*C.tsq_req // by handle, in queue order
	for r := rs; r != nil; {
		next := r.next // r belongs to its caller again once it is done
		if r.op != C.TSQ_GET_INTO {
			give(job{r: r})
			r = next
			continue
		}
		g := slices.IndexFunc(gets, func(g []*C.tsq_req) bool { return g[0].i[0] == r.i[0] && len(g) < maxCoalesced })
		if g < 0 {
			gets = append(gets, nil)
			g = len(gets) - 1
		}
		gets[g] = append(gets[g], r)
		r = next
	}
	for _, g := range gets {
		if len(g) == 1 {
			give(job{r: g[0]})
		} else {
			give(job{batch: g})
		}
	}
}

// give hands j to an idle worker, or to a new one.
func give(j job) {
	select {
	case work <- j:
	default:
		go worker(j)
	}
}

// work hands jobs to idle workers. Workers outlive their jobs so that
// their stacks, grown by the first job, serve the next ones (a goroutine
// per call spent a measurable share of the queue's CPU copying stacks as
// they grew).
var work = make(chan job)

// workerIdle is how long a worker waits for another job before it ends.
const workerIdle = 10 * time.Second

// worker runs j, then the jobs it is handed, until it has waited
// workerIdle for one.
func worker(j job) {
	t := time.NewTimer(workerIdle)
	defer t.Stop()
	for {
		if j.batch != nil {
			runCoalesced(j.batch)
		} else {
			j.r.ret = runQueued(j.r)
			C.tsq_done(j.r)
		}
		t.Reset(workerIdle)
		select {
		case j = <-work:
		case <-t.C:
			return
		}
	}
}

// runCoalesced runs queued get_into calls of one handle as one
// BatchGetInto and answers each as ts_get_into would have: the length
// read, or the code of its own error with the error's text in its own
// buffer. A call whose key or buffer is invalid fails alone.
func runCoalesced(rs []*C.tsq_req) {
	C.tsq_count_coalesced(C.int64_t(len(rs)))
	rets := make([]C.int64_t, len(rs))
	answered := make([]bool, len(rs))
	answer := func(i int, ret C.int64_t) { rets[i], answered[i] = ret, true }
	failAll := func(err error) {
		for i, r := range rs {
			if !answered[i] {
				answer(i, fail(err, (*C.char)(r.p[2]), r.i[3]))
			}
		}
	}
	func() {
		defer func() {
			if p := recover(); p != nil {
				failAll(errcode.Errorf(errcode.InternalError, "panic in libtierstore: %v", p))
			}
		}()
		err := use(int64(rs[0].i[0]), func(hd *handle) error {
			keys := make([]string, 0, len(rs))
			bufs := make([][]byte, 0, len(rs))
			idx := make([]int, 0, len(rs))
			for i, r := range rs {
				k, err := keyOf((*C.char)(r.p[0]), r.i[1])
				var b []byte
				if err == nil {
					b, err = bytesOf(r.p[1], r.i[2])
				}
				if err != nil {
					answer(i, fail(err, (*C.char)(r.p[2]), r.i[3]))
					continue
				}
				keys, bufs, idx = append(keys, k), append(bufs, b), append(idx, i)
			}
			if len(idx) == 0 {
				return nil
			}
			ctx, cancel := hd.ctx()
			defer cancel()
			ns, errs := hd.c.BatchGetInto(ctx, keys, bufs)
			for j, i := range idx {
				if errs[j] != nil {
					answer(i, fail(errs[j], (*C.char)(rs[i].p[2]), rs[i].i[3]))
				} else {
					answer(i, C.int64_t(ns[j]))
				}
			}
			return nil
		})
		if err != nil {
			failAll(err)
		}
	}()
	for i, r := range rs {
		r.ret = rets[i]
		C.tsq_done(r)
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
