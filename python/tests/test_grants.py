"""Read and write grants from Python: tierstore.Client against a master and
a node started with the same --grant_secret_file (real processes). The
package goes through the Go client, which passes PutStart's write grants
and the lookups' read grants on (docs/security.md, Read grants, Write
grants); a node with the secret behind a master without it refuses the
put, naming the missing grant."""

from __future__ import annotations

import os

import pytest

import tierstore
from conftest import Cluster

KiB = 1 << 10


@pytest.fixture(scope="module")
def grant_secret(tmp_path_factory):
    p = tmp_path_factory.mktemp("grants") / "grant.secret"
    p.write_text(os.urandom(32).hex() + "\n")
    p.chmod(0o600)
    return str(p)


def test_put_and_get_with_grants(binaries, tmp_path, grant_secret):
    c = Cluster(binaries, str(tmp_path))
    try:
        flag = f"--grant_secret_file={grant_secret}"
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


def test_put_refused_without_a_write_grant(binaries, tmp_path, grant_secret):
    c = Cluster(binaries, str(tmp_path))
    try:
        _, c.master = c.start_master()  # no secret: PutStart answers no grant
        c.start_node(c.master, "64MiB", False, f"--grant_secret_file={grant_secret}")
        cl = tierstore.Client(master=c.master, timeout=20)
        try:
            with pytest.raises(tierstore.Error) as e:
                cl.put("grants/none", os.urandom(64 * KiB))
            assert e.value.name == "PERMISSION_DENIED" and "refuses the write: grant: no grant" in str(e.value), e.value
        finally:
            cl.close()
    finally:
        c.stop()
