"""Queue specifications and their validation.

The quota tree is built from plain, immutable ``QueueSpec`` values rather than from the API models, so
that the core stays independent of the wire format: the operator converts ``GPUQueue`` objects into
specs, tests and benchmarks write them directly. Validation happens once, here, and reports every
problem at once with the queue and the field it concerns, because a platform team fixing a broken
queue tree wants the whole list, not one error per ``kubectl apply``.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

MIG_FLAVOR_PREFIX = "nvidia.com/mig-"
"""How a MIG profile flavour is named: the device plugin's resource of that profile
(``nvidia.com/mig-1g.10gb``). A quota of such a flavour counts slices of that profile, never whole
GPUs or shares of one (docs/quota.md)."""


def is_mig_flavor(flavor: str) -> bool:
    """Whether ``flavor`` names a MIG profile (``nvidia.com/mig-1g.10gb``) rather than whole GPUs."""
    return flavor.startswith(MIG_FLAVOR_PREFIX)


KNOWN_QUEUES_NAMED = 10
"""Names a message lists (known queues, served namespaces); the rest are counted."""


def some_named(names: Iterable[str], most: int = KNOWN_QUEUES_NAMED) -> str:
    """``names`` sorted for a message a person reads: the first ``most``, then how many more ("none"
    when empty). A condition message has a size limit: a list of every queue of a large cluster
    outgrew the CRD's 32,768 characters, and the job's status write was refused."""
    ordered = sorted(names)
    text = ", ".join(ordered[:most]) or "none"
    if len(ordered) > most:
        text += f" and {len(ordered) - most} more"
    return text


class WithinQueue(enum.StrEnum):
    """May a pending job evict running jobs of its own queue?"""

    NEVER = "Never"
    LOWER_PRIORITY = "LowerPriority"


class ReclaimFromBorrowers(enum.StrEnum):
    """May a queue evict jobs of borrowing queues to get back quota it is entitled to?"""

    NEVER = "Never"
    ANY = "Any"
    LOWER_PRIORITY = "LowerPriority"


class BorrowWithinParent(enum.StrEnum):
    """May a job that will itself borrow evict lower-priority jobs of other borrowing queues?"""

    NEVER = "Never"
    LOWER_PRIORITY = "LowerPriority"


@dataclass(frozen=True)
class PreemptionPolicy:
    """What a queue's pending jobs may evict. The defaults evict nothing (Kueue's defaults)."""

    within_queue: WithinQueue = WithinQueue.NEVER
    """``LowerPriority``: evict lower-priority jobs of the same queue."""
    reclaim_from_borrowers: ReclaimFromBorrowers = ReclaimFromBorrowers.NEVER
    """``Any`` / ``LowerPriority``: evict (any / lower-priority) jobs of queues that borrow, when the
    preemptor stays within the quota its own side of the tree is entitled to."""
    borrow_within_parent: BorrowWithinParent = BorrowWithinParent.NEVER
    """``LowerPriority``: even when the preemptor would itself borrow, evict lower-priority jobs of
    borrowing queues."""


@dataclass(frozen=True)
class FlavorQuota:
    """A queue's quota for one GPU flavour, in whole GPUs (or MIG slices of that profile)."""

    nominal: int = 0
    """GPUs this queue contributes to the tree and is entitled to use."""
    borrowing_limit: int | None = None
    """At most this many GPUs above its (subtree) quota; ``None``: no limit."""
    lending_limit: int | None = None
    """At most this many of its (subtree) quota may be used by other queues; ``None``: all of it. The
    rest, ``quota - lendingLimit``, is always kept free for this queue's own jobs."""


@dataclass(frozen=True)
class QueueSpec:
    """One queue of the tree; a queue without children is a leaf and takes jobs."""

    name: str
    """Unique name (the GPUQueue's name)."""
    parent: str | None = None
    """Name of the parent queue; ``None`` for a root."""
    weight: float = 1.0
    """Fair-share weight among siblings: a queue with twice the weight may borrow twice as much
    before it yields to its siblings. Zero: borrows only when no sibling wants to."""
    quotas: Mapping[str, FlavorQuota] = field(default_factory=dict)
    """Quota per flavour (GPU product such as ``NVIDIA-H100-80GB-HBM3`` or a MIG profile such as
    ``nvidia.com/mig-1g.10gb``). A flavour not listed behaves as nominal 0 without limits."""
    preemption: PreemptionPolicy = PreemptionPolicy()
    """What this queue's pending jobs may evict (meaningful on leaves)."""


class ProblemKind(enum.StrEnum):
    """What kind of thing is wrong with a queue spec (what its owner has to fix)."""

    INVALID = "InvalidSpec"
    """A field out of range or contradicting another (the API's validation normally refuses these)."""
    UNKNOWN_PARENT = "ParentNotFound"
    """``parent`` names a queue that does not exist."""
    CYCLE = "ParentCycle"
    """Following ``parent`` comes back to this queue."""


@dataclass(frozen=True)
class SpecProblem:
    """One thing wrong with a queue spec."""

    queue: str
    field: str
    message: str
    kind: ProblemKind = ProblemKind.INVALID
    members: tuple[str, ...] = ()
    """For a cycle, every queue on it (each is as broken as the one the problem is reported for)."""

    def __str__(self) -> str:
        return f"queue {self.queue}: {self.field}: {self.message}"


class QuotaSpecError(ValueError):
    """The queue specs do not form a valid quota tree; ``problems`` lists every reason."""

    def __init__(self, problems: list[SpecProblem]) -> None:
        self.problems = problems
        super().__init__("invalid queue tree:\n  " + "\n  ".join(str(p) for p in problems))


def validate_specs(specs: Iterable[QueueSpec]) -> dict[str, QueueSpec]:
    """The specs by name, parents before children; raises QuotaSpecError listing every problem."""
    problems: list[SpecProblem] = []
    by_name: dict[str, QueueSpec] = {}
    for spec in specs:
        if not spec.name:
            problems.append(SpecProblem("<unnamed>", "name", "must be a non-empty string"))
            continue
        if spec.name in by_name:
            problems.append(SpecProblem(spec.name, "name", "defined twice; queue names must be unique"))
            continue
        by_name[spec.name] = spec
    has_children = {s.parent for s in by_name.values() if s.parent is not None}
    for spec in by_name.values():
        problems.extend(_check_one(spec, by_name, is_leaf=spec.name not in has_children))
    problems.extend(_check_cycles(by_name))
    if problems:
        raise QuotaSpecError(problems)
    return _parents_first(by_name)


def _check_one(spec: QueueSpec, by_name: Mapping[str, QueueSpec], *, is_leaf: bool) -> list[SpecProblem]:
    out: list[SpecProblem] = []
    name = spec.name
    if spec.parent is not None and spec.parent not in by_name:
        out.append(SpecProblem(name, "parent", f"unknown queue {spec.parent!r} (known queues: {some_named(by_name)})",
                               ProblemKind.UNKNOWN_PARENT))
    if not isinstance(spec.weight, int | float) or not math.isfinite(spec.weight) or spec.weight < 0:
        out.append(SpecProblem(name, "weight", f"must be a finite number >= 0, got {spec.weight!r}"))
    for flavor, quota in spec.quotas.items():
        where = f"quotas[{flavor}]"
        if not flavor:
            out.append(SpecProblem(name, "quotas", "flavour names must be non-empty"))
        for field_name, value in (
            ("nominal", quota.nominal),
            ("borrowingLimit", quota.borrowing_limit),
            ("lendingLimit", quota.lending_limit),
        ):
            if value is None and field_name != "nominal":
                continue
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                out.append(SpecProblem(name, f"{where}.{field_name}", f"must be an integer >= 0, got {value!r}"))
        if spec.parent is None:
            for field_name, value in (
                ("borrowingLimit", quota.borrowing_limit),
                ("lendingLimit", quota.lending_limit),
            ):
                if value is not None:
                    out.append(
                        SpecProblem(name, f"{where}.{field_name}", "must be unset on a root queue (it has no parent)")
                    )
        ll = quota.lending_limit
        if is_leaf and isinstance(ll, int) and isinstance(quota.nominal, int) and ll > quota.nominal:
            out.append(
                SpecProblem(name, f"{where}.lendingLimit", f"{ll} exceeds nominal {quota.nominal} of this leaf queue")
            )
    return out


def _check_cycles(by_name: Mapping[str, QueueSpec]) -> list[SpecProblem]:
    out: list[SpecProblem] = []
    reported: set[str] = set()
    # Queues an earlier walk went through: from each, that walk went on to its end (a root, an unknown
    # parent, or a cycle it reported), so a walk that reaches one stops there: O(queues) in all, not
    # O(queues x depth) for a deep tree.
    walked: set[str] = set()
    for start in by_name:
        path: list[str] = []
        seen: set[str] = set()
        cur: str | None = start
        while cur is not None and cur in by_name and cur not in seen and cur not in walked:
            seen.add(cur)
            path.append(cur)
            cur = by_name[cur].parent
        walked.update(path)
        if cur is not None and cur in seen:
            cycle = path[path.index(cur) :]
            if not reported.intersection(cycle):
                reported.update(cycle)
                chain = " -> ".join([*cycle, cur])
                out.append(SpecProblem(cur, "parent", f"queues form a cycle: {chain}", ProblemKind.CYCLE,
                                       tuple(cycle)))
    return out


def _parents_first(by_name: Mapping[str, QueueSpec]) -> dict[str, QueueSpec]:
    """``by_name`` reordered so every queue follows its parent: in ``by_name``'s order, each queue is
    preceded by those of its ancestors not placed yet, the highest first.

    A loop, not recursion: a tree thousands of levels deep must not overflow the stack (which failed
    every cycle, so nothing was admitted anywhere). ``by_name`` has no cycles and no unknown parents
    (validation comes first).
    """
    ordered: dict[str, QueueSpec] = {}
    for name in by_name:
        chain: list[str] = []
        on_chain: set[str] = set()
        cur: str | None = name
        while cur is not None and cur not in ordered:
            if cur in on_chain:
                raise ValueError(f"queues form a cycle through {cur!r}")  # validation refuses these first
            chain.append(cur)
            on_chain.add(cur)
            cur = by_name[cur].parent
        for member in reversed(chain):
            ordered[member] = by_name[member]
    return ordered
