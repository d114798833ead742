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
