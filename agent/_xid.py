"""Which XIDs take a GPU out of service: the agent's XID policy.

NVIDIA's Xid catalogue (https://docs.nvidia.com/deploy/xid-errors/) lists well over a hundred
codes. Three classes matter to a placement engine:

- **fatal**: the hardware itself is suspect or needs a reset (fallen off the bus, NVLink, GSP,
  double-bit ECC, a failed row remap). The GPU gets no new work until it is reset or drained;
  counts are cumulative since the agent started, so it stays out until the agent restarts.
- **application**: the driver stopped the process that hit the error and the GPU keeps serving.
  MMU faults from a bad kernel (13/31/43/45), and on Ampere and later the *contained* (94) and
  *uncontained* (95) uncorrectable ECC errors: NVIDIA's memory error management guide says new work
  can be launched without a reset, because dynamic page offlining keeps allocations off the bad page.
  When a reset *is* needed to repair the memory, NVML reports a pending row remap or page retirement,
  which the agent reads on its own (``gpu_health``) and which clears with the reset: the GPU comes
  back by itself instead of staying out until the agent restarts.
- anything else: counted (metrics), no effect.

The policy is configurable (``AgentSettings.xid_policy``, ``--fatal-xids``, chart value
``agent.fatalXids``) because fleets differ: some operators drain on every 94.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

FATAL_XIDS: Mapping[int, str] = MappingProxyType(
    {
        48: "double-bit (uncorrectable) ECC error",
        63: "ECC page retirement or row remapping recorded; reset required to apply it",
        64: "ECC page retirement or row remapping failed",
        74: "NVLink error",
        79: "GPU has fallen off the bus",
        92: "high single-bit ECC error rate",
        119: "GSP RPC timeout",
        120: "GSP error",
    }
)
"""XID → why it makes the GPU unhealthy (wording after NVIDIA's Xid catalogue): the default fatal set."""

APPLICATION_XIDS: Mapping[int, str] = MappingProxyType(
    {
        13: "graphics engine exception (an application fault)",
        31: "GPU memory page fault (an application fault)",
        43: "GPU stopped processing (an application fault)",
        45: "preemptive cleanup after an earlier error",
        94: "contained uncorrectable ECC error: the process that hit it was stopped",
        95: "uncontained uncorrectable ECC error: the processes on the GPU were stopped",
    }
)
"""XID → what happened, for XIDs that stop an application but leave the GPU in service (default)."""


class XidClass(enum.Enum):
    """What one XID means for the GPU it happened on."""

    FATAL = "fatal"
    """The GPU is unhealthy until it is reset (and the agent restarted)."""
    APPLICATION = "application"
    """A process was stopped; the GPU stays healthy."""
    OTHER = "other"
    """Counted in metrics only."""


@dataclass(frozen=True)
class XidPolicy:
    """Which XIDs are fatal and which are known application-level ones; an XID is in at most one."""

    fatal: Mapping[int, str] = field(default_factory=lambda: dict(FATAL_XIDS))
    """XID → the reason shown on the GPUNode when it marks the GPU unhealthy."""
    application: Mapping[int, str] = field(default_factory=lambda: dict(APPLICATION_XIDS))
    """XID → what it means; these never change health."""

    def __post_init__(self) -> None:
        bad = sorted(x for x in (*self.fatal, *self.application) if not 0 < x < 2**32)
        if bad:
            raise ValueError(f"xid_policy: XIDs are positive 32-bit numbers, got {bad}")
        both = sorted(set(self.fatal) & set(self.application))
        if both:
            raise ValueError(f"xid_policy: XIDs {both} are both fatal and application-level; pick one")

    @classmethod
    def with_fatal(cls, xids: Iterable[int]) -> XidPolicy:
        """Exactly ``xids`` fatal (reasons from the catalogue where known); the application-level
        defaults stay, minus any now fatal."""
        chosen = list(dict.fromkeys(xids))
        known = {**APPLICATION_XIDS, **FATAL_XIDS}
        return cls(fatal={x: known.get(x, "configured as fatal") for x in chosen},
                   application={x: t for x, t in APPLICATION_XIDS.items() if x not in chosen})

    @classmethod
    def parse_fatal(cls, text: str | None, flag: str = "--fatal-xids") -> XidPolicy:
        """``"48,79,94"`` → :meth:`with_fatal`; empty or None → the defaults. ValueError names ``flag``."""
        if not text or not text.strip():
            return cls()
        try:
            xids = [int(x) for x in text.split(",") if x.strip()]
        except ValueError:
            raise ValueError(f"{flag}: expected comma-separated XID numbers, got {text!r}") from None
        try:
            return cls.with_fatal(xids)
        except ValueError as exc:
            raise ValueError(f"{flag}: {exc}") from None

    def classify(self, xid: int) -> XidClass:
        """The class of ``xid`` under this policy."""
        if xid in self.fatal:
            return XidClass.FATAL
        if xid in self.application:
            return XidClass.APPLICATION
        return XidClass.OTHER


def describe_xid(xid: int, fatal: Mapping[int, str] = FATAL_XIDS) -> str:
    """``XID 79 (GPU has fallen off the bus)``; unknown codes are named by number only."""
    text = fatal.get(xid)
    return f"XID {xid} ({text})" if text else f"XID {xid}"
