// Command capi is tierstore's C ABI, built with
//
//	go build -buildmode=c-shared -o python/tierstore/_lib/libtierstore.so ./python/capi
//
// (make python) and loaded by the Python package tierstore with ctypes. It
// exposes the Go client (package client) and, when a client is opened with
// segment_size > 0, a store node (package node) inside the calling process:
// one implementation of the protocol, the data plane, CRC32C, replica
// fallback and etcd:// leader following (package ha is linked, so
// etcd:// master addresses work).
//
// # The ABI
//
// Every function returns int64_t: >= 0 is success (a handle, a byte count,
// 1/0 for a boolean, a count), < 0 is a tierstore/Mooncake error code
// (internal/errcode: -704 OBJECT_NOT_FOUND, -600 INVALID_PARAMS, ...).
// Functions that can fail take (char *err, int64_t errlen) last and write
// the error's text there, NUL-terminated and cut to errlen-1 bytes, so that
// each call has its own error text (no thread-local state). Keys are
// (const char *key, int64_t keylen): any bytes, no NUL needed. Batch calls
// write one int64_t result per key into results (bytes, 0/1 or a negative
// code) and return 0, or a negative code when the batch itself is bad.
// Buffers are (void *ptr, int64_t size) pairs; the parts of a gather/scatter
// call are arrays of pointers and sizes, flattened over the keys of a batch
// with nparts[i] parts for key i. JSON answers (replicas, stats, codes,
// hostname) go to (char *out, int64_t outlen) and the call returns the
// length of the whole answer: when that is >= outlen nothing useful was
// written and the caller asks again with a larger buffer.
//
// # Invariants
//
//   - No Go pointer is handed to C: a client is an int64 handle into a map.
//   - No C pointer is kept after a call returns: buffers are viewed as Go
//     slices for the duration of the call only (package wire returns only
//     once its reader no longer touches a caller's buffer).
//   - ts_close waits for the calls in flight on its handle, closes the
//     client, then closes the in-process node (which unmounts its segment:
//     its objects leave the pool) and the master connection; a later
//     ts_open in the same process starts afresh.
//
// # Concurrency
//
// Every function may be called from any thread at once. The data calls
// and the lookups (ts_put*, ts_get*, ts_batch_put*, ts_batch_get_into*,
// ts_exists, ts_batch_exists) have a C entry point each, tsq_NAME (queue.c), which runs the call
// directly when no other is in flight (single puts excepted: mode auto
// queues them always) and otherwise queues it. A direct call's context
// carries wire.WithCallerThread, so that its data-plane reply is read on
// the caller's thread over a connection of its own. The
// dispatcher goroutine (queue.go) waits on an eventfd in the runtime's
// poller, takes the whole queue (queue.c's qmu guards it) at each wake and
// hands each call to a worker goroutine, which writes the result and sets
// the caller's futex word; the caller waits on that word in C, so no thread
// of the caller's runs Go code for a queued call. A queued request lives on
// its caller's stack: the Go side never touches it after setting done.
// TIERSTORE_CALLS (auto, direct, queue), read at load, sets the mode. handles (guarded by
// handlesMu) maps ids to clients; each handle's RWMutex is held for reading
// by its calls and for writing by ts_close, so a node is never closed under
// a call reading its segment.
package main
