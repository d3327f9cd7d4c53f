"""The agent's settings, one dataclass filled from the command line (``__main__``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from kubegang.authn import SecureServing

from ._infiniband import DEFAULT_ROOT
from ._xid import XidPolicy


@dataclass(frozen=True)
class AgentSettings:
    """How one agent process reads and publishes."""

    node_name: str | None = None
    """Real mode: the node this agent runs on (the DaemonSet passes ``spec.nodeName``)."""
    replay_dir: Path | None = None
    """Replay mode: directory of ``<name>.nvml.json`` dumps; nodes pick one by annotation."""
    nodes_from_label: str | None = None
    """Replay mode: label selector (``type=kwok``) of the nodes this process serves."""
    poll_interval_s: float = 10.0
    """Seconds between readings; the API is written only when something changed."""
    resync_interval_s: float = 300.0
    """Seconds after which the status is written even if unchanged (refreshes lastSeen and
    repairs edits made by others)."""
    metrics_host: str = "0.0.0.0"
    """Address of the metrics and health listener."""
    metrics_port: int = 9402
    """Port of ``/metrics`` and ``/healthz``; 0 disables the listener."""
    serving: SecureServing = field(default_factory=SecureServing)
    """How ``/metrics`` is served: HTTPS with token checks by default (``kubegang.authn``)."""
    infiniband_root: Path = DEFAULT_ROOT
    """Where the InfiniBand class lives in sysfs (a fake tree in tests)."""
    xid_policy: XidPolicy = field(default_factory=XidPolicy)
    """Which XIDs mark a GPU unhealthy (with the reason shown to humans) and which only stopped an
    application; by default the contained/uncontained ECC errors 94/95 are application-level, and a
    reset they need shows as a pending row remap instead (``kubegang.agent._xid``)."""
    nvidia_labels: bool = True
    """Also write ``nvidia.com/gpu.{clique,product,count,present}``; turn off where GPU feature
    discovery already owns them."""
    field_manager: str = "kubegang-agent"
    """Server-side field manager name of the agent's writes."""

    def __post_init__(self) -> None:
        if self.poll_interval_s <= 0 or self.resync_interval_s < self.poll_interval_s:
            raise ValueError(
                "poll interval must be > 0 and resync interval >= poll interval, got "
                f"{self.poll_interval_s} and {self.resync_interval_s}"
            )
        if (self.replay_dir is None) == (self.node_name is None):
            raise ValueError("give exactly one of node_name (real NVML) or replay_dir (replay mode)")
        if self.replay_dir is not None and not self.nodes_from_label:
            raise ValueError("replay mode needs nodes_from_label, e.g. 'type=kwok'")
        if not 0 <= self.metrics_port <= 65535:
            raise ValueError(f"metrics_port must be 0..65535, got {self.metrics_port}")
