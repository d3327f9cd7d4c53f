"""Random background load, for benchmarks, simulator warm starts and tests.

"50% random occupancy" is defined here once: single-node pods of 1, 2, 4 or 8 GPUs (sizes drawn
uniformly) on uniformly random nodes and random free GPUs, until the target share of healthy
whole GPUs is held. That leaves realistic fragmentation: partly used nodes everywhere and only
some whole free nodes, which is what makes placement hard.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

from kubegang.placement._request import MILLI
from kubegang.placement._snapshot import Allocation, Snapshot


def fill_random(snapshot: Snapshot, fraction: float, rng: random.Random,
                sizes: Sequence[int] = (1, 2, 4, 8), owner_prefix: str = "bg") -> int:
    """Allocate background pods until ``fraction`` of healthy GPUs is held; returns pods placed."""
    if not 0.0 <= fraction <= 1.0:
        raise ValueError(f"fraction must be in 0..1, got {fraction}")
    topo = snapshot.topology
    healthy = sum(sum(row) for row in snapshot.gpu_healthy)
    held = sum(
        1
        for milli_row, healthy_row in zip(snapshot.gpu_milli, snapshot.gpu_healthy, strict=True)
        for milli, ok in zip(milli_row, healthy_row, strict=True)
        if ok and milli < MILLI
    )
    target = int(fraction * healthy)
    placed = 0
    misses = 0
    while held < target and misses < 50 * max(1, topo.node_count):
        size = min(rng.choice(sizes), target - held)
        n = rng.randrange(topo.node_count)
        free = [p for p, milli in enumerate(snapshot.gpu_milli[n]) if milli == MILLI and snapshot.gpu_healthy[n][p]]
        if len(free) < size:
            misses += 1
            continue
        node = topo.nodes[n]
        gpus = tuple(node.gpus[p].index for p in rng.sample(free, size))
        snapshot.allocate(Allocation(f"{owner_prefix}-{placed}", 0, node.name, gpus))
        placed += 1
        held += size
    return placed
