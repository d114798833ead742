"""Import shim: `mooncake.store` is tierstore's Mooncake API.

With python/shim on PYTHONPATH (before any installed Mooncake wheel),
`from mooncake.store import MooncakeDistributedStore, ReplicateConfig,
SoftPinAction` gives tierstore.mooncake's classes, so the connectors of
vLLM, vLLM-Ascend, SGLang and LMCache run on tierstore unchanged
(docs/python.md). Only the store module is provided; Mooncake's transfer
engine (`mooncake.engine`) is not.
"""
