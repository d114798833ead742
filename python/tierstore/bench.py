"""python3 -m tierstore.bench: the Python side of `go run ./bench python`.

Measures, through MooncakeDistributedStore (the class the connectors use):
batch_get_into and batch_put_from of 128 objects of 2 MiB, get_into of
1 MiB, and get_into of 1 MiB from 8 threads sharing one store. Figures are
MB/s (10^6 bytes per second). With --json the last stdout line is one JSON
object {figure name: MB/s}; without it, one line per figure. With
--serve it measures one figure per request line (JSON in, JSON out), so
that `go run ./bench python` (bench/python.go) can alternate Go and Python
figure by figure against one long-lived store.

It reads the objects pybench/get/0..127 (2 MiB) and pybench/small/0..7
(1 MiB), storing any that are missing, and puts (then removes) objects
under pybench/pyput/. Buffers are bytearrays addressed with ctypes: no
numpy needed.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import sys
import threading
import time

from .mooncake import MooncakeDistributedStore

BATCH_KEYS = 128
BATCH_SIZE = 2 << 20
SMALL_SIZE = 1 << 20
THREADS = 8

NAMES = ("batch_get_into 128 x 2 MiB", "batch_put_from 128 x 2 MiB", "get_into 1 MiB", "get_into 1 MiB, 8 threads")


def _addr(buf: bytearray) -> int:
    return ctypes.addressof(ctypes.c_char.from_buffer(buf))


def _get_key(i):
    return f"pybench/get/{i}"


def _small_key(i):
    return f"pybench/small/{i}"


class BenchError(Exception):
    pass


def _check(what, results, want):
    bad = [(i, r) for i, r in enumerate(results) if r != want]
    if bad:
        raise BenchError(f"{what}: {len(bad)} of {len(results)} failed, first {bad[0]}")


def _timed(d, nbytes, op, cleanup=None):
    """MB/s of op over the time inside it, called once untimed, then until d seconds were spent inside."""
    op(1 << 30)
    if cleanup:
        cleanup()
    inside, moved, rnd = 0.0, 0, 0
    while inside < d:
        t0 = time.perf_counter()
        op(rnd)
        inside += time.perf_counter() - t0
        moved += nbytes
        rnd += 1
        if cleanup:
            cleanup()
    return moved / inside / 1e6


def populate(s, bufs, small):
    keys = [_get_key(i) for i in range(BATCH_KEYS)] + [_small_key(i) for i in range(THREADS)]
    exist = s.batch_is_exist(keys)
    todo = [i for i, e in enumerate(exist) if e != 1]
    if not todo:
        return
    src = [bufs[i] if i < BATCH_KEYS else small[i - BATCH_KEYS] for i in range(len(keys))]
    for i in todo:
        src[i][:] = os.urandom(len(src[i]))
    _check("populate", s.batch_put_from([keys[i] for i in todo], [_addr(src[i]) for i in todo],
                                        [len(src[i]) for i in todo]), 0)


class Bench:
    """The figures on one MooncakeDistributedStore: figure(name, d) measures
    one of NAMES for d seconds of timed work."""

    def __init__(self, master: str):
        s = MooncakeDistributedStore()
        r = s.setup({"local_hostname": "127.0.0.1", "metadata_server": "P2PHANDSHAKE", "global_segment_size": 0,
                     "local_buffer_size": 0, "protocol": "tcp", "master_server_address": master})
        if r != 0:
            raise BenchError(f"setup against {master} returned {r}")
        self.s = s
        try:
            self.bufs = [bytearray(BATCH_SIZE) for _ in range(BATCH_KEYS)]
            self.small = [bytearray(SMALL_SIZE) for _ in range(THREADS)]
            for b in self.bufs + self.small:
                s.register_buffer(_addr(b), len(b))
            populate(s, self.bufs, self.small)
        except BaseException:
            s.close()
            raise
        self.keys = [_get_key(i) for i in range(BATCH_KEYS)]
        self.ptrs = [_addr(b) for b in self.bufs]
        self.sizes = [BATCH_SIZE] * BATCH_KEYS
        self.tag = f"{os.getpid()}"
        self.calls = 0  # figure calls so far: keeps put keys of different calls apart
        self._figures = dict(zip(NAMES, (self._batch_get, self._batch_put, self._get_one, self._threads)))

    def close(self):
        self.s.close()

    def figure(self, name: str, d: float) -> float:
        f = self._figures.get(name)
        if f is None:
            raise BenchError(f"no figure {name!r}; the figures are {list(NAMES)}")
        self.calls += 1
        return f(d)

    def _batch_get(self, d):
        s = self.s

        def op(_):
            _check("batch_get_into", s.batch_get_into(self.keys, self.ptrs, self.sizes), BATCH_SIZE)
        return _timed(d, BATCH_KEYS * BATCH_SIZE, op)

    def _batch_put(self, d):
        s, prefix = self.s, f"pybench/pyput/{self.tag}/{self.calls}"

        def op(rnd):
            put = [f"{prefix}/{rnd}/{i}" for i in range(BATCH_KEYS)]
            _check("batch_put_from", s.batch_put_from(put, self.ptrs, self.sizes), 0)

        def cleanup():
            if s.remove_by_regex(f"^{prefix}/", True) != BATCH_KEYS:
                raise BenchError("removing a round's puts")
        return _timed(d, BATCH_KEYS * BATCH_SIZE, op, cleanup)

    def _get_one(self, d):
        s, one, k0 = self.s, _addr(self.small[0]), _small_key(0)

        def op(_):
            if s.get_into(k0, one, SMALL_SIZE) != SMALL_SIZE:
                raise BenchError("get_into 1 MiB failed")
        return _timed(d, SMALL_SIZE, op)

    def _threads(self, d):
        s = self.s
        counts = [0] * THREADS
        errors = []
        start = threading.Barrier(THREADS + 1)

        def worker(w):
            k, p = _small_key(w), _addr(self.small[w])
            if s.get_into(k, p, SMALL_SIZE) != SMALL_SIZE:  # warm-up, untimed
                errors.append(w)
            start.wait()
            deadline = time.perf_counter() + d
            while not errors and time.perf_counter() < deadline:
                if s.get_into(k, p, SMALL_SIZE) != SMALL_SIZE:
                    errors.append(w)
                    return
                counts[w] += 1
        ts = [threading.Thread(target=worker, args=(w,)) for w in range(THREADS)]
        for t in ts:
            t.start()
        start.wait()
        t0 = time.perf_counter()
        for t in ts:
            t.join()
        el = time.perf_counter() - t0
        if errors:
            raise BenchError(f"get_into 1 MiB failed in threads {errors}")
        return sum(counts) * SMALL_SIZE / el / 1e6


def run(master: str, d: float) -> dict:
    """Every figure once: {name: MB/s}."""
    b = Bench(master)
    try:
        return {name: b.figure(name, d) for name in NAMES}
    finally:
        b.close()


def serve(master: str, lines, out) -> None:
    """Measures figures on request: each line of lines is a JSON object
    {"figure": name, "seconds": d}; each answer, one line of out, is
    {"figure": name, "mbps": x} or {"error": text}. Setup is done once,
    before the first answer: a line {"ready": true}."""
    b = Bench(master)
    try:
        print(json.dumps({"ready": True}), file=out, flush=True)
        for line in lines:
            if not line.strip():
                continue
            try:
                req = json.loads(line)
                ans = {"figure": req["figure"], "mbps": b.figure(req["figure"], float(req["seconds"]))}
            except (BenchError, KeyError, TypeError, ValueError) as e:
                ans = {"error": f"{type(e).__name__}: {e}"}
            print(json.dumps(ans), file=out, flush=True)
    finally:
        b.close()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python3 -m tierstore.bench", description=__doc__.split("\n\n")[0])
    ap.add_argument("--master", required=True, help="master address host:port or etcd://...")
    ap.add_argument("--duration", type=float, default=3.0, help="seconds of timed work per figure")
    ap.add_argument("--json", action="store_true", help="print the figures as one JSON object")
    ap.add_argument("--serve", action="store_true",
                    help="measure figures on request, one JSON line in and out each (what `go run ./bench python` uses)")
    a = ap.parse_args(argv)
    try:
        if a.serve:
            serve(a.master, sys.stdin, sys.stdout)
            return 0
        out = run(a.master, a.duration)
    except BenchError as e:
        print(f"tierstore.bench: {e}", file=sys.stderr)
        return 1
    if a.json:
        print(json.dumps(out))
    else:
        for k in NAMES:
            print(f"{k:32s} {out[k]:10.1f} MB/s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
