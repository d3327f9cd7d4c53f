"""The transactional snapshot: who holds which GPU, with checkpoint / rollback / commit.

Like KAI's Statement: every change is a primitive (allocate or release one pod) recorded in an undo
log while a checkpoint is open, so a "what if" (would this gang fit if these gangs left?) costs no
copy of the cluster: release, plan, roll back. Each primitive updates the capacity index in
O(levels + GPUs of the pod), so the aggregates are always exact.

Invariant, enforced on every allocate: a GPU is never handed out beyond what is free (a whole-GPU
pod needs the GPU entirely free; a fractional pod needs that many thousandths free). Violations
raise ``AllocationError`` before anything changes. CPU, memory and pod counts are tracked but not
enforced here (the kubelet is their authority; the planner only avoids overcommitting them).

Not thread-safe: one owner (the extender's ledger, a simulator) mutates it.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

from kubegang.placement._classes import NodeClasses
from kubegang.placement._fragmentation import FragmentationIndex, WorkloadMix
from kubegang.placement._gpus import GpuWiring, wiring_of
from kubegang.placement._request import MILLI
from kubegang.topology import ANY_FLAVOUR, CapacityIndex, TopologyIndex, gpu_keys


class AllocationError(RuntimeError):
    """An allocation that would double-book a GPU, or refers to an unknown node/GPU/pod."""


@dataclass(frozen=True, slots=True)
class Allocation:
    """One pod's hold on a node: whole GPUs (``gpu_milli`` = 1000) or a share of one GPU."""

    owner: str
    """Gang id (job UID) or plain pod UID."""
    pod: int
    """Pod index within the gang (0 for a plain pod)."""
    node: str
    gpus: tuple[int, ...]
    """GPU device indices on the node."""
    gpu_milli: int = MILLI
    """Thousandths held on each listed GPU; 1000 for whole GPUs."""
    cpu_milli: int = 0
    memory_mib: int = 0

    @property
    def whole_gpus(self) -> int:
        return len(self.gpus) if self.gpu_milli == MILLI else 0


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """A point to roll back to; valid until rolled back past or committed."""

    position: int
    serial: int


_ALLOC = 1
_RELEASE = -1


class Snapshot:
    """Mutable cluster state over a compiled topology, with nested checkpoints."""

    def __init__(self, topology: TopologyIndex, workload: WorkloadMix | None = None) -> None:
        self.topology = topology
        self.workload = workload if workload is not None else WorkloadMix()
        """The pod mix fragmentation is measured against (long-lived: pass the same one to every
        snapshot you build, and ``observe`` requests on it)."""
        self._fragmentation: FragmentationIndex | None = None
        self._classes: NodeClasses | None = None
        self.capacity = CapacityIndex(topology)
        self.gpu_position: list[dict[int, int]] = []
        """Per node: GPU device index -> position in the per-node lists below."""
        self.gpu_milli: list[list[int]] = []
        """Per node, per GPU position: thousandths free (0 for unhealthy GPUs)."""
        self.gpu_healthy: list[list[bool]] = []
        self.gpu_keys: list[list[tuple[str, ...]]] = []
        self.gpu_wiring: list[GpuWiring | None] = []
        """Per node: how its GPUs are wired to each other (None: unknown), for the choice of GPUs."""
        for node in topology.nodes:
            self.gpu_wiring.append(wiring_of(node.gpus))
            self.gpu_position.append({g.index: p for p, g in enumerate(node.gpus)})
            self.gpu_milli.append([MILLI if g.healthy else 0 for g in node.gpus])
            self.gpu_healthy.append([g.healthy for g in node.gpus])
            self.gpu_keys.append([gpu_keys(g) for g in node.gpus])
        size = topology.node_count
        self.cpu_used = [0] * size
        self.memory_used = [0] * size
        self.pods_used = [0] * size
        self.partial_gpus = [0] * size
        """Per node: GPUs shared by fractional pods with some room left (best-fit targets)."""
        self.partial_nodes: set[int] = set()
        """Nodes with ``partial_gpus`` > 0, so fractional pods find shared GPUs without a scan."""
        self._held: dict[str, dict[int, Allocation]] = {}
        self._log: list[tuple[int, Allocation]] = []
        self._marks: list[Checkpoint] = []
        self._serial = 0

    # ---- queries -------------------------------------------------------------------------

    def allocations(self) -> Iterator[Allocation]:
        """Every current allocation (for rebuilding a snapshot over a new topology)."""
        for pods in self._held.values():
            yield from pods.values()

    def allocations_of(self, owner: str) -> tuple[Allocation, ...]:
        return tuple(self._held.get(owner, {}).values())

    def owners(self) -> frozenset[str]:
        return frozenset(self._held)

    def gpus_held(self, owner: str) -> int:
        """Whole GPUs held by ``owner`` (fractional shares count as 0)."""
        return sum(a.whole_gpus for a in self._held.get(owner, {}).values())

    @property
    def fragmentation(self) -> FragmentationIndex:
        """Nodes grouped by state, with memoised FGD choices (built on first use, then kept current)."""
        if self._fragmentation is None:
            self._fragmentation = FragmentationIndex(self)
        return self._fragmentation

    @property
    def node_classes(self) -> NodeClasses:
        """Nodes grouped by what they could hold at all, with free GPUs per class (built on first
        use, then kept current)."""
        if self._classes is None:
            every = self.capacity.get(ANY_FLAVOUR)
            self._classes = NodeClasses(self.topology, every.free if every is not None else ())
        return self._classes

    def free_milli(self, node: str, gpu: int) -> int:
        n = self._node(node)
        return self.gpu_milli[n][self._position(n, gpu)]

    # ---- mutations -----------------------------------------------------------------------

    def allocate(self, allocation: Allocation) -> None:
        """Record one pod's allocation; AllocationError (and no change) if it does not fit."""
        self._check(allocation)
        self._apply(allocation, _ALLOC)
        if self._marks:
            self._log.append((_ALLOC, allocation))

    def allocate_all(self, allocations: Sequence[Allocation]) -> None:
        """Allocate every pod of a gang, or none of them (AllocationError leaves no trace)."""
        mark = self.checkpoint()
        try:
            for allocation in allocations:
                self.allocate(allocation)
        except BaseException:
            self.rollback(mark)
            raise
        self.commit(mark)

    def release(self, owner: str, pod: int | None = None) -> tuple[Allocation, ...]:
        """Release all pods of ``owner`` (or one pod); returns what was released (may be empty)."""
        pods = self._held.get(owner)
        if not pods:
            return ()
        chosen = list(pods.values()) if pod is None else ([pods[pod]] if pod in pods else [])
        for allocation in chosen:
            self._apply(allocation, _RELEASE)
            if self._marks:
                self._log.append((_RELEASE, allocation))
        return tuple(chosen)

    # ---- transactions --------------------------------------------------------------------

    def checkpoint(self) -> Checkpoint:
        """Open a (nested) checkpoint; changes after it can be rolled back."""
        self._serial += 1
        mark = Checkpoint(len(self._log), self._serial)
        self._marks.append(mark)
        return mark

    def rollback(self, mark: Checkpoint) -> None:
        """Undo every change since ``mark`` and close it (and any checkpoint opened after it)."""
        self._close(mark)
        while len(self._log) > mark.position:
            sign, allocation = self._log.pop()
            self._apply(allocation, -sign)
        if not self._marks:
            self._log.clear()

    def commit(self, mark: Checkpoint | None = None) -> None:
        """Keep the changes since ``mark`` (default: since the outermost checkpoint) and close it."""
        if mark is None:
            self._marks.clear()
        else:
            self._close(mark)
        if not self._marks:
            self._log.clear()

    @contextmanager
    def what_if(self) -> Iterator[Snapshot]:
        """``with snapshot.what_if(): ...``: every change inside is rolled back on exit."""
        mark = self.checkpoint()
        try:
            yield self
        finally:
            self.rollback(mark)

    def clone(self) -> Snapshot:
        """An independent copy with the same allocations (no open checkpoints)."""
        copy = Snapshot(self.topology, self.workload)
        for allocation in self.allocations():
            copy.allocate(allocation)
        return copy

    # ---- internals -----------------------------------------------------------------------

    def _close(self, mark: Checkpoint) -> None:
        if mark not in self._marks:
            raise ValueError(f"checkpoint {mark.serial} is not open (already rolled back or committed)")
        del self._marks[self._marks.index(mark):]

    def _node(self, name: str) -> int:
        n = self.topology.node_number.get(name)
        if n is None:
            raise AllocationError(f"unknown node {name!r}")
        return n

    def _position(self, n: int, gpu: int) -> int:
        position = self.gpu_position[n].get(gpu)
        if position is None:
            raise AllocationError(f"node {self.topology.nodes[n].name!r} has no GPU {gpu}")
        return position

    def use_topology(self, topology: TopologyIndex) -> None:
        """Swap in an index of the same nodes and structure whose nodes' facts changed
        (``with_node_facts``: taints, cordons); the per-node state and checkpoints stay valid."""
        if topology.node_number is not self.topology.node_number or topology.domain_of is not self.topology.domain_of:
            raise ValueError("use_topology needs an index made from this one by with_node_facts")
        self.topology = topology
        self.capacity.topology = topology

    def _check(self, a: Allocation) -> None:
        if a.pod in self._held.get(a.owner, {}):
            raise AllocationError(f"pod {a.pod} of {a.owner!r} is already allocated")
        if not 0 < a.gpu_milli <= MILLI:
            raise AllocationError(f"gpu_milli must be in 1..1000, got {a.gpu_milli}")
        if len(set(a.gpus)) != len(a.gpus):
            raise AllocationError(f"pod {a.pod} of {a.owner!r} lists a GPU twice: {a.gpus}")
        n = self._node(a.node)
        for gpu in a.gpus:
            p = self._position(n, gpu)
            if not self.gpu_healthy[n][p]:
                raise AllocationError(f"GPU {gpu} on node {a.node!r} is unhealthy")
            free = self.gpu_milli[n][p]
            if free < a.gpu_milli:
                raise AllocationError(
                    f"GPU {gpu} on node {a.node!r} has {free}/1000 free; pod {a.pod} of {a.owner!r} "
                    f"needs {a.gpu_milli}/1000"
                )

    def _apply(self, a: Allocation, sign: int) -> None:
        n = self.topology.node_number[a.node]
        milli = self.gpu_milli[n]
        deltas: dict[str, int] = {}
        for gpu in a.gpus:
            p = self.gpu_position[n][gpu]
            before = milli[p]
            after = before - sign * a.gpu_milli
            milli[p] = after
            was_whole, is_whole = before == MILLI, after == MILLI
            if was_whole != is_whole:
                for key in self.gpu_keys[n][p]:
                    deltas[key] = deltas.get(key, 0) + (1 if is_whole else -1)
            self.partial_gpus[n] += int(0 < after < MILLI) - int(0 < before < MILLI)
        if self.partial_gpus[n]:
            self.partial_nodes.add(n)
        else:
            self.partial_nodes.discard(n)
        for key, delta in deltas.items():
            self.capacity.set_free(key, n, self.capacity.flavours[key].free[n] + delta)
        self.cpu_used[n] += sign * a.cpu_milli
        self.memory_used[n] += sign * a.memory_mib
        self.pods_used[n] += sign
        if self._fragmentation is not None:
            self._fragmentation.dirty.add(n)
        if self._classes is not None and ANY_FLAVOUR in deltas:
            self._classes.free[self._classes.of[n]] += deltas[ANY_FLAVOUR]
        if sign == _ALLOC:
            self._held.setdefault(a.owner, {})[a.pod] = a
        else:
            pods = self._held[a.owner]
            del pods[a.pod]
            if not pods:
                del self._held[a.owner]
