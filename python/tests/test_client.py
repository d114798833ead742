"""tierstore.Client against real tierstore-master and tierstore-node processes (conftest.py)."""

import ctypes
import os
import uuid

import numpy as np
import pytest

import tierstore


def key(prefix):
    return "%s-%s" % (prefix, uuid.uuid4().hex)


@pytest.fixture
def client(cluster):
    c = tierstore.Client(master=cluster.master)
    yield c
    c.close()


def test_put_get_exists_remove(client):
    k = key("basic")
    assert not client.exists(k)
    v = os.urandom(100_000)
    client.put(k, v)
    assert client.exists(k)
    assert client.get(k) == v
    assert client.get_size(k) == len(v)
    buf = bytearray(len(v) + 10)
    assert client.get_into(k, buf) == len(v)
    assert bytes(buf[:len(v)]) == v
    with pytest.raises(tierstore.Error) as e:
        client.put(k, b"again")
    assert e.value.code == tierstore.codes.OBJECT_ALREADY_EXISTS == -705
    assert e.value.name == "OBJECT_ALREADY_EXISTS"
    client.remove(k, force=True)
    assert not client.exists(k)
    with pytest.raises(tierstore.Error) as e:
        client.get(k)
    assert e.value.code == -704 and "OBJECT_NOT_FOUND" in str(e.value)


def test_buffer_kinds(client):
    k = key("kinds")
    arr = np.arange(4096, dtype=np.float32)
    client.put(k, arr)
    out = np.zeros(4096, dtype=np.float32)
    assert client.get_into(k, out) == arr.nbytes
    assert np.array_equal(out, arr)
    # (addr, size) tuples, as for torch tensors' data_ptr()
    raw = ctypes.create_string_buffer(arr.nbytes)
    assert client.get_into(k, (ctypes.addressof(raw), arr.nbytes)) == arr.nbytes
    assert raw.raw == arr.tobytes()
    k2 = key("kinds-mv")
    client.put(k2, memoryview(b"xyz" * 1000)[3:])
    assert client.get(k2) == (b"xyz" * 1000)[3:]
    with pytest.raises(TypeError):
        client.get_into(k, b"read-only bytes")
    with pytest.raises(TypeError):
        client.put(key("bad"), 12345)


def test_too_small_buffer(client):
    k = key("small")
    v = os.urandom(5000)
    client.put(k, v)
    buf = bytearray(b"\xaa" * 4999)
    with pytest.raises(tierstore.Error) as e:
        client.get_into(k, buf)
    assert e.value.code == tierstore.codes.INVALID_PARAMS
    assert "buffer" in str(e.value)
    assert buf == bytearray(b"\xaa" * 4999), "nothing is written on a too-small buffer"


def test_closed_client(cluster):
    c = tierstore.Client(master=cluster.master)
    c.close()
    c.close()
    with pytest.raises(tierstore.Error) as e:
        c.get("x")
    assert e.value.code == -600 and "closed" in str(e.value)
    assert c.health() == 1


def test_health_and_stats(client):
    assert client.health() == 0
    st = client.stats()
    assert st["master"]["Nodes"] >= 1
    assert client.hostname == "127.0.0.1"


def test_bad_config(cluster):
    with pytest.raises(tierstore.Error) as e:
        tierstore.Client(master=cluster.master, segment_size=-1)
    assert e.value.code == -600 and "segment_size" in str(e.value)


def test_vllm_layout_gather_scatter(client):
    """A block gathered from 64 layer buffers of 32 KiB (numpy) is one 2 MiB
    object and scatters back byte-identical into 64 other buffers."""
    rng = np.random.default_rng(1)
    layers = [rng.integers(0, 256, 32 * 1024, dtype=np.uint8) for _ in range(64)]
    k = key("vllm")
    client.put_parts(k, layers)
    whole = b"".join(a.tobytes() for a in layers)
    assert client.get_size(k) == len(whole) == 2 * 1024 * 1024
    assert client.get(k) == whole
    out = [np.zeros(32 * 1024, dtype=np.uint8) for _ in range(64)]
    assert client.get_into_parts(k, out) == len(whole)
    for a, b in zip(layers, out):
        assert np.array_equal(a, b)
    # batch forms: 4 blocks, scattered back through (addr, size) tuples too
    keys = [key("vllm-b%d" % i) for i in range(4)]
    blocks = [[rng.integers(0, 256, 32 * 1024, dtype=np.uint8) for _ in range(64)] for _ in keys]
    assert client.batch_put_parts(keys, blocks) == [None] * 4
    outs = [[np.zeros(32 * 1024, dtype=np.uint8) for _ in range(64)] for _ in keys]
    tuples = [[(a.ctypes.data, a.nbytes) for a in o] for o in outs]
    assert client.batch_get_into_parts(keys, tuples) == [len(whole)] * 4
    for blk, o in zip(blocks, outs):
        for a, b in zip(blk, o):
            assert np.array_equal(a, b)


def test_parts_too_small_and_mismatched(client):
    k = key("parts-small")
    client.put_parts(k, [b"a" * 1000, b"b" * 1000])
    small = [bytearray(b"\x01" * 1000), bytearray(b"\x01" * 999)]
    with pytest.raises(tierstore.Error) as e:
        client.get_into_parts(k, small)
    assert e.value.code == tierstore.codes.INVALID_PARAMS and "buffer" in str(e.value)
    assert small == [bytearray(b"\x01" * 1000), bytearray(b"\x01" * 999)]
    res = client.batch_get_into_parts([k, k], [[bytearray(10)], [bytearray(1500), bytearray(500)]])
    assert isinstance(res[0], tierstore.Error) and res[0].code == -600
    assert res[1] == 2000
    with pytest.raises(tierstore.Error):
        client.batch_get_into_parts([k, k], [[bytearray(2000)]])
    with pytest.raises(tierstore.Error):
        client.put_parts(key("empty"), [])


def test_batches(client):
    keys = [key("batch%d" % i) for i in range(10)]
    vals = [os.urandom(1000 + i) for i in range(10)]
    assert client.batch_put(keys, vals) == [None] * 10
    assert client.batch_exists(keys + [key("absent")]) == [True] * 10 + [False]
    bufs = [bytearray(2000) for _ in keys]
    assert client.batch_get_into(keys, bufs) == [len(v) for v in vals]
    assert [bytes(b[:len(v)]) for b, v in zip(bufs, vals)] == vals
    res = client.batch_put(keys[:2], vals[:2])
    assert all(isinstance(r, tierstore.Error) and r.code == -705 for r in res)
    assert client.batch_put([], []) == []
    assert client.batch_get_into([], []) == []
    assert client.batch_exists([]) == []
    reps = client.replicas(keys[0])
    assert reps and reps[0]["tier"] in ("dram", "ssd") and reps[0]["size"] == len(vals[0])
    assert client.batch_remove(keys + [key("absent")], force=True)[:10] == [None] * 10
    assert client.batch_exists(keys) == [False] * 10


def test_threads_put_get_1mib(client):
    """8 threads x 100 puts and gets of 1 MiB on one client (the GIL is
    released during each call)."""
    import threading
    errors = []
    prefix = key("threads")

    def work(t):
        try:
            buf = bytearray(1 << 20)
            for i in range(100):
                k = "%s-%d-%d" % (prefix, t, i)
                v = bytes([t, i % 256]) * (1 << 19)
                client.put(k, v)
                assert client.get_into(k, buf) == len(v)
                assert buf == v
                client.remove(k, force=True)
        except Exception as e:  # reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(t,)) for t in range(8)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(600)
        assert not th.is_alive()
    assert errors == []


def test_torch_cpu_tensors(client):
    """torch CPU tensors by (data_ptr(), nbytes), when torch is importable."""
    torch = pytest.importorskip("torch")
    layers = [torch.randn(8192) for _ in range(8)]
    k = key("torch")
    client.put_parts(k, [(t.data_ptr(), t.numel() * t.element_size()) for t in layers])
    out = [torch.empty(8192) for _ in range(8)]
    n = client.get_into_parts(k, [(t.data_ptr(), t.numel() * t.element_size()) for t in out])
    assert n == 8 * 8192 * 4
    for a, b in zip(layers, out):
        assert torch.equal(a, b)


def test_location_cache_option(cluster):
    """Gets with the replica-location cache off (every get asks the master
    first) and on read the same bytes."""
    for entries in (-1, 0, 2):
        c = tierstore.Client(master=cluster.master, location_cache_entries=entries)
        try:
            k = key("loccache%d" % entries)
            v = os.urandom(3000)
            c.put(k, v)
            for _ in range(3):
                assert c.get(k) == v
            c.remove(k, True)
            with pytest.raises(tierstore.Error) as e:
                c.get(k)
            assert e.value.code == tierstore.codes.OBJECT_NOT_FOUND
        finally:
            c.close()
