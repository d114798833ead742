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
c.close()
direct, queued, _ = _native.call_counts()
print(json.dumps({"direct": direct, "queued": queued, "bad": bad}))
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


def test_queue_mode_queues_every_data_call(cluster):
    out, _ = run_workload(cluster.master, "queue", threads=8)
    assert out["bad"] == []
    assert out["direct"] == 0
    assert out["queued"] == 8 * 6 * CALLS_PER_ROUND


def test_direct_mode_never_queues(cluster):
    out, _ = run_workload(cluster.master, "direct", threads=8)
    assert out["bad"] == []
    assert out["queued"] == 0
    assert out["direct"] == 8 * 6 * CALLS_PER_ROUND


def test_auto_mode_one_caller_runs_directly(cluster):
    out, _ = run_workload(cluster.master, None, threads=1)
    assert out["bad"] == []
    assert (out["direct"], out["queued"]) == (6 * CALLS_PER_ROUND, 0)


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
    assert out["direct"] == CALLS_PER_ROUND


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


# get_into calls of one client queued at the same moment run as one batch
# read (queue.go, runCoalesced). The dispatcher's wake is held back until
# all ten calls are queued, so that one take finds them all: nine on one
# client (five objects, one of them twice into two buffers, one into a
# buffer too small, one missing key) and one on a second client, which runs
# on its own. Each caller gets its own answer: its bytes, or its own error.
COALESCE = r'''
import ctypes, json, os, sys, threading, time, uuid
import tierstore
from tierstore import _native
lib = _native.lib
lib.tsq_test_hold.argtypes = [ctypes.c_int]
lib.tsq_test_hold.restype = ctypes.c_int64
c, c2 = tierstore.Client(master=sys.argv[1]), tierstore.Client(master=sys.argv[1])
run = uuid.uuid4().hex
keys = ["cq-co-%s-%d" % (run, i) for i in range(5)]
vals = [os.urandom(100000 + 777 * i) for i in range(5)]
assert c.batch_put(keys, vals) == [None] * 5
calls = [(c, keys[i], len(vals[i])) for i in range(5)] + [
    (c, keys[0], len(vals[0])),        # the same key again, another buffer
    (c, keys[1], 10),                  # too small
    (c, keys[2] + "-missing", 10),     # missing
    (c, keys[3], len(vals[3]) + 5000), # larger than needed
    (c2, keys[4], len(vals[4])),       # another client
]
out = [None] * len(calls)
bufs = [bytearray(n) for _, _, n in calls]

def call(i):
    cl, k, _ = calls[i]
    try:
        out[i] = cl.get_into(k, bufs[i])
    except tierstore.Error as e:
        out[i] = [e.name, str(e)]

before = _native.call_counts()
lib.tsq_test_hold(1)
ts = [threading.Thread(target=call, args=(i,)) for i in range(len(calls))]
for t in ts:
    t.start()
deadline = time.monotonic() + 60
while lib.tsq_test_hold(1) < len(calls) and time.monotonic() < deadline:
    time.sleep(0.001)
queued = lib.tsq_test_hold(0)
for t in ts:
    t.join(60)
after = _native.call_counts()
want = [len(vals[i]) for i in range(5)] + [len(vals[0]), "INVALID_PARAMS", "OBJECT_NOT_FOUND", len(vals[3]), len(vals[4])]
bad = []
for i, w in enumerate(want):
    got = out[i][0] if isinstance(out[i], list) else out[i]
    if got != w:
        bad.append("call %d: got %r, want %r" % (i, out[i], w))
    elif isinstance(w, int):
        v = vals[[0, 1, 2, 3, 4, 0, 1, 2, 3, 4][i]]
        if bytes(bufs[i][:w]) != v:
            bad.append("call %d: wrong bytes" % i)
if "10" not in out[6][1]:
    bad.append("too-small error does not name the size: %s" % out[6][1])
c.close()
c2.close()
print(json.dumps({"queued": queued, "alive": sum(t.is_alive() for t in ts), "bad": bad,
                  "coalesced": after[2] - before[2], "queued_calls": after[1] - before[1]}))
'''


def test_queued_get_into_calls_coalesce(cluster):
    env = dict(os.environ, PYTHONPATH=PYDIR, TIERSTORE_CALLS="queue")
    r = subprocess.run([sys.executable, "-c", COALESCE, cluster.master], capture_output=True, text=True,
                       timeout=PROBE_TIMEOUT, env=env)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["bad"] == [] and out["alive"] == 0
    assert out["queued"] == 10
    # The nine calls on the first client ran as one batch; the second
    # client's call ran alone.
    assert out["coalesced"] == 9
    assert out["queued_calls"] == 10
