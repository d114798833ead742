package main

/*
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
*/
import "C"

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"
	"unsafe"

	"github.com/tierstore/tierstore/client"
	"github.com/tierstore/tierstore/internal/errcode"
	"github.com/tierstore/tierstore/masterapi"
)

func main() {}

// Put flags (ts_put*'s flags argument).
const (
	flagSoftPin = 1
	flagHardPin = 2
)

// codeOf is the ABI's number for err: 0 for nil, -600 for a closed client,
// else the code of err's sentinel.
func codeOf(err error) int64 {
	if err == nil {
		return 0
	}
	if errors.Is(err, client.ErrClosed) {
		return int64(errcode.InvalidParams)
	}
	return int64(errcode.Of(err))
}

// fail writes err's text to (buf, n) and returns its code.
func fail(err error, buf *C.char, n C.int64_t) C.int64_t {
	if err == nil {
		return 0
	}
	if errors.Is(err, client.ErrClosed) && !errors.Is(err, errcode.ErrInvalidParams) {
		err = fmt.Errorf("client is closed: %w", err)
	}
	writeText(err.Error(), buf, n)
	return C.int64_t(codeOf(err))
}

// writeText copies s to (buf, n), cut to n-1 bytes and NUL-terminated.
func writeText(s string, buf *C.char, n C.int64_t) {
	if buf == nil || n <= 0 {
		return
	}
	dst := unsafe.Slice((*byte)(unsafe.Pointer(buf)), int(n))
	k := copy(dst[:n-1], s)
	dst[k] = 0
}

// answer writes s to (out, n) when it fits with its NUL and returns its
// length (the caller asks again with a larger buffer when it is >= n).
func answer(s []byte, out *C.char, n C.int64_t) C.int64_t {
	if out != nil && int64(len(s)) < int64(n) {
		dst := unsafe.Slice((*byte)(unsafe.Pointer(out)), int(n))
		copy(dst, s)
		dst[len(s)] = 0
	}
	return C.int64_t(len(s))
}

// guard turns a panic into INTERNAL_ERROR with its text, so that a bug
// never takes the Python process down.
func guard(ret *C.int64_t, buf *C.char, n C.int64_t) {
	if r := recover(); r != nil {
		*ret = fail(errcode.Errorf(errcode.InternalError, "panic in libtierstore: %v", r), buf, n)
	}
}

// bytesOf views C memory as a slice for the duration of a call.
func bytesOf(p unsafe.Pointer, size C.int64_t) ([]byte, error) {
	switch {
	case size < 0:
		return nil, errcode.Errorf(errcode.InvalidParams, "buffer size %d is negative", int64(size))
	case size == 0:
		return []byte{}, nil
	case p == nil:
		return nil, errcode.Errorf(errcode.InvalidParams, "buffer of %d bytes at NULL", int64(size))
	}
	return unsafe.Slice((*byte)(p), int(size)), nil
}

func keyOf(key *C.char, n C.int64_t) (string, error) {
	if n < 0 || (key == nil && n > 0) {
		return "", errcode.Errorf(errcode.InvalidKey, "key of length %d at %p", int64(n), key)
	}
	if n == 0 {
		return "", nil
	}
	return C.GoStringN(key, C.int(n)), nil
}

// answerKeyed runs f on handle h with the key (key, keylen) and a context
// bounded by the handle's timeout: f's count (>= 0), or the code of its
// error with the error's text in (errbuf, errlen). It is the shape of every
// single-key call.
func answerKeyed(h C.int64_t, key *C.char, keylen C.int64_t, errbuf *C.char, errlen C.int64_t,
	f func(ctx context.Context, hd *handle, k string) (int64, error)) C.int64_t {
	var n int64
	err := use(int64(h), func(hd *handle) error {
		k, err := keyOf(key, keylen)
		if err != nil {
			return err
		}
		ctx, cancel := hd.ctx()
		defer cancel()
		n, err = f(onCallerThread(ctx), hd, k)
		return err
	})
	if err != nil {
		return fail(err, errbuf, errlen)
	}
	return C.int64_t(n)
}

// partsOf views nparts C buffers (pointers ptrs, sizes sizes).
func partsOf(ptrs *unsafe.Pointer, sizes *C.int64_t, nparts int64) ([][]byte, error) {
	if nparts < 0 || nparts > 0 && (ptrs == nil || sizes == nil) {
		return nil, errcode.Errorf(errcode.InvalidParams, "%d parts with NULL arrays", nparts)
	}
	if nparts == 0 {
		return nil, nil
	}
	ps := unsafe.Slice(ptrs, int(nparts))
	ss := unsafe.Slice(sizes, int(nparts))
	out := make([][]byte, nparts)
	for i := range out {
		b, err := bytesOf(ps[i], ss[i])
		if err != nil {
			return nil, fmt.Errorf("part %d: %w", i, err)
		}
		out[i] = b
	}
	return out, nil
}

func keysOf(n C.int64_t, keys **C.char, keylens *C.int64_t) ([]string, error) {
	if n < 0 || n > 0 && (keys == nil || keylens == nil) {
		return nil, errcode.Errorf(errcode.InvalidParams, "%d keys with NULL arrays", int64(n))
	}
	if n == 0 {
		return []string{}, nil
	}
	ks := unsafe.Slice(keys, int(n))
	ls := unsafe.Slice(keylens, int(n))
	out := make([]string, n)
	for i := range out {
		k, err := keyOf(ks[i], ls[i])
		if err != nil {
			return nil, err
		}
		out[i] = k
	}
	return out, nil
}

func putOptions(replicas, flags C.int64_t, preferred *C.char) (client.PutOptions, error) {
	if replicas < 0 || replicas > masterapi.MaxReplicas {
		return client.PutOptions{}, errcode.Errorf(errcode.InvalidParams, "replicas %d: 1..%d allowed", int64(replicas), masterapi.MaxReplicas)
	}
	o := client.PutOptions{Replicas: int(replicas), SoftPin: flags&flagSoftPin != 0, HardPin: flags&flagHardPin != 0}
	if preferred != nil {
		o.PreferredNode = C.GoString(preferred)
	}
	return o, nil
}

func results(out *C.int64_t, n C.int64_t) []C.int64_t {
	if n == 0 {
		return nil
	}
	return unsafe.Slice(out, int(n))
}

//export ts_open
func ts_open(config *C.char, errbuf *C.char, errlen C.int64_t) (ret C.int64_t) {
	defer guard(&ret, errbuf, errlen)
	if config == nil {
		return fail(errcode.Errorf(errcode.InvalidParams, "open: NULL configuration"), errbuf, errlen)
	}
	id, err := open(C.GoString(config))
	if err != nil {
		return fail(err, errbuf, errlen)
	}
	return C.int64_t(id)
}

//export ts_close
func ts_close(h C.int64_t, errbuf *C.char, errlen C.int64_t) (ret C.int64_t) {
	defer guard(&ret, errbuf, errlen)
	return fail(closeHandle(int64(h)), errbuf, errlen)
}

//export ts_put
func ts_put(h C.int64_t, key *C.char, keylen C.int64_t, buf unsafe.Pointer, size C.int64_t,
	replicas, flags C.int64_t, preferred *C.char, errbuf *C.char, errlen C.int64_t) (ret C.int64_t) {
	defer guard(&ret, errbuf, errlen)
	return answerKeyed(h, key, keylen, errbuf, errlen, func(ctx context.Context, hd *handle, k string) (int64, error) {
		v, err := bytesOf(buf, size)
		if err != nil {
			return 0, err
		}
		o, err := putOptions(replicas, flags, preferred)
		if err != nil {
			return 0, err
		}
		return 0, hd.c.PutWith(ctx, k, v, o)
	})
}

//export ts_put_parts
func ts_put_parts(h C.int64_t, key *C.char, keylen C.int64_t, ptrs *unsafe.Pointer, sizes *C.int64_t, nparts C.int64_t,
	replicas, flags C.int64_t, preferred *C.char, errbuf *C.char, errlen C.int64_t) (ret C.int64_t) {
	defer guard(&ret, errbuf, errlen)
	return answerKeyed(h, key, keylen, errbuf, errlen, func(ctx context.Context, hd *handle, k string) (int64, error) {
		parts, err := partsOf(ptrs, sizes, int64(nparts))
		if err != nil {
			return 0, err
		}
		o, err := putOptions(replicas, flags, preferred)
		if err != nil {
			return 0, err
		}
		return 0, hd.c.PutParts(ctx, k, parts, o)
	})
}

//export ts_get_into
func ts_get_into(h C.int64_t, key *C.char, keylen C.int64_t, buf unsafe.Pointer, size C.int64_t,
	errbuf *C.char, errlen C.int64_t) (ret C.int64_t) {
	defer guard(&ret, errbuf, errlen)
	return answerKeyed(h, key, keylen, errbuf, errlen, func(ctx context.Context, hd *handle, k string) (int64, error) {
		b, err := bytesOf(buf, size)
		if err != nil {
			return 0, err
		}
		n, err := hd.c.GetInto(ctx, k, b)
		return int64(n), err
	})
}

//export ts_get_into_parts
func ts_get_into_parts(h C.int64_t, key *C.char, keylen C.int64_t, ptrs *unsafe.Pointer, sizes *C.int64_t, nparts C.int64_t,
	errbuf *C.char, errlen C.int64_t) (ret C.int64_t) {
	defer guard(&ret, errbuf, errlen)
	return answerKeyed(h, key, keylen, errbuf, errlen, func(ctx context.Context, hd *handle, k string) (int64, error) {
		parts, err := partsOf(ptrs, sizes, int64(nparts))
		if err != nil {
			return 0, err
		}
		n, err := hd.c.GetIntoParts(ctx, k, parts)
		return int64(n), err
	})
}

// ts_get reads key into memory it allocates with malloc (*out; the caller
// frees it with ts_free) and returns its size.
//
//export ts_get
func ts_get(h C.int64_t, key *C.char, keylen C.int64_t, out *unsafe.Pointer, errbuf *C.char, errlen C.int64_t) (ret C.int64_t) {
	defer guard(&ret, errbuf, errlen)
	if out == nil {
		return fail(errcode.Errorf(errcode.InvalidParams, "get: NULL out"), errbuf, errlen)
	}
	*out = nil
	var n int
	err := use(int64(h), func(hd *handle) error {
		k, err := keyOf(key, keylen)
		if err != nil {
			return err
		}
		ctx, cancel := hd.ctx()
		defer cancel()
		ctx = onCallerThread(ctx)
		var mem unsafe.Pointer
		n, err = hd.c.GetAlloc(ctx, k, func(size int64) ([]byte, error) {
			if mem != nil { // a second lookup (the object changed under the read)
				C.free(mem)
			}
			mem = C.malloc(C.size_t(max(size, 1)))
			if mem == nil {
				return nil, errcode.Errorf(errcode.InternalError, "get: malloc of %d bytes failed", size)
			}
			return unsafe.Slice((*byte)(mem), int(size)), nil
		})
		if err != nil {
			if mem != nil {
				C.free(mem)
			}
			return err
		}
		*out = mem
		return nil
	})
	if err != nil {
		return fail(err, errbuf, errlen)
	}
	return C.int64_t(n)
}

//export ts_free
func ts_free(p unsafe.Pointer) { C.free(p) }

// batchPut is the body of ts_batch_put and ts_batch_put_parts: values[i]
// is the parts of key i.
func batchPut(h C.int64_t, n C.int64_t, keys **C.char, keylens *C.int64_t, values func() ([][][]byte, error),
	replicas, flags C.int64_t, preferred *C.char, res *C.int64_t) error {
	return use(int64(h), func(hd *handle) error {
		ks, err := keysOf(n, keys, keylens)
		if err != nil {
			return err
		}
		vs, err := values()
		if err != nil {
			return err
		}
		o, err := putOptions(replicas, flags, preferred)
		if err != nil {
			return err
		}
		ctx, cancel := hd.ctx()
		defer cancel()
		errs := hd.c.BatchPutParts(ctx, ks, vs, o)
		return perKey(errs, results(res, n))
	})
}

// perKey writes each key's code to rs and returns the first error (for its
// text), wrapped so that the call itself still succeeds (batchErr).
func perKey(errs []error, rs []C.int64_t) error {
	var first error
	for i, e := range errs {
		rs[i] = C.int64_t(codeOf(e))
		if e != nil && first == nil {
			first = e
		}
	}
	if first != nil {
		return batchErr{first}
	}
	return nil
}

// batchErr carries the first per-key error of a batch: its text goes to
// the error buffer, but the batch call returns 0 (the per-key results say
// what failed).
type batchErr struct{ error }

func (e batchErr) Unwrap() error { return e.error }

// finishBatch returns 0 for a batch whose per-key results are written
// (writing the first per-key error's text), or the batch's own error.
func finishBatch(err error, errbuf *C.char, errlen C.int64_t) C.int64_t {
	var be batchErr
	if errors.As(err, &be) {
		writeText(be.error.Error(), errbuf, errlen)
		return 0
	}
	return fail(err, errbuf, errlen)
}

// flatParts splits the flattened part arrays of a batch: key i has
// nparts[i] parts.
func flatParts(n C.int64_t, nparts *C.int64_t, ptrs *unsafe.Pointer, sizes *C.int64_t) ([][][]byte, error) {
	if n == 0 {
		return [][][]byte{}, nil
	}
	if nparts == nil {
		return nil, errcode.Errorf(errcode.InvalidParams, "NULL nparts")
	}
	np := unsafe.Slice(nparts, int(n))
	total := int64(0)
	for i, k := range np {
		if k < 0 {
			return nil, errcode.Errorf(errcode.InvalidParams, "key %d: %d parts", i, int64(k))
		}
		total += int64(k)
	}
	all, err := partsOf(ptrs, sizes, total)
	if err != nil {
		return nil, err
	}
	out := make([][][]byte, n)
	at := 0
	for i, k := range np {
		out[i] = all[at : at+int(k) : at+int(k)]
		at += int(k)
	}
	return out, nil
}

//export ts_batch_put
func ts_batch_put(h C.int64_t, n C.int64_t, keys **C.char, keylens *C.int64_t, ptrs *unsafe.Pointer, sizes *C.int64_t,
	replicas, flags C.int64_t, preferred *C.char, res *C.int64_t, errbuf *C.char, errlen C.int64_t) (ret C.int64_t) {
	defer guard(&ret, errbuf, errlen)
	return finishBatch(batchPut(h, n, keys, keylens, func() ([][][]byte, error) {
		one, err := partsOf(ptrs, sizes, int64(n))
		if err != nil {
			return nil, err
		}
		out := make([][][]byte, len(one))
		for i := range one {
			out[i] = one[i : i+1 : i+1]
		}
		return out, nil
	}, replicas, flags, preferred, res), errbuf, errlen)
}

//export ts_batch_put_parts
func ts_batch_put_parts(h C.int64_t, n C.int64_t, keys **C.char, keylens *C.int64_t, nparts *C.int64_t, ptrs *unsafe.Pointer, sizes *C.int64_t,
	replicas, flags C.int64_t, preferred *C.char, res *C.int64_t, errbuf *C.char, errlen C.int64_t) (ret C.int64_t) {
	defer guard(&ret, errbuf, errlen)
	return finishBatch(batchPut(h, n, keys, keylens, func() ([][][]byte, error) {
		return flatParts(n, nparts, ptrs, sizes)
	}, replicas, flags, preferred, res), errbuf, errlen)
}

// batchGet is the body of the batch reads: bufs[i] is the parts of key i.
func batchGet(h C.int64_t, n C.int64_t, keys **C.char, keylens *C.int64_t, bufs func() ([][][]byte, error), res *C.int64_t) error {
	return use(int64(h), func(hd *handle) error {
		ks, err := keysOf(n, keys, keylens)
		if err != nil {
			return err
		}
		bs, err := bufs()
		if err != nil {
			return err
		}
		ctx, cancel := hd.ctx()
		defer cancel()
		ns, errs := hd.c.BatchGetIntoParts(ctx, ks, bs)
		rs := results(res, n)
		err = perKey(errs, rs)
		for i := range rs {
			if errs[i] == nil {
				rs[i] = C.int64_t(ns[i])
			}
		}
		return err
	})
}

//export ts_batch_get_into
func ts_batch_get_into(h C.int64_t, n C.int64_t, keys **C.char, keylens *C.int64_t, ptrs *unsafe.Pointer, sizes *C.int64_t,
	res *C.int64_t, errbuf *C.char, errlen C.int64_t) (ret C.int64_t) {
	defer guard(&ret, errbuf, errlen)
	return finishBatch(batchGet(h, n, keys, keylens, func() ([][][]byte, error) {
		one, err := partsOf(ptrs, sizes, int64(n))
		if err != nil {
			return nil, err
		}
		out := make([][][]byte, len(one))
		for i := range one {
			out[i] = one[i : i+1 : i+1]
		}
		return out, nil
	}, res), errbuf, errlen)
}

//export ts_batch_get_into_parts
func ts_batch_get_into_parts(h C.int64_t, n C.int64_t, keys **C.char, keylens *C.int64_t, nparts *C.int64_t, ptrs *unsafe.Pointer, sizes *C.int64_t,
	res *C.int64_t, errbuf *C.char, errlen C.int64_t) (ret C.int64_t) {
	defer guard(&ret, errbuf, errlen)
	return finishBatch(batchGet(h, n, keys, keylens, func() ([][][]byte, error) {
		return flatParts(n, nparts, ptrs, sizes)
	}, res), errbuf, errlen)
}

//export ts_exists
func ts_exists(h C.int64_t, key *C.char, keylen C.int64_t, errbuf *C.char, errlen C.int64_t) (ret C.int64_t) {
	defer guard(&ret, errbuf, errlen)
	return answerKeyed(h, key, keylen, errbuf, errlen, func(ctx context.Context, hd *handle, k string) (int64, error) {
		ok, err := hd.c.Exists(ctx, k)
		if ok {
			return 1, err
		}
		return 0, err
	})
}

//export ts_batch_exists
func ts_batch_exists(h C.int64_t, n C.int64_t, keys **C.char, keylens *C.int64_t, res *C.int64_t, errbuf *C.char, errlen C.int64_t) (ret C.int64_t) {
	defer guard(&ret, errbuf, errlen)
	return finishBatch(use(int64(h), func(hd *handle) error {
		ks, err := keysOf(n, keys, keylens)
		if err != nil {
			return err
		}
		if len(ks) == 0 {
			return nil
		}
		ctx, cancel := hd.ctx()
		defer cancel()
		oks, errs := hd.c.BatchExists(ctx, ks)
		rs := results(res, n)
		err = perKey(errs, rs)
		for i := range rs {
			if errs[i] == nil && oks[i] {
				rs[i] = 1
			}
		}
		return err
	}), errbuf, errlen)
}

//export ts_get_size
func ts_get_size(h C.int64_t, key *C.char, keylen C.int64_t, errbuf *C.char, errlen C.int64_t) (ret C.int64_t) {
	defer guard(&ret, errbuf, errlen)
	return answerKeyed(h, key, keylen, errbuf, errlen, func(ctx context.Context, hd *handle, k string) (int64, error) {
		info, err := hd.c.Lookup(ctx, k)
		return info.Size, err
	})
}

//export ts_remove
func ts_remove(h C.int64_t, key *C.char, keylen C.int64_t, force C.int64_t, errbuf *C.char, errlen C.int64_t) (ret C.int64_t) {
	defer guard(&ret, errbuf, errlen)
	return answerKeyed(h, key, keylen, errbuf, errlen, func(ctx context.Context, hd *handle, k string) (int64, error) {
		return 0, hd.c.Remove(ctx, k, force != 0)
	})
}

//export ts_batch_remove
func ts_batch_remove(h C.int64_t, n C.int64_t, keys **C.char, keylens *C.int64_t, force C.int64_t, res *C.int64_t, errbuf *C.char, errlen C.int64_t) (ret C.int64_t) {
	defer guard(&ret, errbuf, errlen)
	return finishBatch(use(int64(h), func(hd *handle) error {
		ks, err := keysOf(n, keys, keylens)
		if err != nil {
			return err
		}
		ctx, cancel := hd.ctx()
		defer cancel()
		return perKey(hd.c.BatchRemove(ctx, ks, force != 0), results(res, n))
	}), errbuf, errlen)
}

//export ts_remove_all
func ts_remove_all(h C.int64_t, force C.int64_t, errbuf *C.char, errlen C.int64_t) (ret C.int64_t) {
	defer guard(&ret, errbuf, errlen)
	var n int64
	err := use(int64(h), func(hd *handle) error {
		ctx, cancel := hd.ctx()
		defer cancel()
		var err error
		n, err = hd.c.RemoveAll(ctx, force != 0)
		return err
	})
	if err != nil {
		return fail(err, errbuf, errlen)
	}
	return C.int64_t(n)
}

//export ts_remove_by_regex
func ts_remove_by_regex(h C.int64_t, pattern *C.char, force C.int64_t, errbuf *C.char, errlen C.int64_t) (ret C.int64_t) {
	defer guard(&ret, errbuf, errlen)
	var n int64
	err := use(int64(h), func(hd *handle) error {
		if pattern == nil {
			return errcode.Errorf(errcode.InvalidParams, "remove by regex: NULL pattern")
		}
		ctx, cancel := hd.ctx()
		defer cancel()
		var err error
		n, err = hd.c.RemoveByRegex(ctx, C.GoString(pattern), force != 0)
		return err
	})
	if err != nil {
		return fail(err, errbuf, errlen)
	}
	return C.int64_t(n)
}

// replicaJSON is one entry of ts_replicas' answer.
type replicaJSON struct {
	Tier   string `json:"tier"` // "dram" or "ssd"
	Node   string `json:"node"` // the node's data endpoint, host:port
	NodeID string `json:"node_id"`
	Size   int64  `json:"size"`
	Status string `json:"status"`
}

// ts_replicas answers key's replicas as a JSON array (see replicaJSON).
//
//export ts_replicas
func ts_replicas(h C.int64_t, key *C.char, keylen C.int64_t, out *C.char, outlen C.int64_t, errbuf *C.char, errlen C.int64_t) (ret C.int64_t) {
	defer guard(&ret, errbuf, errlen)
	var js []byte
	err := use(int64(h), func(hd *handle) error {
		k, err := keyOf(key, keylen)
		if err != nil {
			return err
		}
		ctx, cancel := hd.ctx()
		defer cancel()
		info, err := hd.c.Lookup(ctx, k)
		if err != nil {
			return err
		}
		reps := make([]replicaJSON, 0, len(info.Replicas))
		for _, r := range info.Replicas {
			t := "dram"
			if r.Kind == masterapi.SSD {
				t = "ssd"
			}
			reps = append(reps, replicaJSON{Tier: t, Node: r.Endpoint, NodeID: r.Node, Size: info.Size, Status: r.Status.String()})
		}
		js, err = json.Marshal(reps)
		return err
	})
	if err != nil {
		return fail(err, errbuf, errlen)
	}
	return answer(js, out, outlen)
}

// ts_stats answers {"master": masterapi.Stats, "reads": client.ReadStats,
// "hostname": ...} as JSON.
//
//export ts_stats
func ts_stats(h C.int64_t, out *C.char, outlen C.int64_t, errbuf *C.char, errlen C.int64_t) (ret C.int64_t) {
	defer guard(&ret, errbuf, errlen)
	var js []byte
	err := use(int64(h), func(hd *handle) error {
		ctx, cancel := hd.ctx()
		defer cancel()
		st, err := hd.c.Stats(ctx)
		if err != nil {
			return err
		}
		js, err = json.Marshal(map[string]any{"master": st, "reads": hd.c.ReadStats(), "hostname": hd.hostname})
		return err
	})
	if err != nil {
		return fail(err, errbuf, errlen)
	}
	return answer(js, out, outlen)
}

// healthTimeout bounds ts_health's call to the master.
const healthTimeout = 3 * time.Second

// ts_health answers 0 (healthy), 1 (closed) or 2 (master unreachable).
//
//export ts_health
func ts_health(h C.int64_t) (ret C.int64_t) {
	defer guard(&ret, nil, 0)
	err := use(int64(h), func(hd *handle) error {
		ctx, cancel := context.WithTimeout(context.Background(), min(healthTimeout, hd.timeout))
		defer cancel()
		_, err := hd.c.Stats(ctx)
		if err != nil {
			return fmt.Errorf("%w: %w", errUnhealthy, err)
		}
		return nil
	})
	switch {
	case err == nil:
		return 0
	case errors.Is(err, errUnhealthy):
		return 2
	}
	return 1
}

var errUnhealthy = errors.New("master unreachable")

// ts_hostname answers "host:port" of the in-process node, or the
// configured local_hostname of a pure client.
//
//export ts_hostname
func ts_hostname(h C.int64_t, out *C.char, outlen C.int64_t, errbuf *C.char, errlen C.int64_t) (ret C.int64_t) {
	defer guard(&ret, errbuf, errlen)
	var s string
	err := use(int64(h), func(hd *handle) error { s = hd.hostname; return nil })
	if err != nil {
		return fail(err, errbuf, errlen)
	}
	return answer([]byte(s), out, outlen)
}

// ts_codes answers every error code as a JSON object {"-704":
// "OBJECT_NOT_FOUND", ...} (internal/errcode is the source of truth).
//
//export ts_codes
func ts_codes(out *C.char, outlen C.int64_t) (ret C.int64_t) {
	defer guard(&ret, nil, 0)
	m := map[string]string{"0": "OK"}
	for _, c := range errcode.All() {
		m[strconv.Itoa(int(c))] = c.String()
	}
	js, _ := json.Marshal(m)
	return answer(js, out, outlen)
}
