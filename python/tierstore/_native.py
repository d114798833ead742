"""ctypes bindings of libtierstore.so, the Go client's C ABI (python/capi).

The library is python/tierstore/_lib/libtierstore.so (built by `make python`)
or the file named by the environment variable TIERSTORE_LIB. Every call
into it releases the GIL (ctypes.CDLL). This module also holds the buffer
helpers (any buffer-protocol object, or an (addr, size) tuple) and the
fork guard: the Go runtime does not survive fork(), so in a child forked
after the library was loaded every call raises Error at once.
"""

import ctypes
import json
import os

_HERE = os.path.dirname(os.path.abspath(__file__))
LIB_PATH = os.environ.get("TIERSTORE_LIB") or os.path.join(_HERE, "_lib", "libtierstore.so")
BUILD_HINT = "build it with `make python` at the root of the tierstore repository (or set TIERSTORE_LIB to its path)"

if not os.path.exists(LIB_PATH):
    raise ImportError("tierstore: the native library %s is missing: %s" % (LIB_PATH, BUILD_HINT))
try:
    lib = ctypes.CDLL(LIB_PATH)
except OSError as e:  # pragma: no cover - a broken build
    raise ImportError("tierstore: cannot load %s (%s): %s" % (LIB_PATH, e, BUILD_HINT)) from e

_i64 = ctypes.c_int64
_p = ctypes.c_void_p
_cp = ctypes.c_char_p
_pp = ctypes.POINTER(ctypes.c_void_p)
_i64p = ctypes.POINTER(ctypes.c_int64)
_cpp = ctypes.POINTER(ctypes.c_char_p)

_SIGS = {
    "ts_open": [_cp, _cp, _i64],
    "ts_close": [_i64, _cp, _i64],
    "ts_put": [_i64, _cp, _i64, _p, _i64, _i64, _i64, _cp, _cp, _i64],
    "ts_put_parts": [_i64, _cp, _i64, _pp, _i64p, _i64, _i64, _i64, _cp, _cp, _i64],
    "ts_get_into": [_i64, _cp, _i64, _p, _i64, _cp, _i64],
    "ts_get_into_parts": [_i64, _cp, _i64, _pp, _i64p, _i64, _cp, _i64],
    "ts_get": [_i64, _cp, _i64, _pp, _cp, _i64],
    "ts_batch_put": [_i64, _i64, _cpp, _i64p, _pp, _i64p, _i64, _i64, _cp, _i64p, _cp, _i64],
    "ts_batch_put_parts": [_i64, _i64, _cpp, _i64p, _i64p, _pp, _i64p, _i64, _i64, _cp, _i64p, _cp, _i64],
    "ts_batch_get_into": [_i64, _i64, _cpp, _i64p, _pp, _i64p, _i64p, _cp, _i64],
    "ts_batch_get_into_parts": [_i64, _i64, _cpp, _i64p, _i64p, _pp, _i64p, _i64p, _cp, _i64],
    "ts_exists": [_i64, _cp, _i64, _cp, _i64],
    "ts_batch_exists": [_i64, _i64, _cpp, _i64p, _i64p, _cp, _i64],
    "ts_get_size": [_i64, _cp, _i64, _cp, _i64],
    "ts_remove": [_i64, _cp, _i64, _i64, _cp, _i64],
    "ts_batch_remove": [_i64, _i64, _cpp, _i64p, _i64, _i64p, _cp, _i64],
    "ts_remove_all": [_i64, _i64, _cp, _i64],
    "ts_remove_by_regex": [_i64, _cp, _i64, _cp, _i64],
    "ts_replicas": [_i64, _cp, _i64, _cp, _i64, _cp, _i64],
    "ts_stats": [_i64, _cp, _i64, _cp, _i64],
    "ts_health": [_i64],
    "ts_hostname": [_i64, _cp, _i64, _cp, _i64],
    "ts_codes": [_cp, _i64],
}
for _name, _args in _SIGS.items():
    _f = getattr(lib, _name)
    _f.argtypes = _args
    _f.restype = _i64
# The data calls and the lookups go through the library's call queue (python/capi/queue.c):
# tsq_NAME has ts_NAME's signature and, when another call is in flight, runs
# the call on a goroutine while this thread waits in C (docs/python.md,
# "Threads"). lib.ts_NAME is bound to it, so that every caller uses it.
QUEUED = ("ts_put", "ts_put_parts", "ts_get_into", "ts_get_into_parts", "ts_batch_put",
          "ts_batch_put_parts", "ts_batch_get_into", "ts_batch_get_into_parts", "ts_get", "ts_exists",
          "ts_batch_exists")
for _name in QUEUED:
    _f = getattr(lib, "tsq_" + _name[3:])
    _f.argtypes = _SIGS[_name]
    _f.restype = _i64
    setattr(lib, _name, _f)
lib.tsq_counts.argtypes = [_i64p, _i64p]
lib.tsq_counts.restype = _i64


def call_counts():
    """(direct, queued): how many data calls of this process ran on their
    caller's thread and how many went through the call queue."""
    d, q = _i64(), _i64()
    lib.tsq_counts(ctypes.byref(d), ctypes.byref(q))
    return d.value, q.value


lib.ts_free.argtypes = [_p]
lib.ts_free.restype = None

# --- error codes -----------------------------------------------------------


def _json_answer(call, *args):
    """Calls a ts_* function that answers JSON into (out, outlen), growing
    the buffer until the answer fits; returns the decoded value."""
    size = 4096
    while True:
        out = ctypes.create_string_buffer(size)
        n = call(*args, out, size)
        if n < size:
            return json.loads(out.value.decode("utf-8")) if n >= 0 else n
        size = n + 1


class Codes:
    """tierstore's error codes (Mooncake's numbers), read from the library:
    codes.OBJECT_NOT_FOUND == -704, codes.name(-704) == "OBJECT_NOT_FOUND",
    codes.table == {-704: "OBJECT_NOT_FOUND", ...}."""

    def __init__(self, table):
        self.table = dict(sorted(table.items(), reverse=True))
        for code, name in self.table.items():
            setattr(self, name, code)

    def name(self, code):
        return self.table.get(code, "CODE(%d)" % code)

    def __iter__(self):
        return iter(self.table.items())

    def __repr__(self):
        return "tierstore.codes(%r)" % self.table


codes = Codes({int(k): v for k, v in _json_answer(lib.ts_codes).items()})


class Error(Exception):
    """A tierstore error: .code is Mooncake's negative number (e.g. -704),
    .name its name ("OBJECT_NOT_FOUND"); the message holds both and the Go
    error text."""

    def __init__(self, code, message=""):
        self.code = int(code)
        self.name = codes.name(self.code)
        self.message = message
        text = "%s (%d)" % (self.name, self.code)
        if message:
            text += ": " + message
        super().__init__(text)

    def __reduce__(self):
        return (Error, (self.code, self.message))


# --- fork guard ------------------------------------------------------------

_loaded_pid = os.getpid()
_forked = False


def _after_fork_in_child():
    global _forked
    _forked = True


os.register_at_fork(after_in_child=_after_fork_in_child)

FORK_MESSAGE = ("tierstore: this process was fork()ed from process %d after libtierstore was loaded; "
                "the Go runtime does not survive fork(), so no call can work here. Start worker processes "
                "with multiprocessing's \"spawn\" start method (multiprocessing.get_context(\"spawn\")), "
                "or import tierstore only in the child.")


def check_process():
    """Raises Error at once in a child forked after the library was loaded."""
    if _forked or os.getpid() != _loaded_pid:
        raise Error(getattr(codes, "UNAVAILABLE_IN_CURRENT_STATUS", -1010),
                    FORK_MESSAGE % _loaded_pid)


# --- buffers -----------------------------------------------------------------


class _PyBuffer(ctypes.Structure):
    _fields_ = [
        ("buf", ctypes.c_void_p),
        ("obj", ctypes.c_void_p),
        ("len", ctypes.c_ssize_t),
        ("itemsize", ctypes.c_ssize_t),
        ("readonly", ctypes.c_int),
        ("ndim", ctypes.c_int),
        ("format", ctypes.c_char_p),
        ("shape", ctypes.c_void_p),
        ("strides", ctypes.c_void_p),
        ("suboffsets", ctypes.c_void_p),
        ("internal", ctypes.c_void_p),
    ]


_PyBUF_SIMPLE = 0
_PyBUF_WRITABLE = 1
_get_buffer = ctypes.pythonapi.PyObject_GetBuffer
_get_buffer.argtypes = [ctypes.py_object, ctypes.POINTER(_PyBuffer), ctypes.c_int]
_get_buffer.restype = ctypes.c_int
_release_buffer = ctypes.pythonapi.PyBuffer_Release
_release_buffer.argtypes = [ctypes.POINTER(_PyBuffer)]
_release_buffer.restype = None


class Buffers:
    """Holds the buffers of one call: add() returns (addr, size) of a
    buffer-protocol object (kept exported, so it can be neither resized
    nor freed, until release()) or of an (addr, size) tuple."""

    __slots__ = ("_views",)

    def __init__(self):
        self._views = []

    def add(self, obj, writable, what="buffer"):
        if isinstance(obj, tuple):
            if len(obj) != 2 or not all(isinstance(x, int) for x in obj):
                raise TypeError("%s: a tuple must be (addr: int, size: int), got %r" % (what, obj))
            addr, size = obj
            if size < 0 or (addr == 0 and size > 0):
                raise Error(codes.INVALID_PARAMS, "%s: (addr=%#x, size=%d) is not a buffer" % (what, addr, size))
            return addr, size
        view = _PyBuffer()
        try:
            rc = _get_buffer(obj, ctypes.byref(view), _PyBUF_WRITABLE if writable else _PyBUF_SIMPLE)
        except BufferError as e:
            kind = "a writable contiguous" if writable else "a contiguous"
            raise TypeError("%s: %s buffer is needed (%s), got %s: %s"
                            % (what, kind, "bytearray, memoryview, numpy array or (addr, size)", type(obj).__name__, e)) from None
        except TypeError:
            raise TypeError("%s: expected a buffer-protocol object or an (addr, size) tuple, got %s"
                            % (what, type(obj).__name__)) from None
        if rc != 0:  # pragma: no cover - ctypes raises instead
            raise TypeError("%s: cannot get a buffer from %s" % (what, type(obj).__name__))
        self._views.append(view)
        return view.buf or 0, view.len

    def release(self):
        for v in self._views:
            _release_buffer(ctypes.byref(v))
        self._views = []

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.release()


def key_bytes(key):
    if isinstance(key, str):
        return key.encode("utf-8")
    if isinstance(key, (bytes, bytearray)):
        return bytes(key)
    raise TypeError("key must be str or bytes, got %s" % type(key).__name__)


class ErrBuf:
    """A per-call error text buffer (thread-safe: one per call)."""

    SIZE = 2048

    def __init__(self):
        self.buf = ctypes.create_string_buffer(self.SIZE)

    def text(self):
        return self.buf.value.decode("utf-8", "replace")

    def error(self, code):
        return Error(code, self.text())

