"""Mooncake's store configuration, parsed and checked for tierstore.

``MooncakeDistributedStore.setup`` takes its configuration in four forms,
as Mooncake's does: positional and keyword arguments, one dict, the JSON
file named by ``MOONCAKE_CONFIG_PATH``, or the ``MOONCAKE_*`` environment
variables. All four end in :func:`parse`, which returns a :class:`Config`
or raises :class:`ConfigError` naming the one field that is wrong.

Invariants:
  * a size is a non-negative integer of bytes, given as a number or a
    string with a binary unit ("16MB" = 16 MiB, "1.5 GB", "4096");
    anything else ("50%", "-1", "lots", True) is refused naming the field;
  * ``protocol`` is "tcp" (any case); "rdma", "ascend" and anything else are
    refused with a message saying tierstore speaks TCP;
  * ``master_server_address`` is "host:port" or "etcd://..." and required;
  * ``enable_ssd_offload`` needs ``ssd_offload_path`` and a segment
    (``global_segment_size`` > 0): the SSD tier lives under the segment;
  * ``tls_cert``, ``tls_key``, ``tls_ca`` (tierstore's mutual TLS) are all
    three readable files or none; when the configuration names none, the
    variables TIERSTORE_TLS_CERT, TIERSTORE_TLS_KEY, TIERSTORE_TLS_CA give
    them (in every form of setup, positional too);
  * ``grant_secret_file`` (tierstore's grants, the node's
    --grant_secret_file) is a readable file and needs a segment
    (``global_segment_size`` > 0): only the in-process node uses it; when
    the configuration names none, TIERSTORE_GRANT_SECRET_FILE gives it to a
    setup with a segment (and is ignored without one).

The module has no state and imports nothing native: it is safe to use
from any thread and before the library is loaded.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re

__all__ = ["Config", "ConfigError", "parse", "parse_size", "from_env", "from_file", "from_environment", "POSITIONAL"]

# Mooncake's defaults (store_py.cpp's setup and mooncake_config.py).
DEFAULT_SEGMENT_SIZE = 16 * 1024 * 1024
DEFAULT_LOCAL_BUFFER_SIZE = 16 * 1024 * 1024
DEFAULT_MASTER = "127.0.0.1:50051"

# The order of Mooncake's positional setup arguments.
POSITIONAL = (
    "local_hostname",
    "metadata_server",
    "global_segment_size",
    "local_buffer_size",
    "protocol",
    "device_name",
    "master_server_address",
)

# Other spellings Mooncake's bindings and configs use for the same field.
_ALIASES = {
    "master_server_addr": "master_server_address",
    "master_addr": "master_server_address",
    "rdma_devices": "device_name",
    "te_meta_data_server": "metadata_server",
}

# Accepted and without effect in tierstore (kept so that configs written for
# Mooncake load unchanged).
_IGNORED = {"engine", "tenant_id", "enable_client_http_server", "client_http_port",
            "transfer_timeout", "replica_num", "mode", "enable_offload", "device_name_per_gpu"}


class ConfigError(ValueError):
    """A configuration field that is wrong; ``field`` names it."""

    def __init__(self, field: str, msg: str):
        super().__init__(f"{field}: {msg}")
        self.field = field


@dataclasses.dataclass
class Config:
    """One store configuration, checked."""

    local_hostname: str = "127.0.0.1"
    metadata_server: str = ""
    global_segment_size: int = DEFAULT_SEGMENT_SIZE
    local_buffer_size: int = DEFAULT_LOCAL_BUFFER_SIZE
    protocol: str = "tcp"
    device_name: str = ""
    master_server_address: str = DEFAULT_MASTER
    enable_ssd_offload: bool = False
    ssd_offload_path: str = ""
    # Mutual TLS (tierstore's, not Mooncake's): the three paths, or none.
    tls_cert: str = ""
    tls_key: str = ""
    tls_ca: str = ""
    # The grant secret the masters share (tierstore's): the in-process node checks grants with it.
    grant_secret_file: str = ""
    unknown: list = dataclasses.field(default_factory=list)  # keys given that tierstore does not know


_UNITS = {
    "": 1, "b": 1,
    "k": 1 << 10, "kb": 1 << 10, "kib": 1 << 10,
    "m": 1 << 20, "mb": 1 << 20, "mib": 1 << 20,
    "g": 1 << 30, "gb": 1 << 30, "gib": 1 << 30,
    "t": 1 << 40, "tb": 1 << 40, "tib": 1 << 40,
}
_SIZE_RE = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*([a-zA-Z]*)\s*$")


def parse_size(field: str, value) -> int:
    """Bytes from a number or a string like "16MB" (units are binary, as Mooncake's)."""
    if isinstance(value, bool):
        raise ConfigError(field, f"want a size in bytes, got {value!r}")
    if isinstance(value, int):
        n = value
    elif isinstance(value, float):
        if not value.is_integer():
            raise ConfigError(field, f"want a whole number of bytes, got {value!r}")
        n = int(value)
    elif isinstance(value, str):
        m = _SIZE_RE.match(value)
        unit = m.group(2).lower() if m else None
        if not m or unit not in _UNITS:
            raise ConfigError(field, f"want a size like 16MB or 4096, got {value!r}")
        n = int(float(m.group(1)) * _UNITS[unit])
    else:
        raise ConfigError(field, f"want a size in bytes, got {type(value).__name__} {value!r}")
    if n < 0:
        raise ConfigError(field, f"must not be negative, got {value!r}")
    return n


def _parse_bool(field: str, value) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    if isinstance(value, str) and value.strip().lower() in ("1", "true", "yes", "on", "0", "false", "no", "off", ""):
        return value.strip().lower() in ("1", "true", "yes", "on")
    raise ConfigError(field, f"want true or false, got {value!r}")


def _parse_str(field: str, value) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        raise ConfigError(field, f"want a string, got {type(value).__name__} {value!r}")
    return value.strip()


def _check_hostport(field: str, value: str, need_port: bool) -> None:
    host, sep, port = value.rpartition(":")
    if not sep:
        if need_port:
            raise ConfigError(field, f"want host:port, got {value!r}")
        return
    if not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ConfigError(field, f"want host or host:port with a port in 0..65535, got {value!r}")


# The environment variables that give the TLS files when the configuration
# does not: connectors that call setup() with Mooncake's positional
# arguments (vLLM) have no other way to pass them.
TLS_ENV = {"TIERSTORE_TLS_CERT": "tls_cert", "TIERSTORE_TLS_KEY": "tls_key", "TIERSTORE_TLS_CA": "tls_ca"}


def _parse_tls(cfg: Config, environ) -> None:
    """Fills the TLS paths from TIERSTORE_TLS_* when the configuration names
    none, and checks they are all three or none, each a readable file."""
    names = list(TLS_ENV.values())
    if not any(getattr(cfg, n) for n in names):
        for var, n in TLS_ENV.items():
            setattr(cfg, n, environ.get(var, "").strip())
    given = [n for n in names if getattr(cfg, n)]
    if not given:
        return
    for n in names:
        if not getattr(cfg, n):
            raise ConfigError(n, "required with " + " and ".join(g for g in given) +
                              " (mutual TLS takes tls_cert, tls_key and tls_ca, or none; "
                              "also TIERSTORE_TLS_CERT, TIERSTORE_TLS_KEY, TIERSTORE_TLS_CA)")
        path = getattr(cfg, n)
        if not os.path.isfile(path) or not os.access(path, os.R_OK):
            raise ConfigError(n, f"{path!r} is not a readable file")


GRANT_ENV = "TIERSTORE_GRANT_SECRET_FILE"


def _parse_grant(cfg: Config, environ) -> None:
    """Fills grant_secret_file from TIERSTORE_GRANT_SECRET_FILE for a setup
    with a segment when the configuration names none, and checks it."""
    if not cfg.grant_secret_file:
        if cfg.global_segment_size == 0:
            return
        cfg.grant_secret_file = environ.get(GRANT_ENV, "").strip()
        if not cfg.grant_secret_file:
            return
    elif cfg.global_segment_size == 0:
        raise ConfigError("grant_secret_file", "needs global_segment_size > 0 (the in-process node checks grants; "
                                               "a client carries the master's grants without the secret)")
    path = cfg.grant_secret_file
    if not os.path.isfile(path) or not os.access(path, os.R_OK):
        raise ConfigError("grant_secret_file", f"{path!r} is not a readable file")


def parse(fields: dict, environ=None) -> Config:
    """A checked Config from Mooncake's field names (aliases accepted).

    Unknown names are collected in ``unknown`` (the caller logs them); the names of Mooncake features tierstore has
    no use for (engine, tenant_id, the client HTTP server) are accepted and
    ignored.
    """
    cfg = Config()
    seen = set()
    unknown = []  # keys of other programs sharing the file (vLLM's, LMCache's): reported, not refused
    for raw_name, value in fields.items():
        if not isinstance(raw_name, str):
            raise ConfigError(repr(raw_name), "configuration keys are strings")
        name = _ALIASES.get(raw_name, raw_name)
        if name in _IGNORED:
            continue
        if name in seen:
            raise ConfigError(raw_name, f"given twice (also as another spelling of {name})")
        seen.add(name)
        if name in ("global_segment_size", "local_buffer_size"):
            setattr(cfg, name, parse_size(raw_name, value))
        elif name == "enable_ssd_offload":
            cfg.enable_ssd_offload = _parse_bool(raw_name, value)
        elif name in ("local_hostname", "metadata_server", "protocol", "device_name",
                      "master_server_address", "ssd_offload_path", "tls_cert", "tls_key", "tls_ca",
                      "grant_secret_file"):
            setattr(cfg, name, _parse_str(raw_name, value))
        else:
            unknown.append(raw_name)

    if cfg.protocol.lower() != "tcp":
        raise ConfigError("protocol", f"tierstore speaks TCP only (its data plane is TCP); "
                                      f"set protocol to \"tcp\", got {cfg.protocol!r}")
    cfg.protocol = "tcp"
    cfg.unknown = unknown
    if not cfg.local_hostname:
        cfg.local_hostname = "127.0.0.1"
    _check_hostport("local_hostname", cfg.local_hostname, need_port=False)
    if not cfg.master_server_address:
        raise ConfigError("master_server_address", "required (host:port or etcd://h:2379[/prefix])")
    if cfg.master_server_address.startswith("etcd://"):
        if len(cfg.master_server_address) == len("etcd://"):
            raise ConfigError("master_server_address", "etcd:// names no endpoint")
    elif "://" in cfg.master_server_address:
        raise ConfigError("master_server_address",
                          f"want host:port or etcd://..., got {cfg.master_server_address!r}")
    else:
        _check_hostport("master_server_address", cfg.master_server_address, need_port=True)
    _parse_tls(cfg, os.environ if environ is None else environ)
    _parse_grant(cfg, os.environ if environ is None else environ)
    if cfg.enable_ssd_offload:
        if not cfg.ssd_offload_path:
            raise ConfigError("ssd_offload_path", "required with enable_ssd_offload")
        if cfg.global_segment_size == 0:
            raise ConfigError("enable_ssd_offload", "needs global_segment_size > 0 (the SSD tier is under "
                                                    "this process's segment)")
        if not os.path.isabs(cfg.ssd_offload_path):
            raise ConfigError("ssd_offload_path", f"want an absolute path, got {cfg.ssd_offload_path!r}")
    return cfg


def from_file(path: str) -> dict:
    """The fields of a Mooncake JSON config file (MOONCAKE_CONFIG_PATH)."""
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except OSError as e:
        raise ConfigError("MOONCAKE_CONFIG_PATH", f"cannot read {path!r}: {e.strerror}") from None
    except ValueError as e:
        raise ConfigError("MOONCAKE_CONFIG_PATH", f"{path!r} is not JSON: {e}") from None
    if not isinstance(data, dict):
        raise ConfigError("MOONCAKE_CONFIG_PATH", f"{path!r} holds a JSON {type(data).__name__}, want an object")
    return data


# MOONCAKE_* environment variables and the fields they set.
ENV = {
    "MOONCAKE_LOCAL_HOSTNAME": "local_hostname",
    "MOONCAKE_TE_META_DATA_SERVER": "metadata_server",
    "MOONCAKE_GLOBAL_SEGMENT_SIZE": "global_segment_size",
    "MOONCAKE_LOCAL_BUFFER_SIZE": "local_buffer_size",
    "MOONCAKE_PROTOCOL": "protocol",
    "MOONCAKE_DEVICE": "device_name",
    "MOONCAKE_MASTER": "master_server_address",
    "MOONCAKE_ENABLE_SSD_OFFLOAD": "enable_ssd_offload",
    "MOONCAKE_SSD_OFFLOAD_PATH": "ssd_offload_path",
}


def from_env(environ=None) -> dict:
    """The fields the MOONCAKE_* variables set, in ConfigError terms naming the variable."""
    environ = os.environ if environ is None else environ
    return {field: environ[var] for var, field in ENV.items() if var in environ}


def from_environment(environ=None) -> Config:
    """setup() without arguments: MOONCAKE_CONFIG_PATH's file if set, else the MOONCAKE_* variables."""
    environ = os.environ if environ is None else environ
    path = environ.get("MOONCAKE_CONFIG_PATH")
    if path:
        return parse(from_file(path), environ)
    fields = from_env(environ)
    if "master_server_address" not in fields:
        raise ConfigError("MOONCAKE_MASTER", "setup() without arguments needs MOONCAKE_CONFIG_PATH or MOONCAKE_MASTER")
    try:
        return parse(fields, environ)
    except ConfigError as e:
        var = next((v for v, f in ENV.items() if f == e.field), e.field)
        raise ConfigError(var, str(e).split(": ", 1)[1]) from None
