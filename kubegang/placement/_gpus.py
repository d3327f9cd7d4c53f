"""Which GPUs of a node a pod gets: the closest-wired free ones, leaving the rest in whole groups.

A 4-GPU pod on an 8-GPU PCIe server that gets GPUs 0, 1, 4, 5 talks across the CPU sockets' link
(``SYS`` in ``nvidia-smi topo -m``) and its data loader reads memory on the far socket; GPUs 0-3
share a socket (``NODE``) and pairs of them a PCIe switch (``PIX``). Slurm gives the same with
``--gres-flags=enforce-binding``. From what the agent publishes per GPU (``GPUInfo.numa_node``,
``pcie_switch``, ``nvlink_peers``) the distance of two GPUs is, nearest first:

    0  NVLink peers (direct or through NVSwitches)
    1  the same PCIe switch
    2  the same NUMA node
    3  anything else, or unknown

Among the ways to take k of the node's free GPUs, the chooser takes the one that is, in order:

1. closest: the smallest sum of pairwise distances (NVLink first, then one switch, then one socket);
2. on the fewest NUMA nodes, then the fewest PCIe switches (on NVSwitch boards every pair is at
   distance 0, and this keeps a pod's GPUs next to the CPUs its data loader runs on);
3. the one that leaves the most free GPUs in whole groups: whole NUMA nodes, then whole switches,
   then the closest leftover. This is best fit inside the node, as FGD is across nodes: a 1-GPU
   pod goes beside the GPUs already taken, so the next 4-GPU pod still finds a free socket;
4. the lowest device indices (deterministic).

A node whose GPUs carry no wiring at all (no agent, a GPUNode without these readings) gets the
lowest free indices, as before this existed. The node's wiring is interned, and each answer is
memoised per (set of free GPUs, k), so a node costs the enumeration (at most C(8, 4) = 70 sets on
8-GPU boards) once per state, not once per pod.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence

from kubegang.topology import GPUInfo

NVLINK, SWITCH, NUMA, FAR = 0, 1, 2, 3
"""Pair distances, nearest first (module docstring)."""

_ENUMERATE_LIMIT = 5_000
"""Above this many candidate sets the chooser grows the set greedily instead (boards of 16+ GPUs)."""
_MEMO_LIMIT = 100_000


class GpuWiring:
    """One board's wiring by GPU position (interned: nodes of one model share it and its memo)."""

    def __init__(self, gpus: Sequence[GPUInfo]) -> None:
        position = {g.index: p for p, g in enumerate(gpus)}
        count = len(gpus)
        self.count = count
        self.numa = [g.numa_node for g in gpus]
        self.switch = [g.pcie_switch for g in gpus]
        links = [{position[i] for i in g.nvlink_peers if i in position} for g in gpus]
        self.distance = [[0] * count for _ in range(count)]
        for a in range(count):
            for b in range(count):
                if a != b:
                    self.distance[a][b] = self._pair(a, b, links)
        self.numa_groups = _groups(self.numa)
        self.switch_groups = _groups(self.switch)
        self._memo: dict[tuple[int, int], tuple[int, ...]] = {}

    def _pair(self, a: int, b: int, links: list[set[int]]) -> int:
        if b in links[a] or a in links[b]:
            return NVLINK
        if self.switch[a] is not None and self.switch[a] == self.switch[b]:
            return SWITCH
        if self.numa[a] is not None and self.numa[a] == self.numa[b]:
            return NUMA
        return FAR

    def choose(self, free: Sequence[int], k: int) -> tuple[int, ...]:
        """``k`` of the ``free`` positions (module docstring); ``free`` in position order."""
        if k >= len(free):
            return tuple(free[:k])
        mask = 0
        for p in free:
            mask |= 1 << p
        key = (mask, k)
        got = self._memo.get(key)
        if got is None:
            if len(self._memo) > _MEMO_LIMIT:
                self._memo.clear()
            got = self._memo[key] = self._best(tuple(sorted(free)), k)
        return got

    def _best(self, free: tuple[int, ...], k: int) -> tuple[int, ...]:
        if math.comb(len(free), k) > _ENUMERATE_LIMIT:
            return self._greedy(free, k)
        best: tuple[int, ...] = free[:k]
        best_key: tuple[int, ...] | None = None
        for chosen in itertools.combinations(free, k):
            key = self._key(chosen, free)
            if best_key is None or key < best_key:
                best, best_key = chosen, key
        return best

    def _key(self, chosen: tuple[int, ...], free: tuple[int, ...]) -> tuple[int, ...]:
        taken = set(chosen)
        left = [p for p in free if p not in taken]
        left_set = set(left)
        return (
            self._pair_sum(chosen),
            _spanned(self.numa, chosen),
            _spanned(self.switch, chosen),
            -sum(1 for group in self.numa_groups if group <= left_set),
            -sum(1 for group in self.switch_groups if group <= left_set),
            self._pair_sum(left),
            *chosen,
        )

    def _pair_sum(self, positions: Sequence[int]) -> int:
        d = self.distance
        return sum(d[a][b] for i, a in enumerate(positions) for b in positions[i + 1:])

    def _greedy(self, free: tuple[int, ...], k: int) -> tuple[int, ...]:
        """From each start, add the GPU nearest those taken; keep the best set by the same key."""
        best: tuple[int, ...] | None = None
        best_key: tuple[int, ...] | None = None
        for start in free:
            chosen = [start]
            rest = [p for p in free if p != start]
            while len(chosen) < k:
                nxt = min(rest, key=lambda p: (sum(self.distance[p][c] for c in chosen), p))
                chosen.append(nxt)
                rest.remove(nxt)
            ordered = tuple(sorted(chosen))
            key = self._key(ordered, free)
            if best_key is None or key < best_key:
                best, best_key = ordered, key
        assert best is not None
        return best


def _groups(ids: Sequence[str | int | None]) -> list[frozenset[int]]:
    """Positions sharing a known id, one set per id (groups of two or more GPUs only)."""
    members: dict[str | int, set[int]] = {}
    for p, gid in enumerate(ids):
        if gid is not None:
            members.setdefault(gid, set()).add(p)
    return [frozenset(group) for group in members.values() if len(group) > 1]


def _spanned(ids: Sequence[str | int | None], chosen: Sequence[int]) -> int:
    """Groups the chosen positions touch; a GPU of unknown group counts as a group of its own."""
    known = {ids[p] for p in chosen if ids[p] is not None}
    return len(known) + sum(1 for p in chosen if ids[p] is None)


_INTERNED: dict[tuple[object, ...], GpuWiring] = {}


def wiring_of(gpus: Sequence[GPUInfo]) -> GpuWiring | None:
    """The interned wiring of a node's GPUs, or None when none of them carries any."""
    if not any(g.numa_node is not None or g.pcie_switch is not None or g.nvlink_peers for g in gpus):
        return None
    signature = tuple((g.index, g.numa_node, g.pcie_switch, tuple(sorted(g.nvlink_peers))) for g in gpus)
    wiring = _INTERNED.get(signature)
    if wiring is None:
        if len(_INTERNED) > 10_000:  # a long-running extender sees few board models; bound it anyway
            _INTERNED.clear()
        wiring = _INTERNED[signature] = GpuWiring(gpus)
    return wiring


def choose_gpus(wiring: GpuWiring | None, free: Sequence[int], k: int) -> tuple[int, ...]:
    """``k`` of the ``free`` GPU positions of a node with ``wiring`` (lowest ones when it has none)."""
    if wiring is None:
        return tuple(free[:k])
    return wiring.choose(free, k)
