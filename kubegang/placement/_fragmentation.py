"""GPU fragmentation in the FGD sense, and where a single pod grows it least.

Weng et al., "Beware of Fragmentation: Scheduling GPU-Sharing Workloads with Fragmentation Gradient
Descent" (USENIX ATC '23) measure a node's fragmentation against the *workload*, not in the
abstract: for one task shape s, the free GPU capacity of the node that s cannot use —

- all of it when s does not fit the node at all (fewer GPUs with enough room than s needs, too
  little CPU, no GPU of a model s accepts);
- otherwise the free thousandths on GPUs that s cannot use (too little room, or a model s does
  not accept).

Memory strands GPUs as CPU does: a node's free GPUs are a fragment to a shape whose memory
request its free memory cannot meet (``count_memory``, on by default; the paper's measure has CPU
and GPU only). Counting it alone made FGD spend the few nodes with the most CPU *and* memory on
mid-size pods (a 4-GPU pod "strands" the other half of a smaller node for memory-hungry shapes),
so the large pods that only those nodes can hold failed early (openb ``multigpu50``: behind best
fit between 62% and 96% of arrived workload). Those nodes are a *node class* whose free GPUs the
demand only they can hold needs, and ``_exhaustion`` keeps other pods off such a class while it is
short of them; with both, memory counts without that loss (docs/benchmarks-analysis.md, "Memory in
the measure, with node classes").

A node's fragmentation is the expectation over the workload's mix of shapes,
``F(node) = sum_s p(s) * frag_s(node)``, in GPUs. Placing a pod changes only its own node's F,
so FGD puts each pod where F grows least (the fragmentation *gradient*): small shares go where
only small shares fit anyway, and whole GPUs and roomy nodes stay free for the shapes that need
them. The change is compared at the paper's resolution: its score is
``int(100 * sigmoid(-delta))`` (``fgd_level``), so changes within a level (about 1/25 of a GPU
near zero, coarser further out) are ties. Ties go to best fit, where the paper's scheduler picks
at random: the paper's own BestFit score, the node's free GPUs and CPU after the pod, each as a
share of the largest node's, weighed equally (``_Scale``); then fewest free GPU thousandths, then
least CPU. Comparing finer let noise-sized differences of F outrank best fit (openb ``default``,
100% arrived: 94.9% against 95.2%), and best fit by GPUs alone keeps the CPU-rich nodes a little
less well for the pods that need their CPU (95.2% against 95.3%).

The mix (``WorkloadMix``) is something a running system can know: a decayed histogram of recent
pod requests, fed by whoever sees them (the extender, a simulator), with a neutral default before
anything is observed. The simulator feeds it the trace's task mix, as the paper does.

Cost. F depends on a node only through its *state*: the free thousandths of its GPUs (with each
GPU's flavour keys), and where its free CPU and memory fall among the mix's requests. Many nodes
share a state, so values are memoised per state; a pod shape's choice on a state is memoised per
(state, shape) until the state changes or the mix's version moves. The per-snapshot index groups
nodes by exact state, so choosing a node costs one dictionary look-up per distinct state, not a
computation per node.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from kubegang.placement._request import MILLI, GangRequest
from kubegang.topology import ANY_FLAVOUR

if TYPE_CHECKING:
    from kubegang.placement._snapshot import Snapshot

UNLIMITED = 1 << 62
"""Free CPU / memory of a node that does not report it (nothing is ever short of it)."""

_MEMO_LIMIT = 500_000
"""Entries per memo before it is dropped (bounds memory in a long-running extender)."""


@dataclass(frozen=True, slots=True)
class TaskShape:
    """What one pod of the workload asks for: the unit of the fragmentation measure."""

    gpus: int = 1
    """GPUs per pod: 1 for a share of a GPU, 0 for a CPU-only pod (it competes for CPU and memory)."""
    gpu_milli: int = MILLI
    """Thousandths of each GPU: 1000 for whole GPUs, 1..999 for a share (then ``gpus`` is 1)."""
    cpu_milli: int = 0
    """CPU request in millicores."""
    memory_mib: int = 0
    """Memory request in MiB."""
    flavours: tuple[str, ...] = (ANY_FLAVOUR,)
    """Capacity keys (``*``, ``gpu:<product>``, ``mig:<profile>``) of the GPUs it accepts, any of."""

    def __post_init__(self) -> None:
        if self.gpus < 0:
            raise ValueError(f"TaskShape.gpus must be >= 0, got {self.gpus}")
        if not 0 < self.gpu_milli <= MILLI:
            raise ValueError(f"TaskShape.gpu_milli must be in 1..1000, got {self.gpu_milli}")
        if self.gpu_milli < MILLI and self.gpus != 1:
            raise ValueError("TaskShape.gpu_milli below 1000 (a shared GPU) needs gpus=1")
        if self.cpu_milli < 0 or self.memory_mib < 0:
            raise ValueError("TaskShape.cpu_milli and memory_mib must be >= 0")
        if not self.flavours:
            raise ValueError("TaskShape.flavours must name at least one capacity key (e.g. '*')")

    @classmethod
    def of(cls, gang: GangRequest) -> TaskShape:
        """The shape of one pod of ``gang``."""
        return cls(gang.gpus_per_pod or 1, gang.gpu_fraction_milli or MILLI, gang.cpu_milli,
                   gang.memory_mib, (gang.flavour,))


DEFAULT_MIX: tuple[tuple[TaskShape, float], ...] = tuple((TaskShape(g), 0.25) for g in (1, 2, 4, 8))
"""Before anything is observed: whole-GPU pods of 1, 2, 4 and 8 GPUs, equally likely (the sizes
training jobs ask for), so a GPU is fragmented when it breaks up a power-of-two block."""


class WorkloadMix:
    """A decayed histogram of pod shapes: the distribution fragmentation is measured against.

    ``observe`` each request as it is seen; an observation ``half_life`` observations old weighs
    half as much as a new one. The distribution keeps the most frequent shapes that together make
    ``coverage`` of the weight (at most ``max_shapes``, which bounds the cost of one value; the
    paper's "typical pods" keep 95%, but on openb every shape counted did better), and is
    re-derived every ``refresh_every`` observations (``version`` moves then, which invalidates the
    memoised fragmentation values), so a busy stream of requests does not defeat memoisation.
    ``count_memory`` makes a node's free memory strand GPUs in the measure, as its CPU does (on by
    default; the paper's measure leaves memory out; see the module docstring).
    """

    def __init__(self, shapes: Mapping[TaskShape, float] | None = None, *, half_life: float = 5000.0,
                 coverage: float = 1.0, max_shapes: int = 256, refresh_every: int = 200,
                 count_memory: bool = True) -> None:
        if not half_life > 0:
            raise ValueError(f"WorkloadMix.half_life must be > 0 observations, got {half_life}")
        if not 0 < coverage <= 1:
            raise ValueError(f"WorkloadMix.coverage must be in (0, 1], got {coverage}")
        if max_shapes < 1:
            raise ValueError(f"WorkloadMix.max_shapes must be >= 1, got {max_shapes}")
        if refresh_every < 1:
            raise ValueError(f"WorkloadMix.refresh_every must be >= 1, got {refresh_every}")
        self.coverage = coverage
        self.count_memory = count_memory
        self.max_shapes = max_shapes
        self.refresh_every = refresh_every
        self._growth = 2.0 ** (1.0 / half_life)
        self._scale = 1.0
        self._weights: dict[TaskShape, float] = {}
        self._pending = 0
        self._version = 0
        self._derived: tuple[tuple[TaskShape, float], ...] | None = None
        for shape, weight in (shapes or {}).items():
            if weight < 0:
                raise ValueError(f"WorkloadMix weight of {shape} must be >= 0, got {weight}")
            if weight:
                self._weights[shape] = self._weights.get(shape, 0.0) + weight
        self.model = FragmentationModel(self)
        """Fragmentation values memoised for this mix (shared by every snapshot that uses it)."""

    @property
    def version(self) -> int:
        """Moves whenever ``distribution()`` may have changed."""
        return self._version

    def observe(self, shape: TaskShape, weight: float = 1.0) -> None:
        """Count one request of ``shape`` (``weight`` pods of it)."""
        if weight < 0:
            raise ValueError(f"WorkloadMix.observe weight must be >= 0, got {weight}")
        self._scale *= self._growth
        if self._scale > 1e100:  # renormalise before floats overflow; ratios are unchanged
            self._weights = {s: w / self._scale for s, w in self._weights.items()}
            self._scale = 1.0
        first = not self._weights
        self._weights[shape] = self._weights.get(shape, 0.0) + weight * self._scale
        self._pending += 1
        if first or self._pending >= self.refresh_every:
            self.refresh()

    def observe_request(self, gang: GangRequest) -> None:
        """Count every pod of ``gang``."""
        self.observe(TaskShape.of(gang), float(gang.pods))

    def refresh(self) -> None:
        """Re-derive the distribution now (and move ``version``)."""
        self._pending = 0
        self._derived = None
        self._version += 1

    def distribution(self) -> tuple[tuple[TaskShape, float], ...]:
        """(shape, probability) pairs summing to 1, most frequent first."""
        if self._derived is None:
            self._derived = self._derive()
        return self._derived

    def _derive(self) -> tuple[tuple[TaskShape, float], ...]:
        ranked = sorted(((w, s) for s, w in self._weights.items() if w > 0),
                        key=lambda pair: (-pair[0], repr(pair[1])))
        total = sum(w for w, _ in ranked)
        if not total:
            return DEFAULT_MIX
        kept: list[tuple[float, TaskShape]] = []
        mass = 0.0
        for weight, shape in ranked:
            if mass >= self.coverage * total or len(kept) == self.max_shapes:
                break
            kept.append((weight, shape))
            mass += weight
        return tuple((shape, weight / mass) for weight, shape in kept)


GpuState = tuple[tuple[int, int], ...]
"""A node's GPUs with room left: sorted (free thousandths, kind id) pairs; kind = flavour keys."""


class FragmentationModel:
    """Fragmentation values for one ``WorkloadMix``, memoised per node state (shared by snapshots)."""

    def __init__(self, mix: WorkloadMix) -> None:
        self._mix = mix
        self._version = -1
        self.kinds: list[tuple[str, ...]] = []
        self._kind_id: dict[tuple[str, ...], int] = {}
        self._accepts: dict[tuple[int, tuple[str, ...]], bool] = {}
        self._sync()

    def kind(self, keys: tuple[str, ...]) -> int:
        """The id of a GPU's flavour keys (interned: states compare small ints)."""
        kid = self._kind_id.get(keys)
        if kid is None:
            kid = self._kind_id[keys] = len(self.kinds)
            self.kinds.append(keys)
        return kid

    def accepts(self, kind: int, flavours: tuple[str, ...]) -> bool:
        got = self._accepts.get((kind, flavours))
        if got is None:
            keys = self.kinds[kind]
            got = self._accepts[(kind, flavours)] = any(f in keys for f in flavours)
        return got

    @property
    def version(self) -> int:
        self._sync()
        return self._version

    def _sync(self) -> None:
        if self._version == self._mix.version:
            return
        self._version = self._mix.version
        dist = self._mix.distribution()
        self._shapes = [s for s, _ in dist]
        self._probs = [p for _, p in dist]
        self._cpu_cuts = sorted({s.cpu_milli for s in self._shapes})
        self._cpu_index = [self._cpu_cuts.index(s.cpu_milli) for s in self._shapes]
        if self._mix.count_memory:
            self._mem_cuts = sorted({s.memory_mib for s in self._shapes})
            self._mem_index = [self._mem_cuts.index(s.memory_mib) for s in self._shapes]
        else:  # no cut: every node's memory rank is 0, above every shape's index of -1
            self._mem_cuts = []
            self._mem_index = [-1] * len(self._shapes)
        self._gpu_terms: dict[GpuState, tuple[int, list[int | None]]] = {}
        self._values: dict[tuple[GpuState, int, int], float] = {}

    def fragmentation(self, gpus: GpuState, cpu_free: int, memory_free: int) -> float:
        """Expected GPUs of a node in this state that a pod drawn from the mix cannot use."""
        self._sync()
        cpu_rank = bisect_right(self._cpu_cuts, cpu_free)
        mem_rank = bisect_right(self._mem_cuts, memory_free)
        key = (gpus, cpu_rank, mem_rank)
        value = self._values.get(key)
        if value is None:
            if len(self._values) > _MEMO_LIMIT:
                self._values.clear()
            total, usable = self._terms(gpus)
            milli = 0.0
            for p, used, ci, mi in zip(self._probs, usable, self._cpu_index, self._mem_index, strict=True):
                fits = used is not None and ci < cpu_rank and mi < mem_rank
                milli += p * (total - used if fits and used is not None else total)
            value = self._values[key] = milli / MILLI
        return value

    def _terms(self, gpus: GpuState) -> tuple[int, list[int | None]]:
        """(free thousandths, per shape: thousandths it could use, or None when its GPUs do not fit)."""
        terms = self._gpu_terms.get(gpus)
        if terms is None:
            if len(self._gpu_terms) > _MEMO_LIMIT:
                self._gpu_terms.clear()
            total = sum(m for m, _ in gpus)
            usable: list[int | None] = []
            for shape in self._shapes:
                if not shape.gpus:  # a CPU-only pod uses no GPU: all of it is a fragment to it
                    usable.append(None)
                    continue
                room = [m for m, k in gpus if m >= shape.gpu_milli and self.accepts(k, shape.flavours)]
                usable.append(sum(room) if len(room) >= shape.gpus else None)
            terms = self._gpu_terms[gpus] = (total, usable)
        return terms


@dataclass(frozen=True, slots=True)
class _Scale:
    """What best fit measures a node's leftovers against: the largest node's CPU and GPUs (the
    paper's ``MaxSpecCpu`` and ``MaxSpecGpu``)."""

    cpu_milli: int
    gpu_milli: int

    @classmethod
    def of(cls, snapshot: Snapshot) -> _Scale:
        nodes = snapshot.topology.nodes
        return cls(max((n.cpu_milli for n in nodes), default=0), MILLI * max((len(n.gpus) for n in nodes), default=0))

    def waste(self, gpu_milli_after: int, cpu_after: int) -> float:
        """0..1: half the free GPUs' share plus half the free CPU's (a node without CPU figures: all free)."""
        gpu = gpu_milli_after / self.gpu_milli if self.gpu_milli else 0.0
        cpu = min(1.0, cpu_after / self.cpu_milli) if self.cpu_milli and cpu_after < UNLIMITED else 1.0
        return round(0.5 * gpu + 0.5 * cpu, 9)  # rounded: equal leftovers must tie exactly


@dataclass(frozen=True, slots=True)
class Choice:
    """The best way to put one pod on a node in a given state."""

    key: tuple[int, float, int, int]
    """Sort key, smaller is better: (minus ``fgd_level``, best-fit waste, free GPU thousandths after,
    free CPU after); see the module docstring."""
    delta: float
    """Change of the node's fragmentation in GPUs (negative: the pod fills a fragment)."""
    gpu_milli: int
    """Free thousandths of the GPU(s) to take (1000 for whole GPUs)."""
    kind: int
    """Their flavour kind (see ``FragmentationModel.kind``)."""


class FragmentationIndex:
    """Per snapshot: nodes grouped by exact state, and memoised choices per (state, pod shape).

    The snapshot marks nodes dirty as it changes them; groups are brought up to date lazily, so
    a burst of allocations costs O(GPUs) per changed node once, at the next question.
    """

    def __init__(self, snapshot: Snapshot) -> None:
        self._snapshot = snapshot
        count = snapshot.topology.node_count
        self.dirty: set[int] = set(range(count))
        self._node_state = [-1] * count
        self._state_id: dict[tuple[GpuState, int, int], int] = {}
        self._states: list[tuple[GpuState, int, int]] = []
        self._members: dict[int, set[int]] = {}
        """State id -> nodes in it (every node is in one)."""
        self._gpu_members: dict[int, set[int]] = {}
        """The same, for states with some GPU room left (what GPU pods search)."""
        self._model: FragmentationModel | None = None
        self._version = -1
        """The model (and its version) the groups and memoised choices belong to."""
        self._choices: dict[TaskShape, dict[int, Choice | None]] = {}
        self._scale = _Scale.of(snapshot)

    def _refresh(self) -> FragmentationModel:
        model = self._snapshot.workload.model
        if model is not self._model:
            # Kind ids belong to a model: another mix object means re-deriving every state.
            self._model = model
            self._state_id.clear()
            self._states.clear()
            self._members.clear()
            self._gpu_members.clear()
            self._node_state = [-1] * len(self._node_state)
            self.dirty = set(range(len(self._node_state)))
        if model.version != self._version:
            self._version = model.version
            self._choices = {}
        if self.dirty:
            self._regroup(model)
        return model

    def _regroup(self, model: FragmentationModel) -> None:
        snap = self._snapshot
        nodes = snap.topology.nodes
        for n in self.dirty:
            gpus = node_state(snap.gpu_milli[n], snap.gpu_keys[n], model)
            node = nodes[n]
            cpu = node.cpu_milli - snap.cpu_used[n] if node.cpu_milli else UNLIMITED
            mem = node.memory_mib - snap.memory_used[n] if node.memory_mib else UNLIMITED
            state = (gpus, cpu, mem)
            sid = self._state_id.get(state)
            if sid is None:
                sid = self._state_id[state] = len(self._states)
                self._states.append(state)
            old = self._node_state[n]
            if old == sid:
                continue
            for groups in (self._members, self._gpu_members):
                group = groups.get(old)
                if group is not None:
                    group.discard(n)
                    if not group:
                        del groups[old]
            self._node_state[n] = sid
            self._members.setdefault(sid, set()).add(n)
            if gpus:
                self._gpu_members.setdefault(sid, set()).add(n)
        self.dirty.clear()

    def node_fragmentation(self, n: int) -> float:
        """F of node ``n`` now, in GPUs."""
        model = self._refresh()
        return model.fragmentation(*self._states[self._node_state[n]])

    def choice(self, n: int, shape: TaskShape) -> Choice | None:
        """How one pod of ``shape`` best goes on node ``n`` (GPU room, CPU, memory), or None."""
        model = self._refresh()
        return self._choice(model, self._node_state[n], shape)

    def ranked(self, shape: TaskShape) -> Iterator[tuple[Choice, set[int]]]:
        """(choice, nodes in that state) for every state that holds the pod, best first (lazily).

        The best is found in one pass over the states; the rest are sorted only if asked for
        (when static constraints reject every node of the best state).
        """
        model = self._refresh()
        memo = self._choices.setdefault(shape, {})
        states = self._states
        groups = self._gpu_members if shape.gpus else self._members
        best: Choice | None = None
        best_sid = -1
        for sid in groups:
            if sid in memo:
                got = memo[sid]
            else:
                got = memo[sid] = _best_choice(model, states[sid], shape, self._scale)
            if got is not None and (best is None or got.key < best.key):
                best, best_sid = got, sid
        if best is None:
            return
        yield best, groups[best_sid]
        rest = sorted((got.key, sid, got) for sid in list(groups)
                      if sid != best_sid and (got := memo.get(sid)) is not None)
        for _, sid, got in rest:
            members = groups.get(sid)
            if members:
                yield got, members

    def _choice(self, model: FragmentationModel, sid: int, shape: TaskShape) -> Choice | None:
        memo = self._choices.setdefault(shape, {})
        if sid not in memo:
            memo[sid] = _best_choice(model, self._states[sid], shape, self._scale)
        return memo[sid]


def _best_choice(model: FragmentationModel, state: tuple[GpuState, int, int], shape: TaskShape,
                 scale: _Scale) -> Choice | None:
    gpus, cpu, mem = state
    if cpu < shape.cpu_milli or mem < shape.memory_mib:
        return None
    cpu_after = cpu - shape.cpu_milli
    mem_after = mem - shape.memory_mib
    before = model.fragmentation(gpus, cpu, mem)
    total = sum(m for m, _ in gpus)
    if not shape.gpus:
        delta = model.fragmentation(gpus, cpu_after, mem_after) - before
        return Choice((-fgd_level(delta), scale.waste(total, cpu_after), total, cpu_after), delta, 0, -1)
    left = total - shape.gpus * shape.gpu_milli
    waste = scale.waste(left, cpu_after)
    best: Choice | None = None
    for m, kind in dict.fromkeys(gpus):  # each distinct (room, kind) once
        if m < shape.gpu_milli or not model.accepts(kind, shape.flavours):
            continue
        after = _take(gpus, m, kind, shape, model)
        if after is None:
            continue
        delta = model.fragmentation(after, cpu_after, mem_after) - before
        # At the paper's resolution: smaller differences must not outrank best fit (module docstring).
        key = (-fgd_level(delta), waste, left, cpu_after)
        cand = Choice(key, delta, m, kind)
        if best is None or (cand.key, cand.gpu_milli) < (best.key, best.gpu_milli):
            best = cand
    return best


def _take(gpus: GpuState, milli: int, kind: int, shape: TaskShape,
          model: FragmentationModel) -> GpuState | None:
    """The state after one pod of ``shape`` takes GPUs with ``milli`` free, ``kind`` first.

    A share takes that one GPU; whole GPUs come from that kind first, then any accepted kind.
    """
    left = list(gpus)
    if shape.gpu_milli < MILLI:
        left.remove((milli, kind))
        left.append((milli - shape.gpu_milli, kind))
    else:
        wanted = shape.gpus
        for item in sorted(left, key=lambda it: (it[1] != kind, it[1])):
            if wanted and item[0] == MILLI and model.accepts(item[1], shape.flavours):
                left.remove(item)
                wanted -= 1
        if wanted:
            return None
    left = [item for item in left if item[0] > 0]
    left.sort()
    return tuple(left)


def node_state(milli: Sequence[int], keys: Sequence[tuple[str, ...]], model: FragmentationModel) -> GpuState:
    """A node's ``GpuState`` from per-GPU free thousandths and flavour keys (helper for tests/tools)."""
    return tuple(sorted((m, model.kind(k)) for m, k in zip(milli, keys, strict=True) if m > 0))


FGD_LEVELS = 100
"""Levels of the paper's score (kube-scheduler's ``MaxNodeScore``)."""


def fgd_level(delta: float) -> int:
    """The FGD paper's score of a fragmentation change of ``delta`` GPUs: ``int(100 * sigmoid(-delta))``.

    0..99: 50 for no change and for decreases under 1/25 of a GPU, 49 for small increases, higher
    when the pod fills fragments; large changes share a level as the sigmoid flattens. ``delta`` is
    rounded to a millionth first, so float noise in a sum never moves "no change" to 49.
    """
    return int(FGD_LEVELS * logistic_value(round(delta, 6), 1.0))


def logistic_value(delta: float, scale: float) -> float:
    """0..1, 0.5 at no change: how good a fragmentation change of ``delta`` GPUs is."""
    return 1.0 / (1.0 + math.exp(max(-50.0, min(50.0, delta / scale))))
