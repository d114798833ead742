"""tierstore: the Python client of tierstore, an SSD-tiered KV-cache store.

    import tierstore
    c = tierstore.Client(master="127.0.0.1:50051")
    c.put("k", b"v"); c.get("k")

The package wraps the Go client (and, with segment_size > 0, a store node
in this process) compiled into libtierstore.so (`make python`), loaded with
ctypes; see docs/python.md. Errors are tierstore.Error with .code (Mooncake's
number) and .name; tierstore.codes is the table of codes.
"""

from ._native import Error, codes, LIB_PATH
from .client import Client

__all__ = ["Client", "Error", "codes", "LIB_PATH"]
