"""MooncakeDistributedStore against real tierstore-master and tierstore-node processes (conftest.py).

Every test uses keys under a prefix of its own and removes them at the end,
so that the session's cluster (one node of 256 MiB) starts each test empty
of the others' objects.
"""

from __future__ import annotations

import json
import logging
import multiprocessing
import os
import random
import re
import select
import threading
import time

import numpy as np
import pytest

from conftest import Cluster, leader
from tierstore.mooncake import (BUFFER_OVERFLOW, INVALID_PARAMS, OBJECT_HAS_LEASE, OBJECT_NOT_FOUND,
                                MooncakeDistributedStore, ReplicateConfig, SoftPinAction)

MiB = 1 << 20
KiB = 1 << 10


def new_store(master, segment=0, buffer="256MB", **extra):
    s = MooncakeDistributedStore()
    cfg = {"local_hostname": "127.0.0.1", "metadata_server": "P2PHANDSHAKE", "global_segment_size": segment,
           "local_buffer_size": buffer, "protocol": "tcp", "device_name": "", "master_server_address": master}
    cfg.update(extra)
    assert s.setup(cfg) == 0
    return s


@pytest.fixture
def store(cluster, request):
    """A pure client (global_segment_size=0) on the session cluster; removes the test's keys after it."""
    s = new_store(cluster.master)
    s.prefix = request.node.name.replace("[", "_").replace("]", "") + "/"
    yield s
    if s.health_check() == 0:
        s.remove_by_regex("^" + re.escape(s.prefix), force=True)
    s.close()


def rand_bytes(n, seed):
    return np.random.default_rng(seed).integers(0, 256, n, dtype=np.uint8).tobytes()


def ptr(a: np.ndarray) -> int:
    return a.ctypes.data


def wait_until(pred, timeout=60.0, what="condition", interval=0.05):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


# ---- the basics -------------------------------------------------------------

def test_put_get_size_reput_remove_exist(store):
    k = store.prefix + "a"
    v = rand_bytes(100 * KiB, 1)
    assert store.is_exist(k) == 0
    assert store.get(k) == b""
    assert store.get_size(k) == OBJECT_NOT_FOUND
    assert store.put(k, v) == 0
    assert store.is_exist(k) == 1
    assert store.get_size(k) == len(v)
    assert store.get(k) == v
    # A put of an existing key returns 0 and writes nothing.
    assert store.put(k, b"other value") == 0
    assert store.get(k) == v and store.get_size(k) == len(v)
    # Inside the read lease the get took, a plain remove is refused; force removes.
    assert store.remove(k) in (0, OBJECT_HAS_LEASE)
    assert store.remove(k, force=True) in (0, OBJECT_NOT_FOUND)
    assert store.is_exist(k) == 0 and store.get(k) == b""
    assert store.remove(k) == OBJECT_NOT_FOUND
    # put_parts: one object from the parts; get_batch/put_batch.
    assert store.put_parts(store.prefix + "p", b"meta:", memoryview(v)[:10], bytearray(b"!")) == 0
    assert store.get(store.prefix + "p") == b"meta:" + v[:10] + b"!"
    keys = [store.prefix + f"b{i}" for i in range(5)]
    assert store.put_batch(keys, [bytes([i]) * (i + 1) for i in range(5)]) == 0
    assert store.get_batch(keys + [store.prefix + "missing"]) == [bytes([i]) * (i + 1) for i in range(5)] + [b""]
    assert store.batch_remove(keys + [store.prefix + "missing"], force=True) == [0] * 5 + [OBJECT_NOT_FOUND]
    assert store.batch_is_exist(keys) == [0] * 5


def test_lease_then_remove_without_force(store):
    k = store.prefix + "leased"
    assert store.put(k, b"x" * 1000) == 0
    assert store.get(k) == b"x" * 1000  # takes a read lease (default_kv_lease_ttl 5 s)
    assert store.remove(k) == OBJECT_HAS_LEASE
    assert store.is_exist(k) == 1
    assert store.remove(k, force=True) == 0


def test_put_from_get_into_too_small_buffer(store):
    k = store.prefix + "z"
    src = np.frombuffer(rand_bytes(64 * KiB, 2), dtype=np.uint8).copy()
    assert store.register_buffer(ptr(src), src.nbytes) == 0
    assert store.put_from(k, ptr(src), src.nbytes) == 0
    dst = np.zeros(64 * KiB, dtype=np.uint8)
    assert store.register_buffer(ptr(dst), dst.nbytes) == 0
    assert store.get_into(k, ptr(dst), dst.nbytes - 1) < 0      # one byte short: negative
    assert store.batch_get_into([k], [ptr(dst)], [dst.nbytes - 1])[0] < 0
    assert store.get_into(k, ptr(dst), dst.nbytes) == src.nbytes
    assert bytes(dst) == bytes(src)
    assert store.get_into(store.prefix + "none", ptr(dst), dst.nbytes) == OBJECT_NOT_FOUND
    assert store.get_into(k, 0, 10) == INVALID_PARAMS
    assert store.unregister_buffer(ptr(src)) == 0
    assert store.unregister_buffer(ptr(src)) == INVALID_PARAMS
    # get_buffer: a handle with ptr(), size() and the buffer protocol.
    h = store.get_buffer(k)
    assert h.size() == src.nbytes and h.ptr() != 0 and bytes(memoryview(h)) == bytes(src)
    assert store.get_buffer(store.prefix + "none") is None


def test_batch_mismatched_lengths_and_empty_lists(store):
    a = np.zeros(4096, dtype=np.uint8)
    p = ptr(a)
    ks = [store.prefix + "x", store.prefix + "y"]
    assert store.batch_put_from(ks, [p], [4096]) == [INVALID_PARAMS] * 2
    assert store.batch_put_from(ks, [p, p], [4096]) == [INVALID_PARAMS] * 2
    assert store.batch_get_into(ks, [p], [4096, 4096]) == [INVALID_PARAMS] * 2
    assert store.batch_put_from_multi_buffers(ks, [[p]], [[4096]]) == [INVALID_PARAMS] * 2
    assert store.batch_put_from_multi_buffers(ks, [[p], [p, p]], [[4096], [4096]]) == [INVALID_PARAMS] * 2
    assert store.batch_get_into_multi_buffers(ks, [[p], [p]], [[4096]]) == [INVALID_PARAMS] * 2
    assert store.put_batch(ks, [b"1"]) == INVALID_PARAMS
    assert store.batch_is_exist(ks) == [0, 0]  # nothing was stored by the refused calls
    for call, args in [(store.batch_put_from, ([], [], [])), (store.batch_get_into, ([], [], [])),
                       (store.batch_put_from_multi_buffers, ([], [], [])),
                       (store.batch_get_into_multi_buffers, ([], [], [])), (store.batch_is_exist, ([],)),
                       (store.batch_remove, ([],)), (store.get_batch, ([],)), (store.batch_get_buffer, ([],))]:
        assert call(*args) == [], call.__name__
    assert store.put_batch([], []) == 0
    assert store.batch_get_replica_desc([]) == {}


def test_local_buffer_size_zero_makes_plain_put_fail(cluster):
    s = new_store(cluster.master, buffer=0)
    try:
        k = "lbs0/k"
        assert s.put(k, b"abc") == BUFFER_OVERFLOW
        assert s.is_exist(k) == 0
        a = np.frombuffer(b"abc", dtype=np.uint8).copy()
        assert s.put_from(k, ptr(a), 3) == 0          # zero-copy calls need no staging buffer
        assert s.get(k) == b""                        # get stages: refused
        b = np.zeros(3, dtype=np.uint8)
        assert s.get_into(k, ptr(b), 3) == 3 and bytes(b) == b"abc"
        assert s.remove(k, force=True) == 0
    finally:
        s.close()


def test_replicate_config_checks(store):
    k = store.prefix + "rc"
    assert store.put(k, b"v", ReplicateConfig(soft_pin_ttl_ms=10)) == INVALID_PARAMS   # TTL without ENABLE
    assert store.put(k, b"v", ReplicateConfig(replica_num=2, preferred_segments=["a:1"])) == INVALID_PARAMS
    assert store.put(k, b"v", ReplicateConfig(replica_num=0)) == INVALID_PARAMS
    assert store.is_exist(k) == 0
    rc = ReplicateConfig(soft_pin_action=SoftPinAction.ENABLE, soft_pin_ttl_ms=1000, with_hard_pin=False)
    assert store.put(k, b"v", rc) == 0
    # One node in the cluster: two replicas cannot be placed (-200), and nothing is stored.
    assert store.put(k + "2", b"v", ReplicateConfig(replica_num=2)) == -200
    assert store.is_exist(k + "2") == 0
    with pytest.raises(TypeError):
        store.put(k, b"v", config="not a config")


def test_hostname_health_replicas(store, cluster):
    assert store.health_check() == 0
    assert store.get_hostname()
    k = store.prefix + "r"
    assert store.put(k, b"q" * 100) == 0
    d = store.get_replica_desc(k)
    assert len(d) >= 1 and d[0].is_memory_replica() and not d[0].is_disk_replica()
    assert d[0].node == cluster.nodes[0]
    m = store.batch_get_replica_desc([k, store.prefix + "none"])
    assert len(m[k]) >= 1 and m[store.prefix + "none"] == []


# ---- a store node in this process: close, then setup again ------------------

def test_close_then_setup_again(cluster):
    s = new_store(cluster.master, segment=32 * MiB)
    other = new_store(cluster.master)
    try:
        host = s.get_hostname()
        assert host.startswith("127.0.0.1:") and host not in cluster.nodes
        keys = [f"reopen/{i}" for i in range(4)]
        for i, k in enumerate(keys):
            assert s.put(k, rand_bytes(256 * KiB, i), ReplicateConfig(prefer_alloc_in_same_node=True)) == 0
            assert [r.node for r in s.get_replica_desc(k)] == [host]
        assert other.batch_is_exist(keys) == [1] * 4
        # preferred_segment names a node by its "host:port": a pure client's put goes there (not to the
        # cluster's node, which has the most room).
        assert other.put("reopen/there", b"t" * 1000, ReplicateConfig(preferred_segment=host)) == 0
        assert [r.node for r in other.get_replica_desc("reopen/there")] == [host]
        assert other.remove("reopen/there", force=True) == 0
        assert s.close() == 0
        assert s.health_check() == 1 and s.get(keys[0]) == b""
        # Its objects left the pool with its segment.
        wait_until(lambda: other.batch_is_exist(keys) == [0] * 4, what="the closed segment's objects to leave")
        assert other.get(keys[0]) == b""
        # setup again: a new segment, the store works.
        assert s.setup("127.0.0.1", "P2PHANDSHAKE", 32 * MiB, 64 * MiB, "tcp", "", cluster.master) == 0
        assert s.health_check() == 0
        assert s.is_exist(keys[0]) == 0
        assert s.put(keys[0], b"again") == 0 and other.get(keys[0]) == b"again"
        assert s.remove(keys[0], force=True) == 0
    finally:
        s.close()
        other.close()


# ---- the vLLM layout: one block gathered from 64 layer buffers --------------

def test_vllm_layout_multi_buffers(store):
    layers, blocks, block = 64, 8, 32 * KiB
    rng = np.random.default_rng(7)
    kv = [rng.integers(0, 256, blocks * block, dtype=np.uint8) for _ in range(layers)]  # one buffer per layer
    for a in kv:
        assert store.register_buffer(ptr(a), a.nbytes) == 0
    keys = [f"{store.prefix}m@tp_rank:0@pcp0@dcp0@pp_rank:0@group:0@{i:064x}" for i in range(blocks)]
    ptrs = [[ptr(kv[layer]) + b * block for layer in range(layers)] for b in range(blocks)]
    sizes = [[block] * layers for _ in range(blocks)]
    want = [b"".join(bytes(kv[layer][b * block:(b + 1) * block]) for layer in range(layers)) for b in range(blocks)]
    assert store.batch_is_exist(keys) == [0] * blocks
    assert store.batch_put_from_multi_buffers(keys, ptrs, sizes, ReplicateConfig()) == [0] * blocks
    assert store.batch_is_exist(keys) == [1] * blocks
    assert store.get_size(keys[0]) == layers * block
    assert store.get(keys[3]) == want[3]  # one object: the concatenation of the layers' pieces
    for a in kv:
        a[:] = 0
    assert store.batch_get_into_multi_buffers(keys, ptrs, sizes) == [layers * block] * blocks
    for b in range(blocks):
        assert b"".join(bytes(kv[layer][b * block:(b + 1) * block]) for layer in range(layers)) == want[b]
    # Too small a scatter list is negative for its key only.
    short = [s[:] for s in sizes]
    short[1] = short[1][:-1] + [block - 1]
    res = store.batch_get_into_multi_buffers(keys[:2], ptrs[:2], short[:2])
    assert res[0] == layers * block and res[1] < 0


# ---- concurrency --------------------------------------------------------------

def test_threads_put_get_1mib(store):
    threads, per = 8, 100
    base = rand_bytes(MiB + threads * per, 11)
    errors = []

    def work(t):
        try:
            for i in range(per):
                k = f"{store.prefix}{t}/{i}"
                v = base[t * per + i: t * per + i + MiB]
                r = store.put(k, v)
                if r != 0:
                    errors.append((k, "put", r))
                    continue
                if store.get(k) != v:
                    errors.append((k, "get"))
                r = store.remove(k, force=True)
                if r != 0:
                    errors.append((k, "remove", r))
        except Exception as e:  # noqa: BLE001
            errors.append(("exception", repr(e)))

    ts = [threading.Thread(target=work, args=(t,)) for t in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(600)
    assert not any(t.is_alive() for t in ts)
    assert errors == []


# ---- randomised against a dict ------------------------------------------------

def test_random_ops_against_dict(store):
    rng = random.Random(20)
    pool = np.random.default_rng(20).integers(0, 256, 64 * MiB + MiB, dtype=np.uint8).tobytes()
    pool_mv = memoryview(pool)
    model = {}          # key -> (offset, size) into pool
    live = 0
    budget = 96 * MiB   # well under the node's 256 MiB: eviction never runs, so a miss is a bug
    keys = [f"{store.prefix}{i}" for i in range(40)]
    tolerated = {-200, OBJECT_HAS_LEASE}
    seen = {"put": 0, "get": 0, "remove": 0, "tolerated": 0}

    def value(off, n):
        return pool_mv[off:off + n]

    for step in range(1000):
        k = rng.choice(keys)
        op = rng.choices(["put", "get", "remove"], [4, 4, 2])[0]
        seen[op] += 1
        if op == "put":
            n = int(2 ** rng.uniform(0, 26))          # 1 B .. 64 MiB, log-uniform
            off = rng.randrange(0, MiB)
            while live + n > budget and model:        # make room: remove objects the model holds
                victim = rng.choice(sorted(model))
                r = store.remove(victim, force=True)
                assert r == 0, (step, victim, r)
                live -= model.pop(victim)[1]
            r = store.put(k, value(off, n))
            if r in tolerated:
                seen["tolerated"] += 1
                continue
            assert r == 0, (step, "put", k, r)
            if k not in model:                        # a re-put writes nothing
                model[k] = (off, n)
                live += n
        elif op == "get":
            got = store.get(k)
            if k in model:
                off, n = model[k]
                assert len(got) == n and got == value(off, n), (step, "get", k)
                assert store.get_size(k) == n
            else:
                assert got == b"", (step, "get of an absent key", k)
                assert store.is_exist(k) == 0
        else:
            r = store.remove(k)
            if r in tolerated:
                seen["tolerated"] += 1
                assert store.is_exist(k) == 1
                continue
            if k in model:
                assert r == 0, (step, "remove", k, r)
                live -= model.pop(k)[1]
            else:
                assert r == OBJECT_NOT_FOUND, (step, "remove of an absent key", k, r)
    assert sorted(k for k, e in zip(keys, store.batch_is_exist(keys)) if e == 1) == sorted(model)
    assert seen["put"] > 300 and seen["remove"] > 100


# ---- SSD: evicted from DRAM, read back from SSD --------------------------------

def test_evicted_objects_read_back_from_ssd(store, cluster):
    keys = [f"{store.prefix}{i}" for i in range(6)]
    vals = [rand_bytes((i + 1) * 300 * KiB + i, 100 + i) for i in range(6)]
    for k, v in zip(keys, vals):
        assert store.put(k, v) == 0

    def on_ssd():
        d = store.batch_get_replica_desc(keys)
        return all(any(r.is_disk_replica() for r in d[k]) for k in keys)

    wait_until(on_ssd, 120, "every object to have an SSD replica")

    def evicted():
        # The lookups above leased the DRAM copies: evict skips those until the lease ends (5 s).
        r = cluster.cli("evict", "--tier", "dram", *keys)
        assert r.returncode == 0, r.stderr + r.stdout
        d = store.batch_get_replica_desc(keys)
        return all(d[k] and all(x.is_disk_replica() and not x.is_memory_replica() for x in d[k]) for k in keys)

    wait_until(evicted, 60, "every DRAM replica to be dropped", interval=0.5)
    assert store.get_batch(keys) == vals
    dst = [np.zeros(len(v), dtype=np.uint8) for v in vals]
    assert store.batch_get_into(keys, [ptr(a) for a in dst], [a.nbytes for a in dst]) == [len(v) for v in vals]
    assert [bytes(a) for a in dst] == vals


# ---- etcd:// across a leader kill ---------------------------------------------

def test_etcd_master_across_leader_kill(ha_cluster):
    first = leader(ha_cluster)
    s = new_store(ha_cluster.master)
    try:
        keys = [f"ha/{i}" for i in range(8)]
        vals = [rand_bytes(64 * KiB, 200 + i) for i in range(8)]
        for k, v in zip(keys, vals):
            assert s.put(k, v) == 0
        first.kill()
        first.p.wait(10)
        # Every call follows the new leader within its deadline: nothing is lost.
        assert s.get_batch(keys) == vals
        assert s.put("ha/after", b"after the failover") == 0
        assert s.get("ha/after") == b"after the failover"
        assert leader(ha_cluster) is not first
        assert s.health_check() == 0
    finally:
        s.close()


# ---- processes: spawn works, fork fails at once with a clear error ----------------

def _spawned_child(master, key, q):
    from tierstore.mooncake import MooncakeDistributedStore as Store
    s = Store()
    r = s.setup({"master_server_address": master, "global_segment_size": 0, "local_buffer_size": "1MB"})
    q.put((r, s.get(key), s.put(key + "/child", b"from the child"), s.close()))


def test_spawned_child_process(store, cluster):
    k = store.prefix + "parent"
    assert store.put(k, b"from the parent") == 0
    ctx = multiprocessing.get_context("spawn")
    q = ctx.Queue()
    p = ctx.Process(target=_spawned_child, args=(cluster.master, k, q))
    p.start()
    try:
        res = q.get(timeout=120)
    finally:
        p.join(30)
        if p.is_alive():
            p.kill()
    assert res == (0, b"from the parent", 0, 0)
    assert p.exitcode == 0
    assert store.get(k + "/child") == b"from the child"


def test_forked_child_gets_clear_error(store):
    k = store.prefix + "f"
    assert store.put(k, b"v") == 0
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: every call fails at once, with a message saying why
        try:
            msgs = []

            class H(logging.Handler):
                def emit(self, rec):
                    msgs.append(rec.getMessage())
            logging.getLogger("tierstore.mooncake").addHandler(H())
            out = {"put": store.put(k + "2", b"v"), "get": len(store.get(k)), "exist": store.is_exist(k),
                   "msgs": msgs}
            os.write(w, json.dumps(out).encode())
        finally:
            os._exit(0)
    os.close(w)
    try:
        ready, _, _ = select.select([r], [], [], 60)
        assert ready, "the forked child hung"
        data = b""
        while chunk := os.read(r, 65536):
            data += chunk
    finally:
        os.close(r)
        os.waitpid(pid, 0)
    out = json.loads(data)
    assert out["put"] < 0 and out["get"] == 0 and out["exist"] == -1
    assert any("fork" in m and "spawn" in m for m in out["msgs"]), out["msgs"]
    assert store.is_exist(k + "2") == 0 and store.get(k) == b"v"  # the parent is unaffected


# ---- configuration without arguments, against the cluster ----------------------

def test_setup_from_config_file_and_env(cluster, tmp_path, monkeypatch):
    p = tmp_path / "mooncake.json"
    p.write_text(json.dumps({"local_hostname": "127.0.0.1", "metadata_server": "P2PHANDSHAKE",
                             "master_server_address": cluster.master, "global_segment_size": 0,
                             "local_buffer_size": "1MB", "protocol": "tcp", "device_name": "", "mode": "embedded"}))
    monkeypatch.setenv("MOONCAKE_CONFIG_PATH", str(p))
    s = MooncakeDistributedStore()
    assert s.setup() == 0
    try:
        assert s.put("cfgfile/k", b"from the file's store") == 0
        assert s.put("cfgfile/big", b"x" * (MiB + 1)) == BUFFER_OVERFLOW   # local_buffer_size "1MB" applies
    finally:
        s.close()
    monkeypatch.delenv("MOONCAKE_CONFIG_PATH")
    monkeypatch.setenv("MOONCAKE_MASTER", cluster.master)
    monkeypatch.setenv("MOONCAKE_GLOBAL_SEGMENT_SIZE", "0")
    monkeypatch.setenv("MOONCAKE_PROTOCOL", "tcp")
    s = MooncakeDistributedStore()
    assert s.setup() == 0
    try:
        assert s.get("cfgfile/k") == b"from the file's store"
        assert s.remove("cfgfile/k", force=True) == 0
    finally:
        s.close()


def test_torch_cpu_tensors_by_data_ptr(store):
    torch = pytest.importorskip("torch")
    t = torch.arange(4096, dtype=torch.int32)
    n = t.numel() * t.element_size()
    assert store.register_buffer(t.data_ptr(), n) == 0
    assert store.put_from(store.prefix + "t", t.data_ptr(), n) == 0
    u = torch.zeros_like(t)
    assert store.get_into(store.prefix + "t", u.data_ptr(), n) == n
    assert torch.equal(t, u)


def test_is_exist_is_a_miss_once_the_owning_process_closed(binaries, tmp_path):
    """An object whose only replica was in a store process that closed is a
    miss (0) for is_exist and batch_is_exist, not an error (-1), even while a
    read lease taken before the close lasts (the master then answers
    REPLICA_IS_GONE): LMCache tests is_exist as a bool, vLLM and SGLang
    count anything but 1 as a miss and put the block again."""
    c = Cluster(binaries, str(tmp_path))
    try:
        _, master = c.start_master("--default_kv_lease_ttl=600s")  # the lease outlives the test
        c.start_node(master, "64MiB", False)
        owner = new_store(master, segment=32 * MiB, buffer=16 * MiB)
        reader = new_store(master, buffer=16 * MiB)
        k = "gone-owner/" + os.urandom(8).hex()
        assert owner.put(k, b"v" * 4096) == 0
        assert [r["node"] for r in owner._c().replicas(k)] == [owner.get_hostname()]  # only in the owner
        assert reader.is_exist(k) == 1  # takes the read lease
        owner.close()
        assert reader.is_exist(k) == 0
        assert reader.batch_is_exist([k, k + "-never"]) == [0, 0]
        assert reader.get(k) == b""
        assert reader.put(k, b"w" * 4096) == 0  # the connector puts the block again
        reader.close()
    finally:
        c.stop()
