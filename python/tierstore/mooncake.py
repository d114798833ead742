"""Mooncake Store's Python API on tierstore: a drop-in for the connectors.

``MooncakeDistributedStore`` has the calls and the semantics of Mooncake's
class of that name (mooncake-integration/store/store_py.cpp), built on
``tierstore.Client``: vLLM's MooncakeStoreConnector, vLLM-Ascend's
AscendStoreConnector, SGLang HiCache's MooncakeStore and LMCache's
``mooncakestore://`` backend run on it unchanged (docs/python.md).

Mooncake's semantics, not tierstore's:
  * results are integers with Mooncake's numbers (0 ok, negative error);
    nothing raises but bad argument types and a bad ``soft_pin_ttl_ms``;
  * a put of an existing key returns 0 and writes nothing (tierstore's
    OBJECT_ALREADY_EXISTS, -705, is success here);
  * ``get`` of a missing key (or any error) returns ``b""``; ``is_exist``
    returns 1, 0 or -1; batch calls return one result per key, and
    lists of mismatched lengths give -600 per key, not an exception;
  * ``local_buffer_size`` is the staging buffer of the calls that copy
    (put, put_parts, put_batch, get, get_batch, get_buffer,
    batch_get_buffer): an object larger than it fails (-10 for puts,
    ``b""``/None for gets), so 0 makes a plain put fail; the zero-copy calls
    (``*_from``, ``*_into``) do not use it;
  * ``global_segment_size`` > 0 mounts a store node in this process
    (tierstore.Client(segment_size=...)); ``close`` unmounts it (its objects
    leave the pool) and ``setup`` may be called again.

Concurrency: every call may run from any number of threads; the I/O runs
in the Go library without the GIL. ``setup`` and ``close`` are serialised
by ``_lock`` (which guards ``_client`` and ``_cfg``); a call racing
``close`` gets an error result, never a crash.
"""

from __future__ import annotations

import ctypes
import enum
import logging
import os
import shutil
import threading

from . import config as _config

__all__ = ["MooncakeDistributedStore", "ReplicateConfig", "SoftPinAction", "ReplicaDescriptor", "BufferHandle"]

log = logging.getLogger("tierstore.mooncake")

# Mooncake's error numbers (mooncake-store/include/types.h) used here.
OK = 0
INTERNAL_ERROR = -1
BUFFER_OVERFLOW = -10
NO_AVAILABLE_HANDLE = -200
INVALID_PARAMS = -600
OBJECT_NOT_FOUND = -704
OBJECT_ALREADY_EXISTS = -705
OBJECT_HAS_LEASE = -706
REPLICA_IS_GONE = -712

# Errors a caller meets in normal operation: not logged.
_QUIET = {OBJECT_NOT_FOUND, OBJECT_ALREADY_EXISTS, OBJECT_HAS_LEASE, NO_AVAILABLE_HANDLE}

_U64 = 1 << 64


class SoftPinAction(enum.IntEnum):
    """What a put does to the object's soft pin (Mooncake's enum)."""

    PRESERVE = 0
    ENABLE = 1
    DISABLE = 2


class ReplicateConfig:
    """Placement of one put, Mooncake's fields.

    replica_num: DRAM replicas on that many different nodes (tierstore's
    ``replicas``; fewer live nodes with room: -200, nothing stored).
    preferred_segment / preferred_segments: "host:port" of the node to put
    on (tierstore's ``preferred_node``; of ``preferred_segments``, whose
    length must be replica_num, the first). prefer_alloc_in_same_node: this
    process's node. with_hard_pin: never evicted. with_soft_pin or
    soft_pin_action=ENABLE: evicted after unpinned objects.
    soft_pin_ttl_ms: None or an int in [0, 2^64) (TypeError otherwise), only
    with soft_pin_action ENABLE (else the put returns -600); tierstore's
    master applies its own soft pin TTL (default_kv_soft_pin_ttl).
    """

    def __init__(self, replica_num: int = 1, with_soft_pin: bool = False, with_hard_pin: bool = False,
                 preferred_segment: str = "", preferred_segments=None, prefer_alloc_in_same_node: bool = False,
                 soft_pin_action: SoftPinAction = SoftPinAction.PRESERVE, soft_pin_ttl_ms=None):
        self.replica_num = replica_num
        self.with_soft_pin = with_soft_pin
        self.with_hard_pin = with_hard_pin
        self.preferred_segment = preferred_segment
        self.preferred_segments = list(preferred_segments or [])
        self.prefer_alloc_in_same_node = prefer_alloc_in_same_node
        self.soft_pin_action = soft_pin_action
        self.soft_pin_ttl_ms = soft_pin_ttl_ms

    @property
    def soft_pin_ttl_ms(self):
        return self._soft_pin_ttl_ms

    @soft_pin_ttl_ms.setter
    def soft_pin_ttl_ms(self, value):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < _U64):
            raise TypeError(f"soft_pin_ttl_ms must be None or an int in [0, 2^64), got {value!r}")
        self._soft_pin_ttl_ms = value

    def __repr__(self):
        return (f"ReplicateConfig(replica_num={self.replica_num}, with_soft_pin={self.with_soft_pin}, "
                f"with_hard_pin={self.with_hard_pin}, preferred_segment={self.preferred_segment!r}, "
                f"preferred_segments={self.preferred_segments!r}, "
                f"prefer_alloc_in_same_node={self.prefer_alloc_in_same_node}, "
                f"soft_pin_action={SoftPinAction(self.soft_pin_action).name}, "
                f"soft_pin_ttl_ms={self.soft_pin_ttl_ms})")

    __str__ = __repr__


class ReplicaDescriptor:
    """One replica of an object: where it is and in which tier."""

    __slots__ = ("tier", "node", "object_size", "status")

    def __init__(self, tier: str, node: str, object_size: int, status: str = "COMPLETE"):
        self.tier = tier                # "dram" or "ssd" (tierstore's names)
        self.node = node                # "host:port" of the node holding it
        self.object_size = object_size
        self.status = status            # Mooncake's replica status name, e.g. "COMPLETE"

    # Mooncake's method names, on tierstore's tiers: its memory replica is
    # tierstore's DRAM, its (local) disk replica tierstore's SSD.
    def is_memory_replica(self) -> bool:
        return self.tier == "dram"

    def is_disk_replica(self) -> bool:
        return self.tier == "ssd"

    # tierstore's SSD tier is the node's own disk: Mooncake's LOCAL_DISK.
    is_local_disk_replica = is_disk_replica

    def get_memory_descriptor(self):
        return self if self.is_memory_replica() else None

    def get_disk_descriptor(self):
        return self if self.is_disk_replica() else None

    def __repr__(self):
        return f"ReplicaDescriptor(tier={self.tier!r}, node={self.node!r}, object_size={self.object_size})"


class BufferHandle(bytearray):
    """An object read into memory of its own (get_buffer): the buffer protocol, ptr() and size()."""

    def ptr(self) -> int:
        if not len(self):
            return 0
        return ctypes.addressof(ctypes.c_char.from_buffer(self))

    def size(self) -> int:
        return len(self)


def _code(exc: BaseException) -> int:
    """Mooncake's number for an exception of tierstore.Client (negative)."""
    code = getattr(exc, "code", None)
    if isinstance(code, int) and code < 0:
        return code
    return INTERNAL_ERROR


def _same_lengths(*lists) -> bool:
    try:
        n = len(lists[0])
        return all(len(x) == n for x in lists[1:])
    except TypeError:
        return False


def _host_memory(ptr: int, size: int) -> bool:
    """Whether the first and last bytes of [ptr, ptr+size) are readable memory of this process.

    A device pointer (CUDA, NPU) is not: tierstore moves bytes with the CPU,
    and handing it such an address would crash the process at the first
    transfer. Read through /proc/self/mem, which fails (EIO) instead of faulting.
    """
    try:
        fd = os.open("/proc/self/mem", os.O_RDONLY)
    except OSError:
        return True  # cannot tell: trust the caller
    try:
        for a in (ptr, ptr + size - 1):
            try:
                if len(os.pread(fd, 1, a)) != 1:
                    return False
            except (OSError, OverflowError):
                return False
        return True
    finally:
        os.close(fd)


class _NotSetUp(Exception):
    code = INVALID_PARAMS


class MooncakeDistributedStore:
    """Mooncake's store client on tierstore (see the module's doc)."""

    def __init__(self):
        self._lock = threading.Lock()   # guards _client, _cfg, _ssd_dir (setup/close)
        self._client = None             # tierstore.Client once set up
        self._cfg = None                # config.Config of the current setup
        self._ssd_dir = None            # this process's SSD directory, removed at close
        self._buffers_lock = threading.Lock()
        self._buffers = {}              # registered buffers: ptr -> size (guarded by _buffers_lock)
        self._node_ids = {}             # segment "host:port" -> node id (replaced whole, never mutated)

    # ---- setup and close -------------------------------------------------

    def setup(self, *args, **kwargs) -> int:
        """Mooncake's setup: positional, keyword, one dict, or nothing (MOONCAKE_CONFIG_PATH / MOONCAKE_*).

        0 on success; a bad configuration is -600 with one log line naming
        the field; a store that cannot start (master unreachable, address
        in use) is its error number.
        """
        try:
            cfg = self._parse_setup(args, kwargs)
        except _config.ConfigError as e:
            log.error("tierstore.mooncake setup: invalid configuration: %s", e)
            return INVALID_PARAMS
        if cfg.unknown:
            log.warning("tierstore.mooncake setup: ignoring configuration keys tierstore does not know: %s",
                        ", ".join(map(str, cfg.unknown)))
        with self._lock:
            if self._client is not None:
                log.error("tierstore.mooncake setup: already set up; close() first")
                return INVALID_PARAMS
            if cfg.metadata_server and cfg.metadata_server != "P2PHANDSHAKE":
                log.info("tierstore.mooncake setup: metadata_server %r is not needed (tierstore speaks TCP "
                         "to its nodes) and is ignored", cfg.metadata_server)
            ssd_dir = None
            if cfg.enable_ssd_offload:
                ssd_dir = os.path.join(cfg.ssd_offload_path, f"tierstore-{os.getpid()}")
                try:
                    if os.path.isdir(ssd_dir):
                        shutil.rmtree(ssd_dir)  # left by an earlier setup of this pid: its objects left the pool
                    os.makedirs(ssd_dir)
                except OSError as e:
                    log.error("tierstore.mooncake setup: invalid configuration: ssd_offload_path: %s", e)
                    return INVALID_PARAMS
            import tierstore
            try:
                client = tierstore.Client(master=cfg.master_server_address,
                                          segment_size=cfg.global_segment_size,
                                          local_hostname=cfg.local_hostname,
                                          ssd_dir=ssd_dir, ssd_capacity=0, tls_cert=cfg.tls_cert,
                                          tls_key=cfg.tls_key, tls_ca=cfg.tls_ca,
                                          grant_secret_file=cfg.grant_secret_file)
            except Exception as e:  # noqa: BLE001 - reported as Mooncake's number
                log.error("tierstore.mooncake setup: %s", e)
                if ssd_dir:
                    shutil.rmtree(ssd_dir, ignore_errors=True)
                return _code(e)
            self._client, self._cfg, self._ssd_dir, self._node_ids = client, cfg, ssd_dir, {}
        return OK

    @staticmethod
    def _parse_setup(args, kwargs) -> _config.Config:
        if len(args) == 1 and isinstance(args[0], dict) and not kwargs:
            return _config.parse(args[0])
        if not args and not kwargs:
            return _config.from_environment()
        if len(args) > len(_config.POSITIONAL):
            raise _config.ConfigError("setup", f"takes at most {len(_config.POSITIONAL)} positional "
                                               f"arguments, got {len(args)}")
        fields = dict(zip(_config.POSITIONAL, args))
        for k, v in kwargs.items():
            if _config._ALIASES.get(k, k) in fields:
                raise _config.ConfigError(k, "given both positionally and by keyword")
            fields[k] = v
        return _config.parse(fields)

    def close(self) -> int:
        """Unmount this process's segment (its objects leave the pool); setup may follow. Always 0."""
        with self._lock:
            client, ssd_dir = self._client, self._ssd_dir
            self._client = self._cfg = self._ssd_dir = None
            if client is not None:
                try:
                    client.close()
                except Exception as e:  # noqa: BLE001
                    log.warning("tierstore.mooncake close: %s", e)
            if ssd_dir:
                shutil.rmtree(ssd_dir, ignore_errors=True)
        with self._buffers_lock:
            self._buffers.clear()
        return OK

    def _c(self):
        c = self._client
        if c is None:
            raise _NotSetUp("store is not set up (call setup first)")
        return c

    def _fail(self, call: str, e: BaseException) -> int:
        code = _code(e)
        if code not in _QUIET:
            log.warning("tierstore.mooncake %s: %s", call, e)
        return code

    def _exist_fail(self, call: str, e: BaseException) -> int:
        """is_exist's answer for an error: 0, not logged, when every replica
        of the object is gone (its node left or died while a read lease was
        held: nothing can be read, so it is a miss; LMCache tests the answer
        as a bool), -1 for any other error."""
        if _code(e) == REPLICA_IS_GONE:
            return 0
        self._fail(call, e)
        return -1

    def _staging(self, n: int) -> bool:
        """Whether n bytes fit the staging buffer (local_buffer_size) of the copying calls."""
        cfg = self._cfg
        return cfg is not None and n <= cfg.local_buffer_size

    def _put_opts(self, config):
        """tierstore put options for a ReplicateConfig, or an error number."""
        if config is None:
            return {}
        if not isinstance(config, ReplicateConfig):
            raise TypeError(f"config must be a ReplicateConfig, got {type(config).__name__}")
        if not isinstance(config.replica_num, int) or config.replica_num < 1:
            log.error("tierstore.mooncake: replica_num must be >= 1, got %r", config.replica_num)
            return INVALID_PARAMS
        if config.preferred_segments and len(config.preferred_segments) != config.replica_num:
            log.error("tierstore.mooncake: preferred_segments has %d entries, replica_num is %d",
                      len(config.preferred_segments), config.replica_num)
            return INVALID_PARAMS
        if config.soft_pin_ttl_ms is not None and config.soft_pin_action != SoftPinAction.ENABLE:
            log.error("tierstore.mooncake: soft_pin_ttl_ms is only valid with soft_pin_action ENABLE")
            return INVALID_PARAMS
        opts = {}
        if config.replica_num != 1:
            opts["replicas"] = config.replica_num
        # prefer_alloc_in_same_node: a client with a segment prefers it already (tierstore.Client's default).
        node = config.preferred_segment or (config.preferred_segments[0] if config.preferred_segments else "")
        if node:
            opts["preferred_node"] = self._node_id(node)
        if config.with_soft_pin or config.soft_pin_action == SoftPinAction.ENABLE:
            opts["soft_pin"] = True
        if config.with_hard_pin:
            opts["hard_pin"] = True
        return opts

    def _node_id(self, segment: str) -> str:
        """The master's node id for a Mooncake segment name ("host:port", the node's endpoint).

        Looked up in the master's per-node stats and cached per setup; a name
        that is no live node's endpoint is passed on unchanged (an id, or
        unknown: the master then places the object anywhere).
        """
        ids = self._node_ids
        if segment not in ids:
            try:
                per_node = self._c().stats().get("master", {}).get("PerNode") or []
                ids = {n["Endpoint"]: n["Node"] for n in per_node if n.get("Alive") and n.get("Endpoint")}
                self._node_ids = ids
            except Exception as e:  # noqa: BLE001 - placement is a preference
                log.warning("tierstore.mooncake: cannot map segment %r to a node: %s", segment, e)
        return ids.get(segment, segment)

    # ---- buffers ----------------------------------------------------------

    def register_buffer(self, buffer_ptr: int, size: int) -> int:
        """Record [ptr, ptr+size) as a buffer of the zero-copy calls. 0, or -600 for a bad range."""
        if not isinstance(buffer_ptr, int) or not isinstance(size, int) or buffer_ptr <= 0 or size <= 0:
            log.error("tierstore.mooncake register_buffer: bad buffer (ptr=%r, size=%r)", buffer_ptr, size)
            return INVALID_PARAMS
        if not _host_memory(buffer_ptr, size):
            log.error("tierstore.mooncake register_buffer: [%#x, +%d) is not host memory of this process (a GPU or "
                      "NPU device pointer?): tierstore moves bytes with the CPU; register host (CPU) buffers",
                      buffer_ptr, size)
            return INVALID_PARAMS
        with self._buffers_lock:
            self._buffers[buffer_ptr] = size
        return OK

    def unregister_buffer(self, buffer_ptr: int) -> int:
        """Forget a registered buffer: 0, or -600 if it was not registered."""
        with self._buffers_lock:
            if self._buffers.pop(buffer_ptr, None) is None:
                log.error("tierstore.mooncake unregister_buffer: %r is not registered", buffer_ptr)
                return INVALID_PARAMS
        return OK

    # ---- puts -------------------------------------------------------------

    def _put(self, call, key, parts, config, staged: bool) -> int:
        try:
            opts = self._put_opts(config)
            if isinstance(opts, int):
                return opts
            c = self._c()
            if staged:
                n = sum(memoryview(p).nbytes for p in parts)
                if not self._staging(n):
                    log.error("tierstore.mooncake %s: %d bytes do not fit the staging buffer (local_buffer_size=%d); "
                              "use put_from with a registered buffer", call, n, self._cfg.local_buffer_size)
                    return BUFFER_OVERFLOW
            c.put_parts(key, list(parts), **opts)
            return OK
        except TypeError:
            raise
        except Exception as e:  # noqa: BLE001
            if _code(e) == OBJECT_ALREADY_EXISTS:
                return OK
            return self._fail(call, e)

    def put(self, key: str, value, config: ReplicateConfig = None) -> int:
        """Store value (bytes-like) under key: 0 (also when key exists: nothing is written) or negative."""
        return self._put("put", key, [value], config, staged=True)

    def put_parts(self, key: str, *parts, config: ReplicateConfig = None) -> int:
        """Store the concatenation of parts as one object."""
        return self._put("put_parts", key, parts, config, staged=True)

    def put_from(self, key: str, buffer_ptr: int, size: int, config: ReplicateConfig = None) -> int:
        """Zero-copy put of [buffer_ptr, buffer_ptr+size)."""
        if not self._range_ok("put_from", buffer_ptr, size):
            return INVALID_PARAMS
        return self._put("put_from", key, [(buffer_ptr, size)], config, staged=False)

    def put_batch(self, keys, values, config: ReplicateConfig = None) -> int:
        """Store every value: 0 if all were stored (or existed), else the first error."""
        if not _same_lengths(keys, values):
            log.error("tierstore.mooncake put_batch: keys and values differ in length")
            return INVALID_PARAMS
        if not keys:
            return OK
        for v in values:
            if not self._staging(memoryview(v).nbytes):
                log.error("tierstore.mooncake put_batch: a value does not fit the staging buffer "
                          "(local_buffer_size=%d)", self._cfg.local_buffer_size if self._cfg else 0)
                return BUFFER_OVERFLOW if self._cfg else INVALID_PARAMS
        res = self._batch_put("put_batch", keys, [[v] for v in values], config)
        return next((r for r in res if r != OK), OK)

    def batch_put_from(self, keys, buffer_ptrs, sizes, config: ReplicateConfig = None) -> list:
        """Zero-copy put of one buffer per key: one result per key."""
        if not _same_lengths(keys, buffer_ptrs, sizes):
            log.error("tierstore.mooncake batch_put_from: keys, buffer_ptrs and sizes differ in length")
            return [INVALID_PARAMS] * len(keys)
        parts = []
        for p, s in zip(buffer_ptrs, sizes):
            if not self._range_ok("batch_put_from", p, s):
                return [INVALID_PARAMS] * len(keys)
            parts.append([(p, s)])
        return self._batch_put("batch_put_from", keys, parts, config)

    def batch_put_from_multi_buffers(self, keys, all_buffer_ptrs, all_sizes, config: ReplicateConfig = None) -> list:
        """Zero-copy put of one object per key gathered from several buffers: one result per key."""
        if not _same_lengths(keys, all_buffer_ptrs, all_sizes):
            log.error("tierstore.mooncake batch_put_from_multi_buffers: keys, buffer lists and size lists "
                      "differ in length")
            return [INVALID_PARAMS] * len(keys)
        parts = []
        for ptrs, sizes in zip(all_buffer_ptrs, all_sizes):
            if not _same_lengths(ptrs, sizes) or not all(self._range_ok("batch_put_from_multi_buffers", p, s)
                                                         for p, s in zip(ptrs, sizes)):
                log.error("tierstore.mooncake batch_put_from_multi_buffers: a key's buffers and sizes differ")
                return [INVALID_PARAMS] * len(keys)
            parts.append(list(zip(ptrs, sizes)))
        return self._batch_put("batch_put_from_multi_buffers", keys, parts, config)

    def _batch_put(self, call, keys, parts_per_key, config) -> list:
        if not keys:
            return []
        try:
            opts = self._put_opts(config)
            if isinstance(opts, int):
                return [opts] * len(keys)
            res = self._c().batch_put_parts(list(keys), parts_per_key, **opts)
        except TypeError:
            raise
        except Exception as e:  # noqa: BLE001
            return [self._fail(call, e)] * len(keys)
        out = []
        for r in res:
            if r is None or _code(r) == OBJECT_ALREADY_EXISTS:
                out.append(OK)
            else:
                out.append(self._fail(call, r))
        return out

    def _range_ok(self, call, ptr, size) -> bool:
        if isinstance(ptr, bool) or isinstance(size, bool) or not isinstance(ptr, int) or not isinstance(size, int) \
                or ptr <= 0 or size < 0:
            log.error("tierstore.mooncake %s: bad buffer (ptr=%r, size=%r)", call, ptr, size)
            return False
        return True

    # ---- gets -------------------------------------------------------------

    def get(self, key: str) -> bytes:
        """The value of key, or b"" when it is missing or on any error."""
        try:
            data = self._c().get(key)
        except Exception as e:  # noqa: BLE001
            self._fail("get", e)
            return b""
        if not self._staging(len(data)):
            log.error("tierstore.mooncake get: %d bytes do not fit the staging buffer (local_buffer_size=%d); "
                      "use get_into", len(data), self._cfg.local_buffer_size if self._cfg else 0)
            return b""
        return data

    def get_batch(self, keys) -> list:
        """get for each key."""
        return [self.get(k) for k in keys]

    def get_buffer(self, key: str):
        """The value of key in a BufferHandle (ptr(), size(), buffer protocol), or None."""
        try:
            c = self._c()
            n = c.get_size(key)
            if not self._staging(n):
                log.error("tierstore.mooncake get_buffer: %d bytes do not fit the staging buffer", n)
                return None
            buf = BufferHandle(n)
            got = c.get_into(key, buf)
            if got != n:
                return None
            return buf
        except Exception as e:  # noqa: BLE001
            self._fail("get_buffer", e)
            return None

    def batch_get_buffer(self, keys) -> list:
        """get_buffer for each key, read in one batch."""
        if not keys:
            return []
        try:
            c = self._c()
        except _NotSetUp:
            return [None] * len(keys)
        bufs = []
        for k in keys:
            try:
                n = c.get_size(k)
                bufs.append(BufferHandle(n) if self._staging(n) else None)
            except Exception as e:  # noqa: BLE001
                self._fail("batch_get_buffer", e)
                bufs.append(None)
        idx = [i for i, b in enumerate(bufs) if b is not None]
        if not idx:
            return bufs
        try:
            res = c.batch_get_into([keys[i] for i in idx], [bufs[i] for i in idx])
        except Exception as e:  # noqa: BLE001
            self._fail("batch_get_buffer", e)
            return [None] * len(keys)
        for i, r in zip(idx, res):
            if not isinstance(r, int) or r != len(bufs[i]):
                if not isinstance(r, int):
                    self._fail("batch_get_buffer", r)
                bufs[i] = None
        return bufs

    def get_into(self, key: str, buffer_ptr: int, size: int) -> int:
        """Read key into [buffer_ptr, buffer_ptr+size): bytes read, or negative (also for a too-small buffer)."""
        if not self._range_ok("get_into", buffer_ptr, size):
            return INVALID_PARAMS
        try:
            return self._c().get_into(key, (buffer_ptr, size))
        except Exception as e:  # noqa: BLE001
            return self._fail("get_into", e)

    def batch_get_into(self, keys, buffer_ptrs, sizes) -> list:
        """get_into for each key, in one batch: bytes read or negative per key."""
        if not _same_lengths(keys, buffer_ptrs, sizes):
            log.error("tierstore.mooncake batch_get_into: keys, buffer_ptrs and sizes differ in length")
            return [INVALID_PARAMS] * len(keys)
        if not keys:
            return []
        if not all(self._range_ok("batch_get_into", p, s) for p, s in zip(buffer_ptrs, sizes)):
            return [INVALID_PARAMS] * len(keys)
        try:
            res = self._c().batch_get_into(list(keys), [(p, s) for p, s in zip(buffer_ptrs, sizes)])
        except Exception as e:  # noqa: BLE001
            return [self._fail("batch_get_into", e)] * len(keys)
        return [r if isinstance(r, int) else self._fail("batch_get_into", r) for r in res]

    def batch_get_into_multi_buffers(self, keys, all_buffer_ptrs, all_sizes,
                                     prefer_alloc_in_same_node: bool = False) -> list:
        """Scatter each key's object over its buffers in order: bytes read or negative per key."""
        if not _same_lengths(keys, all_buffer_ptrs, all_sizes):
            log.error("tierstore.mooncake batch_get_into_multi_buffers: keys, buffer lists and size lists "
                      "differ in length")
            return [INVALID_PARAMS] * len(keys)
        if not keys:
            return []
        parts = []
        for ptrs, sizes in zip(all_buffer_ptrs, all_sizes):
            if not _same_lengths(ptrs, sizes) or not all(self._range_ok("batch_get_into_multi_buffers", p, s)
                                                         for p, s in zip(ptrs, sizes)):
                log.error("tierstore.mooncake batch_get_into_multi_buffers: a key's buffers and sizes differ")
                return [INVALID_PARAMS] * len(keys)
            parts.append(list(zip(ptrs, sizes)))
        try:
            res = self._c().batch_get_into_parts(list(keys), parts)
        except Exception as e:  # noqa: BLE001
            return [self._fail("batch_get_into_multi_buffers", e)] * len(keys)
        return [r if isinstance(r, int) else self._fail("batch_get_into_multi_buffers", r) for r in res]

    # ---- queries ----------------------------------------------------------

    def is_exist(self, key: str) -> int:
        """1 if key exists, 0 if not, -1 on error."""
        try:
            return 1 if self._c().exists(key) else 0
        except Exception as e:  # noqa: BLE001
            return self._exist_fail("is_exist", e)

    def batch_is_exist(self, keys) -> list:
        """is_exist for each key, in one batch."""
        if not keys:
            return []
        try:
            res = self._c().batch_exists(list(keys))
        except Exception as e:  # noqa: BLE001
            self._fail("batch_is_exist", e)
            return [-1] * len(keys)
        out = []
        for r in res:
            if isinstance(r, bool):
                out.append(1 if r else 0)
            else:
                out.append(self._exist_fail("batch_is_exist", r))
        return out

    def get_size(self, key: str) -> int:
        """The object's size in bytes, or negative (-704 when missing)."""
        try:
            return self._c().get_size(key)
        except Exception as e:  # noqa: BLE001
            return self._fail("get_size", e)

    def get_replica_desc(self, key: str) -> list:
        """The object's replicas (empty when missing or on error)."""
        try:
            return [ReplicaDescriptor(r["tier"], r["node"], r["size"], r.get("status") or "COMPLETE")
                    for r in self._c().replicas(key)]
        except Exception as e:  # noqa: BLE001
            self._fail("get_replica_desc", e)
            return []

    def batch_get_replica_desc(self, keys) -> dict:
        """{key: get_replica_desc(key)} for each key."""
        return {k: self.get_replica_desc(k) for k in keys}

    def get_hostname(self) -> str:
        """"host:port" of this process's node (its segment), or of this client's host; "" before setup."""
        c = self._client
        return c.hostname if c is not None else ""

    def health_check(self) -> int:
        """0 healthy, 1 not set up or closed, 2 master unreachable."""
        c = self._client
        if c is None:
            return 1
        try:
            return c.health()
        except Exception as e:  # noqa: BLE001
            self._fail("health_check", e)
            return 1

    # ---- removals ---------------------------------------------------------

    def remove(self, key: str, force: bool = False) -> int:
        """0, -704 not found, -706 leased (force skips the lease)."""
        try:
            self._c().remove(key, force=force)
            return OK
        except Exception as e:  # noqa: BLE001
            return self._fail("remove", e)

    def batch_remove(self, keys, force: bool = False) -> list:
        """remove for each key: one result per key."""
        if not keys:
            return []
        try:
            res = self._c().batch_remove(list(keys), force=force)
        except Exception as e:  # noqa: BLE001
            return [self._fail("batch_remove", e)] * len(keys)
        return [OK if r is None else self._fail("batch_remove", r) for r in res]

    def remove_all(self, force: bool = False) -> int:
        """Remove every object: the count removed, or negative."""
        try:
            return self._c().remove_all(force=force)
        except Exception as e:  # noqa: BLE001
            return self._fail("remove_all", e)

    def remove_by_regex(self, pattern: str, force: bool = False) -> int:
        """Remove every object whose key matches pattern (RE2 syntax, anywhere in the key): count, or negative."""
        try:
            return self._c().remove_by_regex(pattern, force=force)
        except Exception as e:  # noqa: BLE001
            return self._fail("remove_by_regex", e)

    # ---- Mooncake calls tierstore does not have (docs/python.md) -----------

    def _unsupported(self, name, instead):
        raise NotImplementedError(f"MooncakeDistributedStore.{name} is not supported by tierstore; {instead}")

    def upsert(self, *a, **k):
        self._unsupported("upsert", "objects are immutable: remove(key, force=True) then put")

    upsert_from = upsert_parts = upsert_batch = batch_upsert_from = batch_upsert_from_multi_buffers = upsert

    def put_tensor(self, *a, **k):
        self._unsupported("put_tensor", "use put_from(key, t.data_ptr(), t.numel() * t.element_size())")

    get_tensor = batch_put_tensor = batch_get_tensor = pub_tensor = get_tensor_into = batch_get_tensor_into = \
        put_tensor_with_tp = get_tensor_with_tp = put_tensor
