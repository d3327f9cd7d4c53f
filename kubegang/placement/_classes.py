"""Node classes: nodes grouped by what they could hold at all, with each class's free whole GPUs.

Why: a pod shape that only one class of nodes can hold (the GPU count, GPU model, CPU and memory
it asks for fit no other node even when empty) is demand bound to that class, which
``_exhaustion`` protects as it protects GPU models. A class is static (a node's capacity, not its
use); only its free GPUs move, kept current by the snapshot at each allocation.
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from typing import TYPE_CHECKING

from kubegang.placement._fragmentation import TaskShape
from kubegang.topology import gpu_keys

if TYPE_CHECKING:
    from kubegang.placement._fragmentation import WorkloadMix
    from kubegang.topology import TopologyIndex

ClassKey = tuple[tuple[tuple[str, ...], ...], int, int]
"""(flavour keys of each healthy GPU, sorted; allocatable CPU in millicores; memory in MiB)."""


class NodeClasses:
    """Per snapshot: the class of each node, and each class's whole free GPUs (any flavour)."""

    def __init__(self, topology: TopologyIndex, any_free: Sequence[int]) -> None:
        ids: dict[ClassKey, int] = {}
        self.of: list[int] = []
        """Class id of each node (by node number)."""
        for node in topology.nodes:
            key = (tuple(sorted(gpu_keys(g) for g in node.gpus if g.healthy)), node.cpu_milli, node.memory_mib)
            self.of.append(ids.setdefault(key, len(ids)))
        self.keys: list[ClassKey] = list(ids)
        self.free = [0] * len(self.keys)
        """Whole free GPUs per class (kept current by ``Snapshot``)."""
        for c, free in zip(self.of, any_free, strict=False):  # no whole GPU anywhere: no ``any_free``
            self.free[c] += free
        self.exclusive_memo: weakref.WeakKeyDictionary[WorkloadMix, tuple[int, tuple[float, ...]]] = (
            weakref.WeakKeyDictionary())
        """Mix -> (its version, demand share bound to each class); filled by ``_exhaustion``."""

    def holds(self, c: int, shape: TaskShape) -> bool:
        """Whether an empty node of class ``c`` could hold one pod of ``shape`` (0 CPU or memory:
        the node does not report it, so it is not short of it)."""
        keys, cpu, memory = self.keys[c]
        if (cpu and cpu < shape.cpu_milli) or (memory and memory < shape.memory_mib):
            return False
        accepting = sum(1 for k in keys if any(f in k for f in shape.flavours))
        return accepting >= max(shape.gpus, 1)
