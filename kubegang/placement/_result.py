"""What ``plan`` answers: a whole placement, or a reason a human can act on."""

from __future__ import annotations

from dataclasses import dataclass

from kubegang.levels import Level
from kubegang.placement._request import MILLI, GangRequest
from kubegang.placement._snapshot import Allocation


@dataclass(frozen=True, slots=True)
class PodAssignment:
    """Where one pod of the gang goes."""

    pod: int
    node: str
    gpus: tuple[int, ...]
    """GPU device indices on the node."""
    gpu_milli: int = MILLI
    """Thousandths of each listed GPU (1000 = whole GPUs)."""


@dataclass(frozen=True, slots=True)
class Placement:
    """A place for every pod of the gang, inside one domain."""

    gang_id: str
    assignments: tuple[PodAssignment, ...]
    level: Level
    """The narrowest level whose single domain holds every pod (the gang's span)."""
    domain: str
    """That domain's id."""
    score: float
    """0..1, higher is better: half for narrowness of the span, half for how tightly the gang
    fills the free GPUs of its domain (best fit leaves big domains and whole nodes free)."""
    preferred_met: bool
    """False when the gang asked for a preferred level and spans a wider one."""

    @property
    def nodes(self) -> tuple[str, ...]:
        """Distinct nodes used, in pod order."""
        return tuple(dict.fromkeys(a.node for a in self.assignments))

    def allocations(self, gang: GangRequest) -> tuple[Allocation, ...]:
        """The snapshot allocations that realise this placement (CPU/memory from ``gang``)."""
        return tuple(
            Allocation(
                owner=self.gang_id, pod=a.pod, node=a.node, gpus=a.gpus, gpu_milli=a.gpu_milli,
                cpu_milli=gang.cpu_milli, memory_mib=gang.memory_mib,
            )
            for a in self.assignments
        )


@dataclass(frozen=True, slots=True)
class Unplaceable:
    """No place for the whole gang now; ``reason`` names the numbers."""

    gang_id: str
    reason: str
    level: Level
    """The widest level searched (the required level, or the cluster)."""
    best_domain: str | None = None
    """The domain that came closest, if any has the gang's GPUs at all."""
    best_pods: int = 0
    """How many of the gang's pods that domain could hold."""
    never: bool = False
    """True when no node of the cluster as it is could hold one pod even with every GPU free (a pod
    asking for 9 GPUs on 8-GPU nodes, a product no node has): waiting cannot help, the cluster must
    change."""


PlanResult = Placement | Unplaceable
