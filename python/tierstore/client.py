"""tierstore.Client: the Go client (and optionally a store node) in this
process, through libtierstore.so."""

import ctypes
import json

from . import _native
from ._native import Buffers, Error, ErrBuf, codes, key_bytes, lib

SOFT_PIN = 1
HARD_PIN = 2


def _flags(soft_pin, hard_pin):
    return (SOFT_PIN if soft_pin else 0) | (HARD_PIN if hard_pin else 0)


def _pref(preferred_node):
    if preferred_node is None or preferred_node == "":
        return None
    if not isinstance(preferred_node, str):
        raise TypeError("preferred_node must be a str (host:port or a node id), got %s" % type(preferred_node).__name__)
    return preferred_node.encode("utf-8")


def _keys(keys):
    if isinstance(keys, (str, bytes)):
        raise TypeError("keys must be a list of keys, not a single %s" % type(keys).__name__)
    ks = [key_bytes(k) for k in keys]
    n = len(ks)
    return n, (ctypes.c_char_p * n)(*ks), (ctypes.c_int64 * n)(*[len(k) for k in ks])


def _flatten(ppk, writable, bufs, what):
    """The ctypes arrays (nparts, ptrs, sizes) of a list of part lists,
    flattened; (addr, size) tuples take a fast path."""
    counts = []
    addrs = []
    sizes = []
    add = bufs.add
    for i, ps in enumerate(ppk):
        c = 0
        for p in ps:
            if type(p) is tuple and len(p) == 2 and type(p[0]) is int and type(p[1]) is int and p[1] >= 0 and (p[0] or not p[1]):
                addrs.append(p[0])
                sizes.append(p[1])
            else:
                a, n = add(p, writable, "%s: key %d part %d" % (what, i, c))
                addrs.append(a)
                sizes.append(n)
            c += 1
        counts.append(c)
    n = max(len(counts), 1)
    t = max(len(addrs), 1)
    return (ctypes.c_int64 * n)(*counts), (ctypes.c_void_p * t)(*addrs), (ctypes.c_int64 * t)(*sizes)


def _results(n, res, err, errtext, ok):
    """Turns per-key codes into results: ok(v) for v >= 0, Error for < 0."""
    out = []
    for i in range(n):
        v = res[i]
        out.append(ok(v) if v >= 0 else Error(v, "key %d of the batch failed (first error of the batch: %s)" % (i, errtext)))
    return out


class Client:
    """A tierstore client (see docs/python.md). With segment_size > 0 a store
    node runs inside this process: it mounts a DRAM segment of that many
    bytes into the pool, listens on local_hostname (host or host:port; a
    port is picked when not given) so that other clients read its bytes,
    has an SSD tier under it when ssd_dir is set, and leaves the pool (its
    objects with it) at close(). tls_cert, tls_key and tls_ca (all three or
    none) turn on mutual TLS to the master and the nodes, as the binaries'
    --tls_* flags: the certificate names the client role, and the node role
    too with segment_size > 0 (docs/security.md). grant_secret_file (with
    segment_size > 0) is the grant secret the masters share, as the node's
    --grant_secret_file: the in-process node then refuses reads and writes
    of other processes that do not carry the master's grant.
    location_cache_entries sizes the replica-location cache (0: 65536; a
    negative number turns it off, every get then asks the master first;
    docs/python.md)."""

    def __init__(self, master, segment_size=0, local_hostname="127.0.0.1", ssd_dir=None,
                 ssd_capacity=0, timeout=30.0, log_level="warn", tls_cert=None, tls_key=None, tls_ca=None,
                 grant_secret_file=None, location_cache_entries=0):
        _native.check_process()
        if not isinstance(master, str) or not master:
            raise Error(codes.INVALID_PARAMS, "master: a host:port or etcd://... string is required, got %r" % (master,))
        cfg = {
            "master": master,
            "segment_size": int(segment_size),
            "local_hostname": local_hostname or "",
            "ssd_dir": ssd_dir or "",
            "ssd_capacity": int(ssd_capacity),
            "timeout": float(timeout),
            "log_level": log_level,
            "tls_cert": tls_cert or "",
            "tls_key": tls_key or "",
            "tls_ca": tls_ca or "",
            "grant_secret_file": grant_secret_file or "",
            "location_cache_entries": int(location_cache_entries),
        }
        self._h = 0
        e = ErrBuf()
        h = lib.ts_open(json.dumps(cfg).encode("utf-8"), e.buf, e.SIZE)
        if h < 0:
            raise e.error(h)
        self._h = h
        self._closed = False

    # --- plumbing ---

    def _handle(self):
        _native.check_process()
        if self._closed:
            raise Error(codes.INVALID_PARAMS, "client is closed")
        return self._h

    def close(self):
        """Closes the client; an in-process node is unmounted (its objects
        leave the pool). Closing twice is fine."""
        if self._h == 0 or self._closed:
            return
        _native.check_process()
        self._closed = True
        e = ErrBuf()
        rc = lib.ts_close(self._h, e.buf, e.SIZE)
        if rc < 0:
            raise e.error(rc)

    @property
    def closed(self):
        return self._closed

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            if getattr(self, "_h", 0) and not self._closed and not _native._forked:
                self.close()
        except Exception:
            pass

    # --- single-key calls ---

    @property
    def hostname(self):
        return self._text(lib.ts_hostname)

    def _text(self, fn):
        h = self._handle()
        size = 256
        while True:
            out = ctypes.create_string_buffer(size)
            e = ErrBuf()
            n = fn(h, out, size, e.buf, e.SIZE)
            if n < 0:
                raise e.error(n)
            if n < size:
                return out.value.decode("utf-8")
            size = n + 1

    def put(self, key, value, *, replicas=1, preferred_node=None, soft_pin=False, hard_pin=False):
        """Stores value (any buffer-protocol object, or (addr, size)) under key.
        A key that exists is OBJECT_ALREADY_EXISTS."""
        h = self._handle()
        k = key_bytes(key)
        e = ErrBuf()
        with Buffers() as bufs:
            addr, size = bufs.add(value, False, "value")
            rc = lib.ts_put(h, k, len(k), addr, size, replicas, _flags(soft_pin, hard_pin), _pref(preferred_node), e.buf, e.SIZE)
        if rc < 0:
            raise e.error(rc)

    def put_parts(self, key, parts, *, replicas=1, preferred_node=None, soft_pin=False, hard_pin=False):
        """Stores the concatenation of parts (buffers or (addr, size)) as one
        object, without copying them into one buffer first."""
        h = self._handle()
        k = key_bytes(key)
        e = ErrBuf()
        parts = list(parts)
        n = len(parts)
        with Buffers() as bufs:
            _, ptrs, sizes = _flatten((parts,), False, bufs, "put_parts")
            rc = lib.ts_put_parts(h, k, len(k), ptrs, sizes, n, replicas, _flags(soft_pin, hard_pin), _pref(preferred_node), e.buf, e.SIZE)
        if rc < 0:
            raise e.error(rc)

    def get(self, key):
        """Returns key's value as bytes."""
        h = self._handle()
        k = key_bytes(key)
        e = ErrBuf()
        out = ctypes.c_void_p()
        n = lib.ts_get(h, k, len(k), ctypes.byref(out), e.buf, e.SIZE)
        if n < 0:
            raise e.error(n)
        try:
            return ctypes.string_at(out.value, n) if n else b""
        finally:
            lib.ts_free(out)

    def get_into(self, key, buf):
        """Reads key's value into buf (writable buffer or (addr, size));
        returns its length. A buffer smaller than the object is
        INVALID_PARAMS with nothing written."""
        h = self._handle()
        k = key_bytes(key)
        e = ErrBuf()
        with Buffers() as bufs:
            addr, size = bufs.add(buf, True, "buffer")
            n = lib.ts_get_into(h, k, len(k), addr, size, e.buf, e.SIZE)
        if n < 0:
            raise e.error(n)
        return n

    def get_into_parts(self, key, parts):
        """Scatters key's value over parts in order; returns its length."""
        h = self._handle()
        k = key_bytes(key)
        e = ErrBuf()
        parts = list(parts)
        n = len(parts)
        with Buffers() as bufs:
            _, ptrs, sizes = _flatten((parts,), True, bufs, "get_into_parts")
            got = lib.ts_get_into_parts(h, k, len(k), ptrs, sizes, n, e.buf, e.SIZE)
        if got < 0:
            raise e.error(got)
        return got

    def get_size(self, key):
        h = self._handle()
        k = key_bytes(key)
        e = ErrBuf()
        n = lib.ts_get_size(h, k, len(k), e.buf, e.SIZE)
        if n < 0:
            raise e.error(n)
        return n

    def exists(self, key):
        h = self._handle()
        k = key_bytes(key)
        e = ErrBuf()
        rc = lib.ts_exists(h, k, len(k), e.buf, e.SIZE)
        if rc < 0:
            raise e.error(rc)
        return rc == 1

    def remove(self, key, force=False):
        h = self._handle()
        k = key_bytes(key)
        e = ErrBuf()
        rc = lib.ts_remove(h, k, len(k), 1 if force else 0, e.buf, e.SIZE)
        if rc < 0:
            raise e.error(rc)

    def remove_all(self, force=False):
        h = self._handle()
        e = ErrBuf()
        n = lib.ts_remove_all(h, 1 if force else 0, e.buf, e.SIZE)
        if n < 0:
            raise e.error(n)
        return n

    def remove_by_regex(self, pattern, force=False):
        h = self._handle()
        if not isinstance(pattern, str):
            raise TypeError("pattern must be a str, got %s" % type(pattern).__name__)
        e = ErrBuf()
        n = lib.ts_remove_by_regex(h, pattern.encode("utf-8"), 1 if force else 0, e.buf, e.SIZE)
        if n < 0:
            raise e.error(n)
        return n

    def replicas(self, key):
        """Key's replicas: [{"tier": "dram"|"ssd", "node": "host:port",
        "node_id": ..., "size": n, "status": ...}]."""
        h = self._handle()
        k = key_bytes(key)
        return json.loads(self._answer(lambda out, size, eb, el: lib.ts_replicas(h, k, len(k), out, size, eb, el)))

    def stats(self):
        """{"master": the master's counters, "reads": this client's reads by
        tier, "hostname": ...}."""
        h = self._handle()
        return json.loads(self._answer(lambda out, size, eb, el: lib.ts_stats(h, out, size, eb, el)))

    def _answer(self, call):
        size = 16384
        while True:
            out = ctypes.create_string_buffer(size)
            e = ErrBuf()
            n = call(out, size, e.buf, e.SIZE)
            if n < 0:
                raise e.error(n)
            if n < size:
                return out.value.decode("utf-8")
            size = n + 1

    def health(self):
        """0 healthy, 1 closed, 2 master unreachable."""
        _native.check_process()
        if self._closed:
            return 1
        return lib.ts_health(self._h)

    # --- batch calls ---

    def batch_put(self, keys, values, *, replicas=1, preferred_node=None, soft_pin=False, hard_pin=False):
        """One entry per key: None (stored) or an Error."""
        h = self._handle()
        values = list(values)
        n, ka, kl = _keys(keys)
        if len(values) != n:
            raise Error(codes.INVALID_PARAMS, "batch_put: %d keys, %d values" % (n, len(values)))
        e = ErrBuf()
        res = (ctypes.c_int64 * max(n, 1))()
        with Buffers() as bufs:
            _, ptrs, sizes = _flatten((values,), False, bufs, "batch_put")
            rc = lib.ts_batch_put(h, n, ka, kl, ptrs, sizes, replicas, _flags(soft_pin, hard_pin), _pref(preferred_node), res, e.buf, e.SIZE)
        if rc < 0:
            raise e.error(rc)
        return _results(n, res, e, e.text(), lambda v: None)

    def batch_put_parts(self, keys, parts_per_key, *, replicas=1, preferred_node=None, soft_pin=False, hard_pin=False):
        """One object per key gathered from its parts; None or Error per key."""
        h = self._handle()
        ppk = list(parts_per_key)
        n, ka, kl = _keys(keys)
        if len(ppk) != n:
            raise Error(codes.INVALID_PARAMS, "batch_put_parts: %d keys, %d part lists" % (n, len(ppk)))
        e = ErrBuf()
        res = (ctypes.c_int64 * max(n, 1))()
        with Buffers() as bufs:
            nparts, ptrs, sizes = _flatten(ppk, False, bufs, "batch_put_parts")
            rc = lib.ts_batch_put_parts(h, n, ka, kl, nparts, ptrs, sizes, replicas, _flags(soft_pin, hard_pin), _pref(preferred_node), res, e.buf, e.SIZE)
        if rc < 0:
            raise e.error(rc)
        return _results(n, res, e, e.text(), lambda v: None)

    def batch_get_into(self, keys, bufs_):
        """Reads keys[i] into bufs_[i]; one entry per key: bytes read or Error."""
        h = self._handle()
        blist = list(bufs_)
        n, ka, kl = _keys(keys)
        if len(blist) != n:
            raise Error(codes.INVALID_PARAMS, "batch_get_into: %d keys, %d buffers" % (n, len(blist)))
        e = ErrBuf()
        res = (ctypes.c_int64 * max(n, 1))()
        with Buffers() as bufs:
            _, ptrs, sizes = _flatten((blist,), True, bufs, "batch_get_into")
            rc = lib.ts_batch_get_into(h, n, ka, kl, ptrs, sizes, res, e.buf, e.SIZE)
        if rc < 0:
            raise e.error(rc)
        return _results(n, res, e, e.text(), int)

    def batch_get_into_parts(self, keys, parts_per_key):
        """Scatters each key's value over its parts; bytes read or Error per key."""
        h = self._handle()
        ppk = list(parts_per_key)
        n, ka, kl = _keys(keys)
        if len(ppk) != n:
            raise Error(codes.INVALID_PARAMS, "batch_get_into_parts: %d keys, %d part lists" % (n, len(ppk)))
        e = ErrBuf()
        res = (ctypes.c_int64 * max(n, 1))()
        with Buffers() as bufs:
            nparts, ptrs, sizes = _flatten(ppk, True, bufs, "batch_get_into_parts")
            rc = lib.ts_batch_get_into_parts(h, n, ka, kl, nparts, ptrs, sizes, res, e.buf, e.SIZE)
        if rc < 0:
            raise e.error(rc)
        return _results(n, res, e, e.text(), int)

    def batch_exists(self, keys):
        """True/False or Error per key."""
        h = self._handle()
        n, ka, kl = _keys(keys)
        e = ErrBuf()
        res = (ctypes.c_int64 * max(n, 1))()
        rc = lib.ts_batch_exists(h, n, ka, kl, res, e.buf, e.SIZE)
        if rc < 0:
            raise e.error(rc)
        return _results(n, res, e, e.text(), lambda v: v == 1)

    def batch_remove(self, keys, force=False):
        """None or Error per key."""
        h = self._handle()
        n, ka, kl = _keys(keys)
        e = ErrBuf()
        res = (ctypes.c_int64 * max(n, 1))()
        rc = lib.ts_batch_remove(h, n, ka, kl, 1 if force else 0, res, e.buf, e.SIZE)
        if rc < 0:
            raise e.error(rc)
        return _results(n, res, e, e.text(), lambda v: None)
