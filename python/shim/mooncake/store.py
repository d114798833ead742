"""`mooncake.store` resolved to tierstore.mooncake (see the package's doc)."""

from tierstore.mooncake import (  # noqa: F401
    BufferHandle,
    MooncakeDistributedStore,
    ReplicaDescriptor,
    ReplicateConfig,
    SoftPinAction,
)

__all__ = ["MooncakeDistributedStore", "ReplicateConfig", "SoftPinAction", "ReplicaDescriptor", "BufferHandle"]
