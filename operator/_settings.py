"""The operator's settings: one dataclass, filled from the command line (``__main__``)."""

from __future__ import annotations

import dataclasses
import socket
from pathlib import Path

from kubegang.quota import DEFAULT_PLANNED_RESERVE_AFTER_SECONDS, DEFAULT_RESERVE_AFTER_SECONDS


@dataclasses.dataclass(frozen=True)
class OperatorSettings:
    """Everything the operator process can be told."""

    extender_address: str
    """host:port of the extender's gRPC Placement service."""
    kubeconfig: str | None = None
    """Path of a kubeconfig; None means in-cluster credentials (or $KUBECONFIG)."""
    namespace: str = "kubegang-system"
    """The operator's own namespace: where the leader Lease lives."""
    watch_namespaces: tuple[str, ...] = ()
    """Namespaces whose GPUJobs are served; empty means every namespace."""
    tls_ca: Path | None = None
    """CA that signed the extender's server certificate."""
    tls_cert: Path | None = None
    """Client certificate the operator presents to the extender (mTLS)."""
    tls_key: Path | None = None
    """Private key of ``tls_cert``."""
    tls_server_name: str | None = None
    """Name to verify in the extender's certificate when dialling it by IP."""
    metrics_port: int = 8080
    """Port of the Prometheus /metrics endpoint; 0 turns it off."""
    health_port: int = 0
    """Port of the liveness endpoint ``/healthz``; 0 turns it off (the chart sets 8081). It is served
    on the operator's event loop, so a hung loop fails the probe; /metrics is served from a thread and
    would keep answering."""
    listen_address: str = "0.0.0.0"
    """Address the metrics and health ports listen on: every interface by default, which a pod needs for
    its probes and for Prometheus; a process on a shared machine (the local stack, tests) gives
    ``127.0.0.1``."""
    leader_election: bool = True
    """Campaign for the Lease; off only for a single replica or a local run."""
    identity: str = dataclasses.field(default_factory=socket.gethostname)
    """This replica's holderIdentity in the Lease (the pod name in a cluster)."""
    lease_duration_seconds: int = 15
    """How long a Lease stays valid without renewal: a standby takes over once the record it sees went
    unchanged this long by its own clock (client-go's default)."""
    renew_deadline_seconds: float = 10.0
    """The leader acts only this long after the start of its last successful renewal, then stops
    before any standby may take over (must be below ``lease_duration_seconds``; client-go: 10 of 15)."""
    retry_period_seconds: float = 2.0
    """How often the leader renews and a standby retries (client-go: 2 s)."""
    api_qps: float = 200.0
    """Client-side rate limit of Kubernetes writes, calls per second on average (decisions first;
    Events and waiting reasons use what decisions leave). See docs/operator.md for the choice."""
    api_burst: int = 400
    """Client-side rate limit: calls allowed in a burst (a 64-pod gang and its record fit in one)."""
    creation_concurrency: int = 32
    """Gangs whose pods are created in the background at once; the next admission waits for a slot,
    so admitted-but-uncreated gangs stay few and far inside ``reservation_ttl_seconds``."""
    api_timeout_seconds: float = 10.0
    """Timeout of each Kubernetes API call."""
    extender_timeout_seconds: float = 5.0
    """Deadline of each gRPC call to the extender."""
    reservation_ttl_seconds: int = 120
    """How long the extender holds a reservation that no pod has claimed yet."""
    shared_gpu_resource: str | None = None
    """Extended resource a shared-GPU pod (``gpuFraction``) requests one of, e.g. ``nvidia.com/gpu.shared``
    of the NVIDIA device plugin's time-slicing or MPS sharing; None: the pod requests no GPU resource
    and sees its GPU through ``NVIDIA_VISIBLE_DEVICES`` (docs/sharing.md says what each gives)."""
    backfill_reserve_after_seconds: float | None = DEFAULT_RESERVE_AFTER_SECONDS
    """A queue head that fits in quota but has been blocked this long reserves the nodes it will need;
    later jobs are admitted only where they do not take them (Slurm's EASY backfill). None: never.
    The core's default (48 h), the one the simulator measures: without run times a reservation idles
    the GPUs it drains, and on the tuning seeds shorter delays cost allocation and lengthened even the
    largest gangs' waits (docs/benchmarks-analysis.md); a queue that wants a bounded worst case sets
    its own ``backfill.reserveAfterSeconds`` (docs/quota.md, "Backfill")."""
    backfill_planned_reserve_after_seconds: float | None = DEFAULT_PLANNED_RESERVE_AFTER_SECONDS
    """The same for a head whose latest start the time limits give (every gang it would wait for has
    ``timeLimitSeconds``): it reserves after this long (the core's default: at once, as Slurm), and jobs
    that end before it may still use its nodes. None: ``backfill_reserve_after_seconds`` for it too. A
    queue's own ``backfill.reserveAfterSeconds`` is the one threshold of its jobs."""
    master_port: int = 29500
    """MASTER_PORT for torchrun gangs (and the headless Service's port)."""
    resync_seconds: float = 5.0
    """Longest pause between two admission cycles when nothing changes (quota may free by time)."""

    def port_clash(self) -> tuple[str, str] | None:
        """The two port fields that name the same port, or None.

        The metrics and the health listener both bind ``listen_address``: on one port the second would
        fail with "address already in use", after the first had started. 0 (off) clashes with nothing.
        """
        if self.metrics_port and self.metrics_port == self.health_port:
            return ("metrics_port", "health_port")
        return None
