"""Mutual TLS from Python: tierstore.Client and MooncakeDistributedStore
against a master and a node that require it (real processes, certificates
made with openssl the way docs/security.md shows)."""

from __future__ import annotations

import os
import subprocess

import pytest

import tierstore
from conftest import Cluster
from tierstore.mooncake import INVALID_PARAMS, MooncakeDistributedStore

KiB = 1 << 10


def _openssl(*args, cwd):
    r = subprocess.run(["openssl", *args], cwd=cwd, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr


def _ca(d, name):
    _openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-days", "2",
             "-subj", f"/O=tierstore/CN={name}", "-keyout", f"{name}.key", "-out", f"{name}.crt", cwd=d)


def _issue(d, ca, name, *roles):
    """A leaf certificate of CA ca for the given roles: {cert, key, ca} paths."""
    _openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
             "-subj", f"/O=tierstore/CN={name}", "-keyout", f"{name}.key", "-out", f"{name}.csr", cwd=d)
    ext = os.path.join(d, f"{name}.ext")
    with open(ext, "w") as f:
        f.write("subjectAltName=" + ",".join(f"URI:tierstore://role/{r}" for r in roles) + "\n"
                "extendedKeyUsage=serverAuth,clientAuth\nkeyUsage=digitalSignature\n")
    _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.crt", "-CAkey", f"{ca}.key", "-CAcreateserial",
             "-days", "2", "-out", f"{name}.crt", "-extfile", ext, cwd=d)
    return {"tls_cert": os.path.join(d, f"{name}.crt"), "tls_key": os.path.join(d, f"{name}.key"),
            "tls_ca": os.path.join(d, f"{ca}.crt")}


def _flags(files):
    return [f"--{k}={v}" for k, v in files.items()]


@pytest.fixture(scope="module")
def tls_cluster(binaries, tmp_path_factory):
    """A master and a node requiring mutual TLS, and certificates: .certs[name]."""
    d = str(tmp_path_factory.mktemp("tls"))
    _ca(d, "ca")
    _ca(d, "otherca")
    certs = {
        "master": _issue(d, "ca", "master", "master"),
        "node": _issue(d, "ca", "node", "node"),
        "app": _issue(d, "ca", "app", "client"),
        "inproc": _issue(d, "ca", "inproc", "client", "node"),
        "stranger": _issue(d, "otherca", "stranger", "client"),
    }
    c = Cluster(binaries, d)
    try:
        _, c.master = c.start_master(*_flags(certs["master"]))
        c.start_node(c.master, "64MiB", False, *_flags(certs["node"]))
        c.certs = certs
        yield c
    finally:
        c.stop()


def test_client_with_tls(tls_cluster):
    c = tierstore.Client(master=tls_cluster.master, **tls_cluster.certs["app"])
    try:
        v = os.urandom(300 * KiB)
        k = "tls/" + os.urandom(8).hex()
        c.put(k, v)
        assert c.get(k) == v  # the bytes came over the node's TLS data plane
        buf = bytearray(len(v))
        assert c.get_into(k, buf) == len(v) and bytes(buf) == v
        c.remove(k, force=True)
    finally:
        c.close()


@pytest.mark.parametrize("who", ["plaintext", "stranger", "node-only cert"])
def test_refused_without_the_right_certificate(tls_cluster, who):
    kw = {"plaintext": {}, "stranger": tls_cluster.certs["stranger"],
          "node-only cert": tls_cluster.certs["node"]}[who]
    with pytest.raises(tierstore.Error) as e:
        tierstore.Client(master=tls_cluster.master, timeout=10, **kw).close()
    if who == "node-only cert":  # refused before connecting, naming the role
        assert e.value.name == "INVALID_PARAMS" and "client" in str(e.value), e.value


def test_in_process_node_with_tls(tls_cluster):
    """A store node inside this process serves over TLS with a client+node
    certificate; another TLS client reads from it; a client-only
    certificate is refused for it, naming the node role."""
    with pytest.raises(tierstore.Error) as e:
        tierstore.Client(master=tls_cluster.master, segment_size=16 << 20, **tls_cluster.certs["app"])
    assert e.value.name == "INVALID_PARAMS" and "node" in str(e.value), e.value
    owner = tierstore.Client(master=tls_cluster.master, segment_size=16 << 20, **tls_cluster.certs["inproc"])
    reader = tierstore.Client(master=tls_cluster.master, **tls_cluster.certs["app"])
    try:
        k, v = "tls-inproc/" + os.urandom(8).hex(), os.urandom(200 * KiB)
        owner.put(k, v)
        assert [r["node"] for r in owner.replicas(k)] == [owner.hostname]
        assert reader.get(k) == v  # over TLS to the in-process node's listener
    finally:
        reader.close()
        owner.close()


def test_mooncake_setup_with_tls(tls_cluster, monkeypatch):
    """The dict form takes tls_cert/tls_key/tls_ca; the positional form (vLLM's)
    takes them from TIERSTORE_TLS_*; one file alone is -600 naming the missing one."""
    files = tls_cluster.certs["app"]
    s = MooncakeDistributedStore()
    assert s.setup({"local_hostname": "127.0.0.1", "metadata_server": "P2PHANDSHAKE", "global_segment_size": 0,
                    "local_buffer_size": 16 << 20, "protocol": "tcp", "master_server_address": tls_cluster.master,
                    **files}) == 0
    k = "tls-mc/" + os.urandom(8).hex()
    assert s.put(k, b"x" * 5000) == 0 and s.get(k) == b"x" * 5000
    s.close()

    for var, field in (("TIERSTORE_TLS_CERT", "tls_cert"), ("TIERSTORE_TLS_KEY", "tls_key"),
                       ("TIERSTORE_TLS_CA", "tls_ca")):
        monkeypatch.setenv(var, files[field])
    s = MooncakeDistributedStore()
    assert s.setup("127.0.0.1", "P2PHANDSHAKE", 0, 16 << 20, "tcp", "", tls_cluster.master) == 0
    assert s.is_exist(k) == 1 and s.get(k) == b"x" * 5000
    assert s.remove(k, True) == 0
    s.close()

    monkeypatch.delenv("TIERSTORE_TLS_KEY")
    s = MooncakeDistributedStore()
    assert s.setup("127.0.0.1", "P2PHANDSHAKE", 0, 16 << 20, "tcp", "", tls_cluster.master) == INVALID_PARAMS


# ---- etcd over TLS ---------------------------------------------------------

def _issue_etcd(d, ca, name):
    """A plain TLS certificate of CA ca naming 127.0.0.1 (etcd's clients check host names): {cert, key, ca}."""
    _openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
             "-subj", f"/O=tierstore/CN={name}", "-keyout", f"{name}.key", "-out", f"{name}.csr", cwd=d)
    ext = os.path.join(d, f"{name}.ext")
    with open(ext, "w") as f:
        f.write("subjectAltName=IP:127.0.0.1,DNS:localhost\n"
                "extendedKeyUsage=serverAuth,clientAuth\nkeyUsage=digitalSignature\n")
    _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.crt", "-CAkey", f"{ca}.key", "-CAcreateserial",
             "-days", "2", "-out", f"{name}.crt", "-extfile", ext, cwd=d)
    return {"cert": os.path.join(d, f"{name}.crt"), "key": os.path.join(d, f"{name}.key"),
            "ca": os.path.join(d, f"{ca}.crt")}


def test_etcd_master_over_tls(binaries, tmp_path):
    """tierstore-etcd serving client TLS, an HA master with --etcd_tls_*, a node and tierstore.Client given
    etcd://...?ca=&cert=&key= (the Python package hands the string to the Go library, which reads the query);
    an etcd:// query naming an unknown parameter is refused with INVALID_PARAMS naming it."""
    from urllib.parse import urlencode

    from conftest import Proc

    d = str(tmp_path)
    _ca(d, "etcdca")
    srv, m1, app = _issue_etcd(d, "etcdca", "etcd"), _issue_etcd(d, "etcdca", "m1"), _issue_etcd(d, "etcdca", "app")
    c = Cluster(binaries, d)
    try:
        etcd = Proc("tierstore-etcd", [binaries["tierstore-etcd"], "--data-dir", os.path.join(d, "etcd"),
                                       "--listen-client", "127.0.0.1:0", "--tls_cert", srv["cert"],
                                       "--tls_key", srv["key"], "--tls_ca", srv["ca"]])
        c.procs.append(etcd)
        endpoint = etcd.wait_line(r"tierstore-etcd listening on (\S+) master=").group(1)
        c.start_master("--enable_ha=true", f"--etcd_endpoints={endpoint}", f"--etcd_tls_ca={m1['ca']}",
                       f"--etcd_tls_cert={m1['cert']}", f"--etcd_tls_key={m1['key']}")
        url = f"etcd://{endpoint}?" + urlencode({"ca": app["ca"], "cert": app["cert"], "key": app["key"]})
        c.start_node(url, "64MiB", False)
        cl = tierstore.Client(master=url)
        try:
            v = os.urandom(100 * KiB)
            k = "etcdtls/" + os.urandom(8).hex()
            cl.put(k, v)
            assert cl.get(k) == v
        finally:
            cl.close()
        with pytest.raises(tierstore.Error) as e:
            tierstore.Client(master=f"etcd://{endpoint}?ca={app['ca']}&password=x")
        assert e.value.code == INVALID_PARAMS and "password" in str(e.value)
    finally:
        c.stop()
