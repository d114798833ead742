"""Mooncake's configuration forms, parsed without a cluster (tierstore.config, setup's refusals)."""

import json
import logging

import pytest

from tierstore import config
from tierstore.mooncake import INVALID_PARAMS, MooncakeDistributedStore, ReplicateConfig, SoftPinAction


@pytest.mark.parametrize("value,want", [
    (0, 0), (4096, 4096), (4096.0, 4096), ("4096", 4096), ("16MB", 16 << 20), ("16 MB", 16 << 20),
    ("16mb", 16 << 20), ("1.5GB", 3 << 29), ("2 GiB", 2 << 30), ("512KB", 512 << 10), ("1 tb", 1 << 40),
    (" 7 b ", 7), ("3m", 3 << 20),
])
def test_sizes(value, want):
    assert config.parse_size("global_segment_size", value) == want


@pytest.mark.parametrize("value", ["50%", "-1", -1, "lots", "16 XB", "", True, None, 1.5, [1], "1e3"])
def test_bad_sizes_name_the_field(value):
    with pytest.raises(config.ConfigError) as e:
        config.parse_size("local_buffer_size", value)
    assert e.value.field == "local_buffer_size"
    assert str(e.value).startswith("local_buffer_size: ")


def test_defaults_and_aliases():
    c = config.parse({"master_server_addr": "10.0.0.1:50051", "rdma_devices": "mlx5_0",
                      "engine": None, "tenant_id": "t", "metadata_server": "P2PHANDSHAKE"})
    assert c.master_server_address == "10.0.0.1:50051"
    assert c.device_name == "mlx5_0"
    assert c.global_segment_size == 16 << 20 and c.local_buffer_size == 16 << 20
    assert c.protocol == "tcp" and c.local_hostname == "127.0.0.1"


@pytest.mark.parametrize("fields,field", [
    ({"protocol": "rdma"}, "protocol"),
    ({"protocol": "ascend"}, "protocol"),
    ({"global_segment_size": "50%"}, "global_segment_size"),
    ({"local_buffer_size": -5}, "local_buffer_size"),
    ({"master_server_address": ""}, "master_server_address"),
    ({"master_server_address": "localhost"}, "master_server_address"),
    ({"master_server_address": "http://h:1"}, "master_server_address"),
    ({"master_server_address": "etcd://"}, "master_server_address"),
    ({"local_hostname": "h:port"}, "local_hostname"),
    ({"enable_ssd_offload": True}, "ssd_offload_path"),
    ({"enable_ssd_offload": "maybe"}, "enable_ssd_offload"),
    ({"enable_ssd_offload": True, "ssd_offload_path": "rel/dir"}, "ssd_offload_path"),
    ({"enable_ssd_offload": True, "ssd_offload_path": "/x", "global_segment_size": 0}, "enable_ssd_offload"),
    ({"master_server_addr": "a:1", "master_server_address": "b:2"}, "master_server_address"),
])
def test_bad_fields(fields, field):
    with pytest.raises(config.ConfigError) as e:
        config.parse(dict({"master_server_address": "127.0.0.1:1"}, **fields))
    assert field in str(e.value)


def test_unknown_keys_are_collected_not_refused():
    c = config.parse({"master_server_address": "a:1", "mode": "embedded", "extra_thing": 1, "tenant_id": "x"})
    assert c.unknown == ["extra_thing"]


def test_protocol_message_says_tcp():
    with pytest.raises(config.ConfigError, match="tierstore speaks TCP"):
        config.parse({"protocol": "RDMA"})
    assert config.parse({"protocol": "TCP"}).protocol == "tcp"


def test_etcd_master_accepted():
    c = config.parse({"master_server_address": "etcd://127.0.0.1:2379,127.0.0.1:2380/p"})
    assert c.master_server_address.startswith("etcd://")


def test_config_file_and_env(tmp_path):
    p = tmp_path / "mc.json"
    p.write_text(json.dumps({"local_hostname": "127.0.0.1", "metadata_server": "http://x:8080/metadata",
                             "master_server_address": "127.0.0.1:7", "global_segment_size": "32MB",
                             "local_buffer_size": 1024, "protocol": "tcp", "device_name": ""}))
    c = config.from_environment({"MOONCAKE_CONFIG_PATH": str(p), "MOONCAKE_MASTER": "ignored:1"})
    assert (c.master_server_address, c.global_segment_size, c.local_buffer_size) == ("127.0.0.1:7", 32 << 20, 1024)

    c = config.from_environment({"MOONCAKE_MASTER": "127.0.0.1:9", "MOONCAKE_GLOBAL_SEGMENT_SIZE": "0",
                                 "MOONCAKE_LOCAL_BUFFER_SIZE": "1 MB", "MOONCAKE_PROTOCOL": "tcp"})
    assert (c.master_server_address, c.global_segment_size, c.local_buffer_size) == ("127.0.0.1:9", 0, 1 << 20)

    with pytest.raises(config.ConfigError, match="MOONCAKE_LOCAL_BUFFER_SIZE"):
        config.from_environment({"MOONCAKE_MASTER": "127.0.0.1:9", "MOONCAKE_LOCAL_BUFFER_SIZE": "50%"})
    with pytest.raises(config.ConfigError, match="MOONCAKE_MASTER"):
        config.from_environment({})
    p.write_text("[1, 2]")
    with pytest.raises(config.ConfigError, match="MOONCAKE_CONFIG_PATH"):
        config.from_environment({"MOONCAKE_CONFIG_PATH": str(p)})
    with pytest.raises(config.ConfigError, match="MOONCAKE_CONFIG_PATH"):
        config.from_environment({"MOONCAKE_CONFIG_PATH": str(tmp_path / "missing.json")})


def _refusals(caplog):
    return [r for r in caplog.records if r.name == "tierstore.mooncake" and r.levelno >= logging.ERROR]


@pytest.mark.parametrize("args,kwargs,field", [
    (("127.0.0.1", "P2PHANDSHAKE", 0, 0, "rdma", "", "127.0.0.1:1"), {}, "protocol"),
    ((), {"local_hostname": "127.0.0.1", "metadata_server": "P2PHANDSHAKE", "global_segment_size": "50%",
          "master_server_addr": "127.0.0.1:1"}, "global_segment_size"),
    (({"master_server_address": "127.0.0.1:1", "local_buffer_size": "many"},), {}, "local_buffer_size"),
    (({"master_server_address": "127.0.0.1:1", "protocol": "ascend"},), {}, "protocol"),
    (("127.0.0.1", "P2PHANDSHAKE", 0, 0, "tcp", "", "127.0.0.1:1"), {"protocol": "tcp"}, "protocol"),
])
def test_setup_refuses_bad_config_with_one_line(caplog, args, kwargs, field):
    s = MooncakeDistributedStore()
    with caplog.at_level(logging.INFO, logger="tierstore.mooncake"):
        assert s.setup(*args, **kwargs) == INVALID_PARAMS
    lines = _refusals(caplog)
    assert len(lines) == 1, [r.getMessage() for r in lines]
    assert field in lines[0].getMessage()
    assert s.health_check() == 1  # not set up
    assert s.get("k") == b"" and s.put("k", b"v") < 0 and s.is_exist("k") == -1


def test_setup_from_env_refused(caplog, monkeypatch):
    monkeypatch.delenv("MOONCAKE_CONFIG_PATH", raising=False)
    monkeypatch.setenv("MOONCAKE_MASTER", "127.0.0.1:1")
    monkeypatch.setenv("MOONCAKE_PROTOCOL", "rdma")
    s = MooncakeDistributedStore()
    with caplog.at_level(logging.INFO, logger="tierstore.mooncake"):
        assert s.setup() == INVALID_PARAMS
    lines = _refusals(caplog)
    assert len(lines) == 1 and "MOONCAKE_PROTOCOL" in lines[0].getMessage()
    assert "TCP" in lines[0].getMessage()


def test_replicate_config_soft_pin_ttl():
    rc = ReplicateConfig()
    assert rc.replica_num == 1 and rc.soft_pin_ttl_ms is None and rc.soft_pin_action == SoftPinAction.PRESERVE
    rc.soft_pin_ttl_ms = 0
    rc.soft_pin_ttl_ms = (1 << 64) - 1
    for bad in (-1, 1 << 64, 1.5, "10", True):
        with pytest.raises(TypeError):
            rc.soft_pin_ttl_ms = bad
    with pytest.raises(TypeError):
        ReplicateConfig(soft_pin_ttl_ms=-3)
    assert "replica_num=1" in str(rc)


def test_calls_before_setup_are_errors_not_exceptions():
    s = MooncakeDistributedStore()
    assert s.batch_is_exist(["a", "b"]) == [-1, -1]
    assert s.batch_get_into(["a"], [1], [1]) == [INVALID_PARAMS]
    assert s.batch_get_into(["a", "b"], [1], [1]) == [INVALID_PARAMS] * 2
    assert s.batch_put_from([], [], []) == []
    assert s.get_size("a") < 0 and s.remove("a") < 0 and s.remove_all() < 0
    assert s.get_buffer("a") is None and s.get_replica_desc("a") == []
    assert s.get_hostname() == "" and s.close() == 0


def test_register_buffer_refuses_what_is_not_host_memory(caplog):
    import numpy as np
    s = MooncakeDistributedStore()
    a = np.zeros(8192, dtype=np.uint8)
    assert s.register_buffer(a.ctypes.data, a.nbytes) == 0
    assert s.unregister_buffer(a.ctypes.data) == 0
    with caplog.at_level(logging.ERROR, logger="tierstore.mooncake"):
        assert s.register_buffer(4096, 4096) == INVALID_PARAMS                   # unmapped page
        assert s.register_buffer(a.ctypes.data, 1 << 46) == INVALID_PARAMS       # runs past the mapping
        assert s.register_buffer(0, 10) == INVALID_PARAMS and s.register_buffer(a.ctypes.data, 0) == INVALID_PARAMS
    assert sum("not host memory" in r.getMessage() for r in caplog.records) == 2
