"""tierstore.Client with a store node in this process, across processes:
the in-process node serves other processes, close unmounts it, spawned
children work, forked children fail at once."""

import multiprocessing
import os
import subprocess
import sys
import time
import uuid

import pytest

import tierstore
from conftest import PYDIR

PROBE_TIMEOUT = 120  # seconds for a helper process (2 loaded cores)


def key(prefix):
    return "%s-%s" % (prefix, uuid.uuid4().hex)


def other_process(master, code):
    """Runs code in a separate Python process with a pure Client c; returns its stdout."""
    prog = "import sys, tierstore\nc = tierstore.Client(master=%r)\n%s\nc.close()\n" % (master, code)
    r = subprocess.run([sys.executable, "-c", prog], capture_output=True, text=True, timeout=PROBE_TIMEOUT,
                       env=dict(os.environ, PYTHONPATH=PYDIR))
    assert r.returncode == 0, r.stderr
    return r.stdout


def wait_until(pred, timeout, what, interval=0.2):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return
        time.sleep(interval)
    raise AssertionError("timed out after %ss waiting for %s" % (timeout, what))


def test_in_process_node_serves_other_processes_and_leaves_at_close(cluster):
    c = tierstore.Client(master=cluster.master, segment_size=64 << 20)
    try:
        host = c.hostname
        assert host.startswith("127.0.0.1:") and int(host.split(":")[1]) > 0
        k = key("inproc")
        v = os.urandom(3 << 20)
        c.put(k, v, preferred_node=None)
        reps = c.replicas(k)
        assert [r["node"] for r in reps] == [host], reps  # placed on this process's segment
        assert c.get(k) == v
        assert c.stats()["reads"]["LocalDRAM"] >= 1  # read without a socket
        # Another process, a pure client, reads it through this process's listener.
        out = other_process(cluster.master, "import hashlib\nprint(hashlib.sha256(c.get(%r)).hexdigest())" % k)
        import hashlib
        assert out.strip() == hashlib.sha256(v).hexdigest()
    finally:
        c.close()
    # Its objects left the pool with it: absent, or REPLICA_IS_GONE while
    # the read lease the reads above took lasts (the object existed).
    probe = ("try:\n    print(c.exists(%r))\nexcept tierstore.Error as e:\n    print(e.name)\n"
             "try:\n    c.get(%r)\nexcept tierstore.Error as e:\n    print(e.name)\n") % (k, k)
    gone = other_process(cluster.master, probe).split()
    assert gone[0] in ("False", "REPLICA_IS_GONE") and gone[1] in ("OBJECT_NOT_FOUND", "REPLICA_IS_GONE"), gone
    # A new open in the same process works, with a new node.
    c2 = tierstore.Client(master=cluster.master, segment_size=32 << 20)
    try:
        with pytest.raises(tierstore.Error) as e:
            c2.get(k)
        assert e.value.name in ("OBJECT_NOT_FOUND", "REPLICA_IS_GONE")
        k2 = key("inproc2")
        c2.put(k2, b"x" * 100000)
        assert c2.replicas(k2)[0]["node"] == c2.hostname
        assert other_process(cluster.master, "print(len(c.get(%r)))" % k2).strip() == "100000"
    finally:
        c2.close()


def test_in_process_node_ssd_tier(cluster, tmp_path):
    """Objects of the in-process node, offloaded to its SSD tier and evicted
    from DRAM, read back byte-identical (here and from another process)."""
    ssd = tmp_path / "ssd"
    ssd.mkdir()
    c = tierstore.Client(master=cluster.master, segment_size=32 << 20, ssd_dir=str(ssd), ssd_capacity=256 << 20)
    try:
        keys = [key("ssd%d" % i) for i in range(4)]
        vals = [os.urandom((i + 1) * 300 * 1024 + i) for i in range(4)]
        for k, v in zip(keys, vals):
            c.put(k, v)

        def on_ssd():
            return all(any(r["tier"] == "ssd" for r in c.replicas(k)) for k in keys)

        wait_until(on_ssd, 120, "an SSD replica of every object")

        def evicted():
            r = cluster.cli("evict", "--tier", "dram", *keys)
            assert r.returncode == 0, r.stderr + r.stdout
            return all(all(x["tier"] == "ssd" for x in c.replicas(k)) for k in keys)

        wait_until(evicted, 60, "every DRAM replica to be dropped", interval=0.5)
        assert [c.get(k) for k in keys] == vals
        bufs = [bytearray(len(v)) for v in vals]
        assert c.batch_get_into(keys, bufs) == [len(v) for v in vals]
        assert [bytes(b) for b in bufs] == vals
        assert c.stats()["reads"]["LocalSSD"] >= 8
        out = other_process(cluster.master, "print(c.get(%r).hex())" % keys[0])
        assert bytes.fromhex(out.strip()) == vals[0]
    finally:
        c.close()
    # The node left the master at close: its SSD objects are no longer
    # listed at once (absent, or REPLICA_IS_GONE inside the read leases the
    # reads above took), not client_ttl (10 s) later.
    probe = ("for k in %r:\n    try:\n        print(c.exists(k))\n    except tierstore.Error as e:\n"
             "        print(e.name)\n") % (keys,)
    gone = other_process(cluster.master, probe).split()
    assert len(gone) == len(keys) and all(g in ("False", "REPLICA_IS_GONE") for g in gone), gone


def _spawned(master, k, q):
    import tierstore as ts
    c = ts.Client(master=master)
    try:
        q.put(c.get(k))
    finally:
        c.close()


def test_spawned_child_works(cluster):
    c = tierstore.Client(master=cluster.master)
    try:
        k = key("spawn")
        c.put(k, b"from the parent")
        ctx = multiprocessing.get_context("spawn")
        q = ctx.Queue()
        p = ctx.Process(target=_spawned, args=(cluster.master, k, q))
        p.start()
        try:
            assert q.get(timeout=PROBE_TIMEOUT) == b"from the parent"
        finally:
            p.join(PROBE_TIMEOUT)
            if p.is_alive():
                p.kill()
        assert p.exitcode == 0
    finally:
        c.close()


def test_forked_child_gets_clear_error(cluster):
    c = tierstore.Client(master=cluster.master)
    try:
        k = key("fork")
        c.put(k, b"v")
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: every call must fail at once, never hang
            os.close(r)
            msg = b"no error"
            try:
                c.get(k)
            except tierstore.Error as e:
                msg = str(e).encode()
            try:
                tierstore.Client(master=cluster.master)
            except tierstore.Error as e:
                msg += b"\n" + str(e).encode()
            os.write(w, msg)
            os._exit(0)
        os.close(w)
        deadline = time.monotonic() + PROBE_TIMEOUT
        while True:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                break
            if time.monotonic() > deadline:
                os.kill(pid, 9)
                os.waitpid(pid, 0)
                pytest.fail("the forked child hung")
            time.sleep(0.05)
        with os.fdopen(r, "rb") as f:
            msg = f.read().decode()
        assert os.WEXITSTATUS(status) == 0
        lines = msg.split("\n")
        assert len(lines) == 2, msg
        for line in lines:
            assert "fork()" in line and '"spawn"' in line, msg
        # The parent is unaffected.
        assert c.get(k) == b"v"
    finally:
        c.close()
