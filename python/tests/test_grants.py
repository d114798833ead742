"""Grants from Python: the store node inside a Python process checks the
master's grants when given the masters' secret (grant_secret_file), as a
tierstore-node with --grant_secret_file does; the package's client passes
PutStart's write grants and the lookups' read grants on to a
tierstore-node that checks them (real master and node processes, real
Python clients, docs/security.md)."""

from __future__ import annotations

import os

import pytest

import tierstore
from conftest import Cluster
from tierstore import config
from tierstore.mooncake import INVALID_PARAMS, MooncakeDistributedStore

KiB = 1 << 10
SEGMENT = 32 << 20


def _secret(d, name):
    p = os.path.join(d, name)
    with open(p, "w") as f:
        f.write(os.urandom(32).hex() + "\n")
    return p


@pytest.fixture
def grant_cluster(binaries, tmp_path):
    """A master signing grants with secret; .secret and .other (another secret)."""
    d = str(tmp_path)
    c = Cluster(binaries, d)
    c.secret, c.other = _secret(d, "secret"), _secret(d, "other")
    try:
        _, c.master = c.start_master(f"--grant_secret_file={c.secret}")
        yield c
    finally:
        c.stop()


def test_in_process_node_serves_reads_with_grants(grant_cluster):
    """The in-process node, the pool's only node, holds the masters' secret:
    another process's client reads its objects with the master's grants and
    puts into it."""
    owner = tierstore.Client(master=grant_cluster.master, segment_size=SEGMENT,
                             grant_secret_file=grant_cluster.secret)
    reader = tierstore.Client(master=grant_cluster.master)
    try:
        k, v = "grants/" + os.urandom(8).hex(), os.urandom(300 * KiB)
        owner.put(k, v)
        assert reader.get(k) == v
        k2, v2 = k + "/2", os.urandom(200 * KiB)
        reader.put(k2, v2)
        assert owner.get(k2) == v2 and reader.get(k2) == v2
    finally:
        reader.close()
        owner.close()


def test_in_process_node_checks_grants(grant_cluster):
    """An in-process node given another secret than the master's refuses
    the master's grants: the reader gets PERMISSION_DENIED naming a forged
    grant, for a read and for a put into the node, and the object stays
    readable where the grant is right (in its own process)."""
    owner = tierstore.Client(master=grant_cluster.master, segment_size=SEGMENT,
                             grant_secret_file=grant_cluster.other)
    reader = tierstore.Client(master=grant_cluster.master, timeout=10)
    try:
        k, v = "grants/" + os.urandom(8).hex(), os.urandom(100 * KiB)
        owner.put(k, v)
        with pytest.raises(tierstore.Error) as e:
            reader.get(k)
        assert e.value.name == "PERMISSION_DENIED" and "does not match" in str(e.value), e.value  # grant.ErrForged
        with pytest.raises(tierstore.Error) as e:
            reader.put(k + "/w", os.urandom(64 * KiB))  # the pool's only node: the owner's
        assert e.value.name == "PERMISSION_DENIED" and "refuses the write" in str(e.value), e.value
        assert owner.get(k) == v
    finally:
        reader.close()
        owner.close()


def test_grant_secret_file_needs_a_segment(grant_cluster):
    with pytest.raises(tierstore.Error) as e:
        tierstore.Client(master=grant_cluster.master, grant_secret_file=grant_cluster.secret)
    assert e.value.name == "INVALID_PARAMS" and "grant_secret_file" in str(e.value), e.value
    with pytest.raises(tierstore.Error) as e:
        tierstore.Client(master=grant_cluster.master, segment_size=SEGMENT,
                         grant_secret_file=grant_cluster.secret + ".missing")
    assert e.value.name == "INVALID_PARAMS" and "grant_secret_file" in str(e.value), e.value


def test_mooncake_setup_takes_the_secret(grant_cluster, monkeypatch):
    """setup() takes grant_secret_file in its dict, or from
    TIERSTORE_GRANT_SECRET_FILE (positional setup, as vLLM calls it)."""
    monkeypatch.setenv(config.GRANT_ENV, grant_cluster.secret)
    s = MooncakeDistributedStore()
    assert s.setup("127.0.0.1", "P2PHANDSHAKE", SEGMENT, 16 << 20, "tcp", "", grant_cluster.master) == 0
    reader = tierstore.Client(master=grant_cluster.master)
    try:
        v = os.urandom(64 * KiB)
        assert s.put("grants/setup", v) == 0
        assert reader.get("grants/setup") == v
    finally:
        reader.close()
        s.close()
    s = MooncakeDistributedStore()
    assert s.setup({"local_hostname": "127.0.0.1", "global_segment_size": 0,
                    "master_server_address": grant_cluster.master,
                    "grant_secret_file": grant_cluster.secret}) == INVALID_PARAMS


def test_config_grant_field(tmp_path):
    secret = _secret(str(tmp_path), "s")
    base = {"master_server_address": "127.0.0.1:50051"}
    # Named with a segment: kept. The variable is ignored without a segment.
    assert config.parse({**base, "grant_secret_file": secret}, environ={}).grant_secret_file == secret
    assert config.parse({**base, "global_segment_size": 0}, environ={config.GRANT_ENV: secret}).grant_secret_file == ""
    assert config.parse(base, environ={config.GRANT_ENV: secret}).grant_secret_file == secret
    for fields in ({**base, "global_segment_size": 0, "grant_secret_file": secret},
                   {**base, "grant_secret_file": secret + ".missing"}):
        with pytest.raises(config.ConfigError) as e:
            config.parse(fields, environ={})
        assert "grant_secret_file" in str(e.value), e.value


def test_tierstore_node_with_grants(binaries, tmp_path):
    """A master and a tierstore-node with the same secret: put, get, batch
    put and batch get through the package (the write grants passed on)."""
    c = Cluster(binaries, str(tmp_path))
    secret = _secret(str(tmp_path), "secret")
    try:
        flag = f"--grant_secret_file={secret}"
        _, c.master = c.start_master(flag)
        c.start_node(c.master, "64MiB", False, flag)
        cl = tierstore.Client(master=c.master)
        try:
            k, v = "grants/" + os.urandom(8).hex(), os.urandom(300 * KiB)
            cl.put(k, v)
            assert cl.get(k) == v
            keys = [f"{k}/{i}" for i in range(8)]
            vals = [os.urandom(16 * KiB) for _ in keys]
            assert cl.batch_put(keys, vals) == [None] * len(keys)
            bufs = [bytearray(16 * KiB) for _ in keys]
            assert cl.batch_get_into(keys, bufs) == [16 * KiB] * len(keys)
            assert [bytes(b) for b in bufs] == vals
        finally:
            cl.close()
    finally:
        c.stop()


def test_tierstore_node_refuses_a_put_without_a_write_grant(binaries, tmp_path):
    """A tierstore-node with the secret behind a master without it: the
    put is PERMISSION_DENIED naming the missing write grant."""
    c = Cluster(binaries, str(tmp_path))
    try:
        _, c.master = c.start_master()  # no secret: PutStart answers no grant
        c.start_node(c.master, "64MiB", False, f"--grant_secret_file={_secret(str(tmp_path), 'secret')}")
        cl = tierstore.Client(master=c.master, timeout=20)
        try:
            with pytest.raises(tierstore.Error) as e:
                cl.put("grants/none", os.urandom(64 * KiB))
            assert e.value.name == "PERMISSION_DENIED" and "refuses the write: grant: no grant" in str(e.value), e.value
        finally:
            cl.close()
    finally:
        c.stop()
