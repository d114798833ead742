// queue.c: the C half of libtierstore's call queue (see queue.go).
//
// A call from a thread the Go runtime did not create runs on a goroutine
// locked to that thread: every network wait of the call parks the thread
// and wakes it again through the scheduler (runtime.stoplockedm,
// startlockedm), and with several such callers each wait hands the
// runtime's processors between OS threads. The tsq_* entry points avoid
// that when another call is in flight: they put the call on a queue, wake
// the Go dispatcher through an eventfd (only when the queue was empty), and
// wait on a futex in C; a plain goroutine runs the call and wakes them.
// With no other call in flight (mode auto) they call the Go function
// directly, which is cheaper for one caller (its data-plane reply is then
// read on this thread: wire.WithCallerThread), except single puts
// (enter_put).

#include <errno.h>
#include <linux/futex.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "queue.h"
#include "_cgo_export.h"

static pthread_mutex_t qmu = PTHREAD_MUTEX_INITIALIZER;
static tsq_req *qhead, *qtail; // guarded by qmu: the calls not yet taken

static _Atomic int qfd = -1;        // the dispatcher's eventfd; -1: no queue
static _Atomic int qmode = TSQ_AUTO;
static _Atomic int64_t inflight;    // tsq_* calls in progress
static _Atomic int64_t ndirect, nqueued;
// Set while this thread runs a call directly (enter said so): the Go side
// then does the call's socket waits on this thread (tsq_caller_thread).
static __thread int direct_call;

int tsq_caller_thread(void) { return direct_call; }

void tsq_init(int evfd, int mode) {
	atomic_store(&qmode, mode);
	atomic_store(&qfd, evfd);
}

tsq_req *tsq_take(void) {
	pthread_mutex_lock(&qmu);
	tsq_req *r = qhead;
	qhead = qtail = NULL;
	pthread_mutex_unlock(&qmu);
	return r;
}

void tsq_done(tsq_req *r) {
	uint32_t *w = &r->done;
	__atomic_store_n(w, 1, __ATOMIC_RELEASE);
	// r may be gone once done is 1 (the caller returned); the wake only
	// names the address, and a waiter woken spuriously checks its word.
	syscall(SYS_futex, w, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
}

// enter counts a call in and says whether it runs directly.
static int enter(void) {
	int64_t before = atomic_fetch_add(&inflight, 1);
	int mode = atomic_load(&qmode);
	if (atomic_load(&qfd) < 0 || mode == TSQ_DIRECT || (mode == TSQ_AUTO && before == 0)) {
		atomic_fetch_add(&ndirect, 1);
		direct_call = 1;
		return 1;
	}
	atomic_fetch_add(&nqueued, 1);
	return 0;
}

// enter_put is enter for a single put: in mode auto a put is queued even
// with no other call in flight. A put is two master round trips and a
// write; from a locked thread each gRPC wait is handed back through the
// scheduler, and on a goroutine it is not (a lone 4 KiB put_from measured
// 12-16 context switches and 250-340 us of CPU queued against 18-22 and
// 380-410 us direct; docs/benchmarks.md, "Direct calls read on their own
// thread").
static int enter_put(void) {
	if (atomic_load(&qmode) == TSQ_AUTO && atomic_load(&qfd) >= 0) {
		atomic_fetch_add(&inflight, 1);
		atomic_fetch_add(&nqueued, 1);
		return 0;
	}
	return enter();
}

static int64_t leave(int64_t ret) {
	direct_call = 0;
	atomic_fetch_sub(&inflight, 1);
	return ret;
}

// run queues r and waits for its result.
static int64_t run(tsq_req *r) {
	r->next = NULL;
	r->done = 0;
	pthread_mutex_lock(&qmu);
	int was_empty = qhead == NULL;
	if (qtail)
		qtail->next = r;
	else
		qhead = r;
	qtail = r;
	pthread_mutex_unlock(&qmu);
	if (was_empty) {
		uint64_t one = 1;
		int fd = atomic_load(&qfd);
		// qfd is set once, before any call is queued, and never closed;
		// the counter cannot overflow (the dispatcher reads it to 0 each
		// round), so only EINTR can fail the write. Any other failure would
		// leave the call waiting forever: abort loudly instead.
		while (write(fd, &one, sizeof one) != sizeof one) {
			if (errno != EINTR)
				abort();
		}
	}
	while (__atomic_load_n(&r->done, __ATOMIC_ACQUIRE) == 0)
		syscall(SYS_futex, &r->done, FUTEX_WAIT_PRIVATE, 0, NULL, NULL, 0);
	return leave(r->ret);
}

// tsq_counts writes how many tsq_* calls ran directly and how many were
// queued since the library was loaded (tests and the bench read them).
int64_t tsq_counts(int64_t *direct, int64_t *queued) {
	if (direct)
		*direct = atomic_load(&ndirect);
	if (queued)
		*queued = atomic_load(&nqueued);
	return 0;
}

#define REQ(OP) tsq_req r; memset(&r, 0, sizeof r); r.op = (OP)

int64_t tsq_put(int64_t h, char *key, int64_t keylen, void *buf, int64_t size, int64_t replicas,
		int64_t flags, char *preferred, char *err, int64_t errlen) {
	if (enter_put())
		return leave(ts_put(h, key, keylen, buf, size, replicas, flags, preferred, err, errlen));
	REQ(TSQ_PUT);
	r.i[0] = h, r.p[0] = key, r.i[1] = keylen, r.p[1] = buf, r.i[2] = size, r.i[3] = replicas,
	r.i[4] = flags, r.p[2] = preferred, r.p[3] = err, r.i[5] = errlen;
	return run(&r);
}

int64_t tsq_put_parts(int64_t h, char *key, int64_t keylen, void **ptrs, int64_t *sizes, int64_t nparts,
		      int64_t replicas, int64_t flags, char *preferred, char *err, int64_t errlen) {
	if (enter_put())
		return leave(ts_put_parts(h, key, keylen, ptrs, sizes, nparts, replicas, flags, preferred, err, errlen));
	REQ(TSQ_PUT_PARTS);
	r.i[0] = h, r.p[0] = key, r.i[1] = keylen, r.p[1] = ptrs, r.p[2] = sizes, r.i[2] = nparts,
	r.i[3] = replicas, r.i[4] = flags, r.p[3] = preferred, r.p[4] = err, r.i[5] = errlen;
	return run(&r);
}

int64_t tsq_get_into(int64_t h, char *key, int64_t keylen, void *buf, int64_t size, char *err, int64_t errlen) {
	if (enter())
		return leave(ts_get_into(h, key, keylen, buf, size, err, errlen));
	REQ(TSQ_GET_INTO);
	r.i[0] = h, r.p[0] = key, r.i[1] = keylen, r.p[1] = buf, r.i[2] = size, r.p[2] = err, r.i[3] = errlen;
	return run(&r);
}

int64_t tsq_get_into_parts(int64_t h, char *key, int64_t keylen, void **ptrs, int64_t *sizes, int64_t nparts,
			   char *err, int64_t errlen) {
	if (enter())
		return leave(ts_get_into_parts(h, key, keylen, ptrs, sizes, nparts, err, errlen));
	REQ(TSQ_GET_INTO_PARTS);
	r.i[0] = h, r.p[0] = key, r.i[1] = keylen, r.p[1] = ptrs, r.p[2] = sizes, r.i[2] = nparts,
	r.p[3] = err, r.i[3] = errlen;
	return run(&r);
}

int64_t tsq_batch_put(int64_t h, int64_t n, char **keys, int64_t *keylens, void **ptrs, int64_t *sizes,
		      int64_t replicas, int64_t flags, char *preferred, int64_t *res, char *err, int64_t errlen) {
	if (enter())
		return leave(ts_batch_put(h, n, keys, keylens, ptrs, sizes, replicas, flags, preferred, res, err, errlen));
	REQ(TSQ_BATCH_PUT);
	r.i[0] = h, r.i[1] = n, r.p[0] = keys, r.p[1] = keylens, r.p[2] = ptrs, r.p[3] = sizes,
	r.i[2] = replicas, r.i[3] = flags, r.p[4] = preferred, r.p[5] = res, r.p[6] = err, r.i[4] = errlen;
	return run(&r);
}

int64_t tsq_batch_put_parts(int64_t h, int64_t n, char **keys, int64_t *keylens, int64_t *nparts, void **ptrs,
			    int64_t *sizes, int64_t replicas, int64_t flags, char *preferred, int64_t *res, char *err,
			    int64_t errlen) {
	if (enter())
		return leave(ts_batch_put_parts(h, n, keys, keylens, nparts, ptrs, sizes, replicas, flags, preferred, res,
						err, errlen));
	REQ(TSQ_BATCH_PUT_PARTS);
	r.i[0] = h, r.i[1] = n, r.p[0] = keys, r.p[1] = keylens, r.p[2] = nparts, r.p[3] = ptrs, r.p[4] = sizes,
	r.i[2] = replicas, r.i[3] = flags, r.p[5] = preferred, r.p[6] = res, r.p[7] = err, r.i[4] = errlen;
	return run(&r);
}

int64_t tsq_batch_get_into(int64_t h, int64_t n, char **keys, int64_t *keylens, void **ptrs, int64_t *sizes,
			   int64_t *res, char *err, int64_t errlen) {
	if (enter())
		return leave(ts_batch_get_into(h, n, keys, keylens, ptrs, sizes, res, err, errlen));
	REQ(TSQ_BATCH_GET_INTO);
	r.i[0] = h, r.i[1] = n, r.p[0] = keys, r.p[1] = keylens, r.p[2] = ptrs, r.p[3] = sizes, r.p[4] = res,
	r.p[5] = err, r.i[2] = errlen;
	return run(&r);
}

int64_t tsq_batch_get_into_parts(int64_t h, int64_t n, char **keys, int64_t *keylens, int64_t *nparts, void **ptrs,
				 int64_t *sizes, int64_t *res, char *err, int64_t errlen) {
	if (enter())
		return leave(ts_batch_get_into_parts(h, n, keys, keylens, nparts, ptrs, sizes, res, err, errlen));
	REQ(TSQ_BATCH_GET_INTO_PARTS);
	r.i[0] = h, r.i[1] = n, r.p[0] = keys, r.p[1] = keylens, r.p[2] = nparts, r.p[3] = ptrs, r.p[4] = sizes,
	r.p[5] = res, r.p[6] = err, r.i[2] = errlen;
	return run(&r);
}

int64_t tsq_get(int64_t h, char *key, int64_t keylen, void **out, char *err, int64_t errlen) {
	if (enter())
		return leave(ts_get(h, key, keylen, out, err, errlen));
	REQ(TSQ_GET);
	r.i[0] = h, r.p[0] = key, r.i[1] = keylen, r.p[1] = out, r.p[2] = err, r.i[2] = errlen;
	return run(&r);
}

int64_t tsq_exists(int64_t h, char *key, int64_t keylen, char *err, int64_t errlen) {
	if (enter())
		return leave(ts_exists(h, key, keylen, err, errlen));
	REQ(TSQ_EXISTS);
	r.i[0] = h, r.p[0] = key, r.i[1] = keylen, r.p[1] = err, r.i[2] = errlen;
	return run(&r);
}

int64_t tsq_batch_exists(int64_t h, int64_t n, char **keys, int64_t *keylens, int64_t *res, char *err, int64_t errlen) {
	if (enter())
		return leave(ts_batch_exists(h, n, keys, keylens, res, err, errlen));
	REQ(TSQ_BATCH_EXISTS);
	r.i[0] = h, r.i[1] = n, r.p[0] = keys, r.p[1] = keylens, r.p[2] = res, r.p[3] = err, r.i[2] = errlen;
	return run(&r);
}
