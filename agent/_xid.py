"""Which XIDs take a GPU out of service.

NVIDIA's Xid catalogue (https://docs.nvidia.com/deploy/xid-errors/) lists well over a hundred
codes; most are application faults (an MMU fault from a bad kernel, XID 13/31/43) after which the
GPU is fine. The ones below mean the hardware itself is suspect or needs a reset, so a placement
engine must stop giving the GPU new work until it is reset or drained. XIDs outside this set are
still counted (metrics) but do not change health.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

FATAL_XIDS: Mapping[int, str] = MappingProxyType(
    {
        48: "double-bit (uncorrectable) ECC error",
        63: "ECC page retirement or row remapping recorded; reset required to apply it",
        64: "ECC page retirement or row remapping failed",
        74: "NVLink error",
        79: "GPU has fallen off the bus",
        92: "high single-bit ECC error rate",
        94: "contained uncorrectable ECC error",
        95: "uncontained uncorrectable ECC error",
        119: "GSP RPC timeout",
        120: "GSP error",
    }
)
"""XID → why it makes the GPU unhealthy (wording after NVIDIA's Xid catalogue)."""


def describe_xid(xid: int, fatal: Mapping[int, str] = FATAL_XIDS) -> str:
    """``XID 79 (GPU has fallen off the bus)``; unknown codes are named by number only."""
    text = fatal.get(xid)
    return f"XID {xid} ({text})" if text else f"XID {xid}"
