"""kubegang node agent: NVML readings → one ``GPUNode`` per node, plus the node's GPU labels.

Layers, each importable and testable on its own:

- backends produce a node's readings in the dump format (``NvmlBackend`` for the real GPUs,
  ``ReplayBackend`` for a recorded dump, so fake nodes get real-shaped topology);
- ``parse_dump`` → ``NodeReadings`` → ``build_status`` / ``node_labels`` is pure and is where
  every rule lives (degradation, NVLink domain, health, labels);
- the publisher patches the API server only when the fingerprint changes, through a thin sink.
"""

from ._dump import Dump, DumpFormatError, load_dump, save_dump
from ._fabric import DomainVerdict, domain_id, nvlink_domain
from ._infiniband import read_hcas
from ._nvml import NvmlBackend
from ._replay import FabricOverride, ReplayBackend, ReplayError, resolve_dump
from ._snapshot import GpuReadings, NodeReadings, parse_dump
from ._status import (
    LABEL_CLIQUE,
    LABEL_COUNT,
    LABEL_DOMAIN,
    LABEL_PRESENT,
    LABEL_PRODUCT,
    build_status,
    fingerprint,
    gpu_health,
    label_value,
    node_labels,
    status_payload,
)
from ._xid import APPLICATION_XIDS, FATAL_XIDS, XidClass, XidPolicy, describe_xid

__all__ = [
    "APPLICATION_XIDS",
    "FATAL_XIDS",
    "LABEL_CLIQUE",
    "LABEL_COUNT",
    "LABEL_DOMAIN",
    "LABEL_PRESENT",
    "LABEL_PRODUCT",
    "DomainVerdict",
    "Dump",
    "DumpFormatError",
    "FabricOverride",
    "GpuReadings",
    "NodeReadings",
    "NvmlBackend",
    "ReplayBackend",
    "ReplayError",
    "XidClass",
    "XidPolicy",
    "build_status",
    "describe_xid",
    "domain_id",
    "fingerprint",
    "gpu_health",
    "label_value",
    "load_dump",
    "node_labels",
    "nvlink_domain",
    "parse_dump",
    "read_hcas",
    "resolve_dump",
    "save_dump",
    "status_payload",
]
