// queue.h: the call queue of libtierstore (queue.c, queue.go). A caller's
// thread hands a data call to goroutines of the Go runtime and waits for it
// in C, instead of running the call on its own thread inside Go.
#ifndef TIERSTORE_QUEUE_H
#define TIERSTORE_QUEUE_H

#include <stdint.h>

// Operations a queued call can be (tsq_req.op).
enum {
	TSQ_PUT = 1,
	TSQ_PUT_PARTS,
	TSQ_GET_INTO,
	TSQ_GET_INTO_PARTS,
	TSQ_BATCH_PUT,
	TSQ_BATCH_PUT_PARTS,
	TSQ_BATCH_GET_INTO,
	TSQ_BATCH_GET_INTO_PARTS,
	TSQ_GET,
	TSQ_EXISTS,
	TSQ_BATCH_EXISTS,
};

// Call modes (TIERSTORE_CALLS): auto queues a call when another is in
// flight, direct never queues, queue always does.
enum { TSQ_AUTO = 0, TSQ_DIRECT = 1, TSQ_QUEUE = 2 };

// tsq_req is one queued call. It lives on the caller's stack from submit
// until done is set: the Go side reads op, i and p, writes ret, then sets
// done (tsq_done) and never touches the request again.
typedef struct tsq_req {
	struct tsq_req *next; // the queue's link (queue.c's qmu)
	int64_t op;
	int64_t i[8];   // integer arguments, in the order of the function's
	void *p[8];     // pointer arguments, in the order of the function's
	int64_t ret;
	uint32_t done;  // 0 until the result is in ret (futex word)
} tsq_req;

void tsq_init(int evfd, int mode);
tsq_req *tsq_take(void);
void tsq_done(tsq_req *r);
// tsq_caller_thread is 1 on a thread running a tsq_* call directly (not
// queued): the caller's own thread, inside Go as a cgo callback.
int tsq_caller_thread(void);

#endif
