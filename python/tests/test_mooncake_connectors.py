"""Each connector's call sequence, as its public source makes it, through the `mooncake.store` shim.

vLLM MooncakeStoreConnector, vLLM-Ascend AscendStoreConnector (backend
mooncake), SGLang HiCache MooncakeStore and LMCache mooncakestore://, each
against the session's real master and node (conftest.py).
"""

from __future__ import annotations

import importlib
import os
import sys
import time

import numpy as np
import pytest

SHIM = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "shim")

MiB = 1 << 20
KiB = 1 << 10


@pytest.fixture
def mc(monkeypatch):
    """The module `from mooncake.store import ...` gives with python/shim on the path."""
    monkeypatch.syspath_prepend(SHIM)
    for name in ("mooncake", "mooncake.store"):
        sys.modules.pop(name, None)
    mod = importlib.import_module("mooncake.store")
    import tierstore.mooncake
    assert mod.MooncakeDistributedStore is tierstore.mooncake.MooncakeDistributedStore
    yield mod
    for name in ("mooncake", "mooncake.store"):
        sys.modules.pop(name, None)


def ptr(a):
    return a.ctypes.data


def wait_until(pred, timeout=120.0, what="condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def test_vllm_mooncake_store_connector(mc, cluster):
    store = mc.MooncakeDistributedStore()
    # positional: local_hostname, metadata_server, global_segment_size, local_buffer_size, protocol,
    # device_name, master_server_address
    assert store.setup("127.0.0.1", "P2PHANDSHAKE", 64 * MiB, 16 * MiB, "tcp", "", cluster.master) == 0
    try:
        layers, blocks, block = 64, 4, 32 * KiB
        kv = [np.random.default_rng(i).integers(0, 256, blocks * block, dtype=np.uint8) for i in range(layers)]
        for a in kv:
            assert store.register_buffer(ptr(a), a.nbytes) == 0
        keys = [f"Qwen/Qwen3-8B@tp_rank:0@pcp0@dcp0@pp_rank:0@group:0@{b:064x}" for b in range(blocks)]
        addrs = [[ptr(kv[layer]) + b * block for layer in range(layers)] for b in range(blocks)]
        sizes = [[block] * layers for _ in range(blocks)]
        want = [[bytes(kv[layer][b * block:(b + 1) * block]) for layer in range(layers)] for b in range(blocks)]
        exist = store.batch_is_exist(keys)
        missing = [i for i, e in enumerate(exist) if e != 1]   # "not 1" is a miss
        assert missing == list(range(blocks))
        res = store.batch_put_from_multi_buffers([keys[i] for i in missing], [addrs[i] for i in missing],
                                                 [sizes[i] for i in missing], mc.ReplicateConfig())
        assert res == [0] * blocks
        descs = store.batch_get_replica_desc(keys)
        assert all(descs[k] and descs[k][0].is_memory_replica() for k in keys)
        for a in kv:
            a[:] = 0
        assert store.batch_get_into_multi_buffers(keys, addrs, sizes) == [layers * block] * blocks
        for b in range(blocks):
            assert [bytes(kv[layer][b * block:(b + 1) * block]) for layer in range(layers)] == want[b]
        assert store.remove_all(force=True) >= blocks
        assert store.batch_is_exist(keys) == [0] * blocks
    finally:
        assert store.close() == 0


def test_vllm_ascend_store_connector_with_ssd_offload(mc, cluster, tmp_path):
    store = mc.MooncakeDistributedStore()
    assert store.setup(local_hostname="127.0.0.1", metadata_server="P2PHANDSHAKE",
                       global_segment_size=64 * MiB, local_buffer_size=16 * MiB, protocol="tcp",
                       rdma_devices="", master_server_addr=cluster.master,
                       enable_ssd_offload=True, ssd_offload_path=str(tmp_path)) == 0
    try:
        me = store.get_hostname()
        assert len(os.listdir(tmp_path)) == 1  # one directory for this process
        layers, blocks, block = 8, 4, 64 * KiB
        kv = [np.random.default_rng(50 + i).integers(0, 256, blocks * block, dtype=np.uint8) for i in range(layers)]
        for a in kv:
            assert store.register_buffer(ptr(a), a.nbytes) == 0
        keys = [f"m@pcp0@dcp0@head_or_tp_rank:0@pp_rank:0@group:0@cache_role:kv@cache_family:full@{b:032x}"
                for b in range(blocks)]
        addrs = [[ptr(kv[layer]) + b * block for layer in range(layers)] for b in range(blocks)]
        sizes = [[block] * layers for _ in range(blocks)]
        want = [b"".join(bytes(kv[layer][b * block:(b + 1) * block]) for layer in range(layers))
                for b in range(blocks)]
        assert store.batch_is_exist(keys) == [0] * blocks
        rc = mc.ReplicateConfig()
        rc.preferred_segment = me
        rc.prefer_alloc_in_same_node = True
        res = store.batch_put_from_multi_buffers(keys, addrs, sizes, rc)
        assert [0 if r > 0 else r for r in res] == [0] * blocks   # positive results normalised to 0
        d = store.batch_get_replica_desc(keys)
        assert all([r.node for r in d[k]] == [me] for k in keys), d
        # This process's node offloads them to its own SSD tier.
        wait_until(lambda: all(any(r.is_disk_replica() and r.node == me for r in store.get_replica_desc(k))
                               for k in keys), what="the in-process SSD tier to hold the blocks")
        for a in kv:
            a[:] = 0
        res = store.batch_get_into_multi_buffers(keys, addrs, sizes, True)
        assert res == [layers * block] * blocks
        for b in range(blocks):
            assert b"".join(bytes(kv[layer][b * block:(b + 1) * block]) for layer in range(layers)) == want[b]
    finally:
        assert store.close() == 0
    assert os.listdir(tmp_path) == []  # close removed this process's SSD directory


def test_sglang_hicache_mooncake_store(mc, cluster):
    store = mc.MooncakeDistributedStore()
    assert store.setup({"local_hostname": "127.0.0.1", "metadata_server": "P2PHANDSHAKE",
                        "global_segment_size": "0", "local_buffer_size": "16MB", "protocol": "tcp",
                        "device_name": "", "master_server_address": cluster.master}) == 0
    try:
        # warm-up
        warm = "sglang_warmup_key" + os.urandom(4).hex()
        v = os.urandom(4 * KiB)
        assert store.put(warm, v) == 0
        assert store.is_exist(warm) == 1
        assert store.get(warm) == v
        # pages: K and V per page hash; some exist already
        page = 256 * KiB
        hashes = [f"{i:016x}" for i in range(6)]
        keys = [f"{h}_0_{kv}" for h in hashes for kv in ("k", "v")]
        host = np.random.default_rng(3).integers(0, 256, len(keys) * page, dtype=np.uint8)
        assert store.register_buffer(ptr(host), host.nbytes) == 0
        ptrs = [ptr(host) + i * page for i in range(len(keys))]
        first = [0, 1, 4, 5]
        assert store.batch_put_from([keys[i] for i in first], [ptrs[i] for i in first], [page] * 4) == [0] * 4
        exist = store.batch_is_exist(keys)
        todo = [i for i, e in enumerate(exist) if e != 1]
        assert todo == [i for i in range(len(keys)) if i not in first]
        assert store.batch_put_from([keys[i] for i in todo], [ptrs[i] for i in todo], [page] * len(todo)) == \
            [0] * len(todo)
        want = host.copy()
        host[:] = 0
        res = store.batch_get_into(keys, ptrs, [page] * len(keys))
        assert all(r > 0 for r in res) and res == [page] * len(keys)   # success means > 0 bytes
        assert np.array_equal(host, want)
        # remove_all() without force skips objects inside a read lease: every one was just read.
        assert store.remove_all() == 0 and store.batch_is_exist(keys) == [1] * len(keys)
        assert store.remove_all(force=True) >= len(keys) + 1
        assert store.batch_is_exist(keys + [warm]) == [0] * (len(keys) + 1)
    finally:
        assert store.close() == 0


def test_lmcache_mooncakestore(mc, cluster):
    store = mc.MooncakeDistributedStore()
    assert store.setup("127.0.0.1", "P2PHANDSHAKE", 0, 64 * MiB, "tcp", "", cluster.master) == 0
    try:
        chunk = 4 * MiB
        pool = np.random.default_rng(9).integers(0, 256, 4 * chunk, dtype=np.uint8)  # "pinned" CPU pool
        assert store.register_buffer(ptr(pool), pool.nbytes) == 0
        keys = [f"model@1@0@{i:032x}@bfloat16" for i in range(3)]
        for i, k in enumerate(keys):
            assert not store.is_exist(k)                                  # used as a bool
            assert store.put_from(k, ptr(pool) + i * chunk, chunk) == 0
            assert store.is_exist(k)
        want = bytes(pool[:3 * chunk])
        pool[:] = 0
        res = store.batch_get_into(keys, [ptr(pool) + i * chunk for i in range(3)], [chunk] * 3)
        assert res == [chunk] * 3 and bytes(pool[:3 * chunk]) == want
        # with chunk metadata: put_parts(key, meta, kv) and batch_get_buffer
        meta = b"LMCache-meta:" + bytes(range(19))
        mkeys = [k + "@meta" for k in keys[:2]]
        for i, k in enumerate(mkeys):
            assert store.put_parts(k, meta, memoryview(want)[i * chunk:(i + 1) * chunk]) == 0
        bufs = store.batch_get_buffer(mkeys + ["model@1@0@absent@bfloat16"])
        assert bufs[2] is None
        for i, b in enumerate(bufs[:2]):
            assert b.size() == len(meta) + chunk and b.ptr() != 0
            mv = memoryview(b)
            assert bytes(mv[:len(meta)]) == meta and bytes(mv[len(meta):]) == want[i * chunk:(i + 1) * chunk]
        assert store.batch_remove(keys + mkeys, force=True) == [0] * 5
        assert store.unregister_buffer(ptr(pool)) == 0
    finally:
        assert store.close() == 0
