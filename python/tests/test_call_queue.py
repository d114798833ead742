"""The library's call queue (python/capi/queue.c): data calls made while
another is in flight run on goroutines while the caller waits in C. Each
test runs a separate Python process, since TIERSTORE_CALLS is read when the
library loads; every call's bytes and errors are checked in each mode."""

import json
import os
import subprocess
import sys

import pytest

from conftest import PYDIR

PROBE_TIMEOUT = 180  # seconds for a helper process (2 loaded cores)

# Eight threads, each putting and reading back its own objects through
# every queued call (put, put_parts, batch_put, batch_put_parts, get_into,
# get_into_parts, batch_get_into, batch_get_into_parts) and the errors of
# two of them; prints the counts of direct and queued calls and every
# mismatch.
WORKLOAD = r'''
import json, os, sys, threading, uuid
import tierstore
from tierstore import _native
c = tierstore.Client(master=sys.argv[1])
threads, rounds = int(sys.argv[2]), int(sys.argv[3])
run = uuid.uuid4().hex
bad = []
start = threading.Barrier(threads)

def check(what, got, want):
    if got != want:
        bad.append("%s: got %r, want %r" % (what, got if len(repr(got)) < 80 else repr(got)[:80], want))

def worker(w):
    start.wait()
    for r in range(rounds):
        k = "cq-%s-%d-%d-" % (run, w, r)
        v = [os.urandom(1000 + 4097 * j + w) for j in range(4)]
        c.put(k + "a", v[0])
        c.put_parts(k + "b", [v[1][:100], v[1][100:]])
        check("batch_put", c.batch_put([k + "c", k + "d"], [v[2], v[3]]), [None, None])
        check("batch_put_parts", c.batch_put_parts([k + "e"], [[v[0][:10], v[0][10:]]]), [None])
        e1, e2 = bytearray(10), bytearray(len(v[0]) - 10)
        check("batch_get_into_parts", c.batch_get_into_parts([k + "e"], [[e1, e2]]), [len(v[0])])
        check("batch_get_into_parts bytes", bytes(e1 + e2), v[0])
        check("get", c.get(k + "a"), v[0])
        check("exists", (c.exists(k + "a"), c.exists(k + "missing")), (True, False))
        check("batch_exists", c.batch_exists([k + "b", k + "missing"]), [True, False])
        b = bytearray(len(v[0]))
        check("get_into", c.get_into(k + "a", b), len(v[0]))
        check("get_into bytes", bytes(b), v[0])
        p1, p2 = bytearray(100), bytearray(len(v[1]) - 100)
        check("get_into_parts", c.get_into_parts(k + "b", [p1, p2]), len(v[1]))
        check("get_into_parts bytes", bytes(p1 + p2), v[1])
        bs = [bytearray(len(v[2])), bytearray(len(v[3])), bytearray(10)]
        got = c.batch_get_into([k + "c", k + "d", k + "missing"], bs)
        check("batch_get_into", got[:2], [len(v[2]), len(v[3])])
        check("batch_get_into missing", getattr(got[2], "name", got[2]), "OBJECT_NOT_FOUND")
        check("batch_get_into bytes", [bytes(bs[0]), bytes(bs[1])], [v[2], v[3]])
        try:
            c.get_into(k + "missing", bytearray(10))
            bad.append("get_into of a missing key succeeded")
        except tierstore.Error as e:
            check("get_into missing", e.name, "OBJECT_NOT_FOUND")
        try:
            c.get_into(k + "a", bytearray(10))
            bad.append("get_into into a too-small buffer succeeded")
        except tierstore.Error as e:
            check("get_into small", e.name, "INVALID_PARAMS")
            if "10" not in str(e):
                bad.append("too-small buffer error does not name the size: %s" % e)

ts = [threading.Thread(target=worker, args=(w,)) for w in range(threads)]
for t in ts:
    t.start()
for t in ts:
    t.join()
own = c.stats()["reads"]["OwnConns"]
c.close()
direct, queued = _native.call_counts()
print(json.dumps({"direct": direct, "queued": queued, "bad": bad, "own": own}))
'''


def run_workload(master, mode, threads, rounds=6):
    env = dict(os.environ, PYTHONPATH=PYDIR)
    env.pop("TIERSTORE_CALLS", None)
    if mode is not None:
        env["TIERSTORE_CALLS"] = mode
    r = subprocess.run([sys.executable, "-c", WORKLOAD, master, str(threads), str(rounds)], capture_output=True,
                       text=True, timeout=PROBE_TIMEOUT, env=env)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout.strip().splitlines()[-1])
    return out, r.stderr


# Calls per worker round that go through the queue's entry points: put,
# put_parts, batch_put, batch_put_parts, batch_get_into_parts, get,
# exists x2, batch_exists, get_into x3, get_into_parts, batch_get_into.
CALLS_PER_ROUND = 14
# Of those, the single puts (put, put_parts), which mode auto queues even
# with no other call in flight.
PUTS_PER_ROUND = 2


def test_queue_mode_queues_every_data_call(cluster):
    out, _ = run_workload(cluster.master, "queue", threads=8)
    assert out["bad"] == []
    assert out["direct"] == 0
    assert out["queued"] == 8 * 6 * CALLS_PER_ROUND
    # Queued calls run on goroutines: their single gets and puts read their
    # own replies over connections of their own (wire.WithCallerReads), at
    # most wire.OwnBusy (8) in use at once, kept for the next.
    assert 1 <= out["own"] <= 8


def test_direct_mode_never_queues(cluster):
    out, _ = run_workload(cluster.master, "direct", threads=8)
    assert out["bad"] == []
    assert out["queued"] == 0
    assert out["direct"] == 8 * 6 * CALLS_PER_ROUND


def test_auto_mode_one_caller_runs_directly_but_puts(cluster):
    out, _ = run_workload(cluster.master, None, threads=1)
    assert out["bad"] == []
    assert (out["direct"], out["queued"]) == (6 * (CALLS_PER_ROUND - PUTS_PER_ROUND), 6 * PUTS_PER_ROUND)
    # A direct call reads its reply on its own thread over a connection of
    # its own (docs/python.md, Threads), kept for the next call: one caller,
    # one node, one connection.
    assert out["own"] == 1


def test_auto_mode_concurrent_callers_queue(cluster):
    out, _ = run_workload(cluster.master, "auto", threads=8, rounds=10)
    assert out["bad"] == []
    assert out["direct"] + out["queued"] == 8 * 10 * CALLS_PER_ROUND
    # Eight threads calling at once: most calls find another in flight.
    assert out["queued"] > 0


@pytest.mark.parametrize("value", ["fast", "QUEUE"])
def test_bad_mode_is_named_and_auto(cluster, value):
    out, err = run_workload(cluster.master, value, threads=1, rounds=1)
    assert out["bad"] == []
    assert "TIERSTORE_CALLS" in err and value in err
    assert out["direct"] == CALLS_PER_ROUND - PUTS_PER_ROUND


# Eight threads read in a loop through the queue while the main thread
# closes the client once each has read 20 times: every call either reads
# the object or fails with "client is closed" (INVALID_PARAMS); none hangs,
# none reads wrong bytes, and the process exits cleanly.
CLOSE_RACE = r'''
import json, os, sys, threading, uuid
import tierstore
c = tierstore.Client(master=sys.argv[1])
k = "cq-close-" + uuid.uuid4().hex
v = os.urandom(1 << 20)
c.put(k, v)
threads = 8
cond = threading.Condition()
reads = [0] * threads
ends, bad = [], []

def worker(w):
    b = bytearray(len(v))
    while True:
        try:
            n = c.get_into(k, b)
        except tierstore.Error as e:
            ends.append(e.name if "closed" in str(e) else "unexpected: %s" % e)
            return
        if n != len(v) or b != v:
            bad.append(w)
        with cond:
            reads[w] += 1
            cond.notify_all()

ts = [threading.Thread(target=worker, args=(w,)) for w in range(threads)]
for t in ts:
    t.start()
with cond:
    if not cond.wait_for(lambda: min(reads) >= 20, timeout=120):
        bad.append("threads did not read 20 times each")
c.close()
for t in ts:
    t.join(60)
print(json.dumps({"alive": sum(t.is_alive() for t in ts), "ends": ends, "bad": bad, "reads": sum(reads)}))
'''


def test_close_under_queued_calls(cluster):
    env = dict(os.environ, PYTHONPATH=PYDIR, TIERSTORE_CALLS="queue")
    r = subprocess.run([sys.executable, "-c", CLOSE_RACE, cluster.master], capture_output=True, text=True,
                       timeout=PROBE_TIMEOUT, env=env)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["bad"] == [] and out["alive"] == 0
    assert out["ends"] == ["INVALID_PARAMS"] * 8, out["ends"]
    assert out["reads"] >= 160
