"""The hierarchical quota tree: who may use how many GPUs of each flavour, right now.

Semantics are Kueue's hierarchical cohorts, with one kind of node for every level (see docs/quota.md).
For each queue and flavour:

- ``quota`` (Kueue's SubtreeQuota): its own nominal plus what its children can lend
  (``child.quota - child.kept``). For a leaf it is its nominal.
- ``kept`` (Kueue's guaranteed quota): ``max(0, quota - lendingLimit)``, or 0 without a lending limit.
  Nobody outside the queue's subtree can ever use it.
- ``charged`` (Kueue's Usage): for a leaf, its jobs' usage; for a parent, the part of its children's
  charge that overflows their ``kept`` amount. Usage above ``kept`` is stored in the parent, and so on
  up to the root, whose charge can never exceed its quota.
- ``available``: what a new job could take now: ``max(0, kept - charged)`` locally, plus what the parent
  has available, capped by ``quota - kept - (charged - kept)+ + borrowingLimit``.

Admission checks every flavour first and charges only when all fit, so a refused admission leaves no
trace. Every update walks one path to the root: O(depth x flavours).
"""

from __future__ import annotations

import contextlib
import enum
import math
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass

from kubegang.quota._decision import OK, Decision, Ok, Refusal, Shortfall, Unschedulable
from kubegang.quota._spec import QueueSpec, some_named, validate_specs


class QueueNames(tuple[str, ...]):
    """Queue names in the tree's order (a tuple: read-only, so one copy serves every caller), with
    membership in O(1): the admission cycle asks ``job.queue in tree.leaves`` for every job, and
    scanning 10,000 names each time made a cycle of 10,000 jobs take half a minute."""

    _members: frozenset[str]

    def __new__(cls, names: Iterable[str]) -> QueueNames:
        self = super().__new__(cls, names)
        self._members = frozenset(self)
        return self

    def __contains__(self, name: object) -> bool:
        try:
            return name in self._members
        except TypeError:  # unhashable: no queue name, as a tuple would say
            return False


@dataclass(frozen=True)
class FairSharing:
    """How fair shares are computed."""

    half_life_seconds: float | None = None
    """When set, fair shares use usage decayed with this half-life instead of the current usage, so a
    queue that just ran a lot yields to its siblings for a while after its jobs end."""


class _Node:
    """One queue, with per-flavour numbers for every flavour the tree knows."""

    __slots__ = (
        "borrowing",
        "charged",
        "children",
        "decayed",
        "guaranteed",
        "lending",
        "name",
        "nominal",
        "parent",
        "path",
        "quota",
        "reach",
        "spec",
        "usage",
        "version",
        "weight",
    )

    def __init__(self, spec: QueueSpec, parent: _Node | None) -> None:
        self.name = spec.name
        self.spec = spec
        self.parent = parent
        self.weight = float(spec.weight)
        self.children: list[_Node] = []
        self.path: tuple[_Node, ...] = (self,) if parent is None else (self, *parent.path)
        self.nominal: dict[str, int] = {}
        self.borrowing: dict[str, int | None] = {}
        self.lending: dict[str, int | None] = {}
        self.quota: dict[str, int] = {}
        self.guaranteed: dict[str, int] = {}
        # What a job of this queue's subtree could take with every other queue idle (``_potential``);
        # static between flavour additions. Fair shares divide by the parent's reach.
        self.reach: dict[str, int] = {}
        self.charged: dict[str, int] = {}
        self.usage: dict[str, int] = {}
        # flavour -> (decayed charge, time of last update); only with a half-life.
        self.decayed: dict[str, tuple[float, float]] = {}
        # Bumped whenever ``charged`` changes, so fair shares can be cached until then.
        self.version = 0

    @property
    def is_leaf(self) -> bool:
        return not self.children


@dataclass(frozen=True)
class QueueStatus:
    """What a GPUQueue's status shows, per flavour."""

    name: str
    usage: Mapping[str, int]
    """GPUs used by all jobs in the queue's subtree."""
    borrowed: Mapping[str, int]
    """GPUs the queue (subtree) uses beyond its quota, taken from its parent's pool."""
    quota: Mapping[str, int]
    """Own nominal plus what its children lend (the nominal, for a leaf)."""
    fair_share: float
    """Weighted dominant share of what it borrows (0 when it borrows nothing)."""


class LimitKind(enum.StrEnum):
    """Which constraint bounds what a job of a queue can get beyond its queue's unused nominal."""

    NOMINAL = "nominal"
    """A root queue: its own nominal is all there is (no parent to borrow from)."""
    BORROWING_LIMIT = "borrowingLimit"
    """The ``borrowingLimit`` of the queue or of an ancestor."""
    POOL = "pool"
    """What the tree has unused: its queues' nominal, less what they keep (``lendingLimit``) and use."""


@dataclass(frozen=True)
class _Limit:
    """Which constraint bounds what a queue can get from above."""

    node: _Node
    kind: LimitKind


@dataclass(frozen=True)
class BindingLimit:
    """What a job of a queue can get now of one flavour, and the constraint that bounds it."""

    kind: LimitKind
    queue: str
    """The queue whose ``borrowingLimit`` binds, or the root whose pool (or nominal) does."""
    available: int
    """What a new job of the queue could take now."""
    within_nominal: int
    """Of that, what the queue's own unused nominal holds."""
    lent: int
    """The queue's unused nominal that other queues use now (reclaimable by preemption)."""


class QuotaTree:
    """Quota accounting for a tree of queues; the single owner of usage numbers."""

    def __init__(
        self,
        specs: Iterable[QueueSpec],
        *,
        fair_sharing: FairSharing = FairSharing(),
        clock: Callable[[], float] = time.monotonic,
        unit: int = 1,
    ) -> None:
        ordered = validate_specs(specs)
        self.fair_sharing = fair_sharing
        self.clock = clock
        self.unit = unit
        """Amounts per GPU: 1 when quota and usage count whole GPUs, 1000 when they count thousandths
        (shared-GPU jobs). Only what reasons print is divided by it; all accounting stays integer."""
        self._nodes: dict[str, _Node] = {}
        for spec in ordered.values():
            parent = self._nodes[spec.parent] if spec.parent is not None else None
            node = _Node(spec, parent)
            if parent is not None:
                parent.children.append(node)
            self._nodes[spec.name] = node
        # The structure is fixed from here on (flavours may be added, queues never are), so the names
        # are computed once.
        self._queues = QueueNames(self._nodes)
        self._leaves = QueueNames(n.name for n in self._nodes.values() if n.is_leaf)
        self._flavors: list[str] = []
        for flavor in sorted({f for s in ordered.values() for f in s.quotas}):
            self._add_flavor(flavor)
        self._jobs: dict[str, tuple[_Node, dict[str, int]]] = {}
        self._undo: list[list[tuple[str, str, dict[str, int], bool]]] = []

    # -- structure --------------------------------------------------------------------------------

    @property
    def queues(self) -> QueueNames:
        """All queue names, parents before children (``in`` is O(1))."""
        return self._queues

    @property
    def leaves(self) -> QueueNames:
        """Queues that take jobs, in the order of ``queues`` (``in`` is O(1))."""
        return self._leaves

    @property
    def flavors(self) -> list[str]:
        """Flavours named by any queue (or by a recorded job)."""
        return list(self._flavors)

    def spec(self, queue: str) -> QueueSpec:
        return self._node(queue).spec

    def is_leaf(self, queue: str) -> bool:
        return self._node(queue).is_leaf

    def path(self, queue: str) -> list[str]:
        """The queue and its ancestors, ending at the root."""
        return [n.name for n in self._node(queue).path]

    def lowest_common_ancestor(self, a: str, b: str) -> str | None:
        """The deepest queue that holds both in its subtree; None if they are in different trees."""
        ancestors = {n.name for n in self._node(a).path}
        return next((n.name for n in self._node(b).path if n.name in ancestors), None)

    # -- reading ----------------------------------------------------------------------------------

    def usage(self, queue: str) -> dict[str, int]:
        """GPUs used per flavour by the jobs of the queue's subtree."""
        return {f: v for f, v in self._node(queue).usage.items() if v}

    def borrowed(self, queue: str) -> dict[str, int]:
        """GPUs per flavour the queue uses beyond its quota (from its parent's pool)."""
        node = self._node(queue)
        return {f: node.charged[f] - node.quota[f] for f in self._flavors if node.charged[f] > node.quota[f]}

    def available(self, queue: str) -> dict[str, int]:
        """GPUs per flavour a new job of this queue could take now."""
        node = self._node(queue)
        return {f: max(0, self._available(node, f)[0]) for f in self._flavors}

    def lent(self, queue: str) -> dict[str, int]:
        """GPUs per flavour of the queue's own nominal that other queues use now (reclaimable by
        preemption): what a refusal's reason calls "lent to other queues"."""
        node = self._node(queue)
        out: dict[str, int] = {}
        for flavor in self._flavors:
            amount = _lent(node, flavor, max(0, self._available(node, flavor)[0]))
            if amount:
                out[flavor] = amount
        return out

    def binding_limit(self, queue: str, flavor: str) -> BindingLimit:
        """What a job of ``queue`` can get of ``flavor`` now and which limit binds (the numbers a
        refusal's reason prints, as data)."""
        node = self._node(queue)
        if flavor not in node.quota:
            return BindingLimit(LimitKind.NOMINAL, queue, 0, 0, 0)
        avail, limit = self._available(node, flavor)
        avail = max(0, avail)
        lent = _lent(node, flavor, avail)
        kind = LimitKind.NOMINAL if node.parent is None else limit.kind
        unused = max(0, node.nominal[flavor] - node.usage[flavor])
        return BindingLimit(kind, limit.node.name, avail, unused - lent, lent)

    def status(self, queue: str) -> QueueStatus:
        from kubegang.quota._fairshare import dominant_share

        node = self._node(queue)
        return QueueStatus(
            name=queue,
            usage=self.usage(queue),
            borrowed=self.borrowed(queue),
            quota={f: v for f, v in node.quota.items() if v},
            fair_share=dominant_share(self, queue),
        )

    def __contains__(self, job_id: object) -> bool:
        return job_id in self._jobs

    def job_queue(self, job_id: str) -> str:
        return self._jobs[job_id][0].name

    def job_usage(self, job_id: str) -> dict[str, int]:
        return dict(self._jobs[job_id][1])

    @property
    def jobs(self) -> list[str]:
        return list(self._jobs)

    def jobs_in(self, queue: str) -> list[str]:
        """Admitted jobs of the queue's subtree (for the GPUQueue status's admitted count)."""
        node = self._node(queue)
        return [job_id for job_id, (leaf, _) in self._jobs.items() if node in leaf.path]

    # -- deciding ---------------------------------------------------------------------------------

    def can_ever_fit(self, queue: str, usage: Mapping[str, int]) -> Ok | Unschedulable:
        """Whether the job could be admitted if every other queue were idle."""
        request = _clean_usage(usage)
        node = self._nodes.get(queue)
        if node is None or not node.is_leaf:
            return Unschedulable(queue, (), self._not_a_leaf(queue))
        shortfalls: list[Shortfall] = []
        reasons: list[str] = []
        for flavor, need in request.items():
            if flavor not in node.quota:
                shortfalls.append(Shortfall(flavor, need, 0))
                reasons.append(self._no_such_flavor(node, flavor, need))
                continue
            most, limit = self._potential(node, flavor)
            if need > most:
                shortfalls.append(Shortfall(flavor, need, most))
                q = self._gpus
                reasons.append(
                    f"queue {queue} can never hold {q(need)} {flavor}: at most {q(most)} even with every other "
                    f"queue idle ({_describe_potential(limit, flavor, most, q)})"
                )
        if shortfalls:
            return Unschedulable(queue, tuple(shortfalls), "; ".join(reasons))
        return OK

    def can_admit(self, queue: str, usage: Mapping[str, int]) -> Decision:
        """Whether a job of this queue and usage fits in quota now; changes nothing."""
        ever = self.can_ever_fit(queue, usage)
        if not ever:
            return ever
        node = self._nodes[queue]
        request = _clean_usage(usage)
        shortfalls: list[Shortfall] = []
        reasons: list[str] = []
        for flavor, need in request.items():
            avail, limit = self._available(node, flavor)
            if need > avail:
                shortfalls.append(Shortfall(flavor, need, max(0, avail)))
                reasons.append(self._explain_refusal(node, flavor, need, max(0, avail), limit))
        if shortfalls:
            return Refusal(queue, tuple(shortfalls), "; ".join(reasons))
        return OK

    def admit(self, job_id: str, queue: str, usage: Mapping[str, int]) -> Decision:
        """Charge the job up the tree if every flavour fits; otherwise change nothing."""
        if job_id in self._jobs:
            raise ValueError(f"job {job_id!r} is already admitted to queue {self._jobs[job_id][0].name}")
        decision = self.can_admit(queue, usage)
        if decision:
            self._charge(job_id, self._nodes[queue], _clean_usage(usage))
        return decision

    def record(self, job_id: str, queue: str, usage: Mapping[str, int]) -> None:
        """Charge a job that already runs, without checking limits.

        For rebuilding the tree from the API after a restart or a change of queue specs: a job that
        was admitted is a fact, even if a lowered quota would not admit it today.
        """
        if job_id in self._jobs:
            raise ValueError(f"job {job_id!r} is already admitted to queue {self._jobs[job_id][0].name}")
        node = self._node(queue)
        if not node.is_leaf:
            raise ValueError(self._not_a_leaf(queue))
        request = _clean_usage(usage)
        for flavor in request:
            if flavor not in node.quota:
                self._add_flavor(flavor)
        self._charge(job_id, node, request)

    def release(self, job_id: str) -> bool:
        """Give back a job's quota; False if the job was not admitted."""
        entry = self._jobs.pop(job_id, None)
        if entry is None:
            return False
        node, request = entry
        now = self.clock() if self.fair_sharing.half_life_seconds else 0.0
        for flavor, amount in request.items():
            self._remove(node, flavor, amount, now)
        if self._undo:
            self._undo[-1].append((job_id, node.name, request, False))
        return True

    @contextlib.contextmanager
    def simulate(self) -> Iterator[QuotaTree]:
        """Admit and release freely inside the block; everything is undone when it exits.

        For "what if" questions (would the preemptor fit after these evictions?) without copying.
        """
        self._undo.append([])
        try:
            yield self
        finally:
            log = self._undo.pop()
            for job_id, queue, request, was_admit in reversed(log):
                if was_admit:
                    # Undo without logging into an outer simulation: it never saw these changes.
                    self._silent_release(job_id)
                else:
                    self._charge(job_id, self._nodes[queue], request, log=False)

    # -- internals --------------------------------------------------------------------------------

    def _node(self, queue: str) -> _Node:
        try:
            return self._nodes[queue]
        except KeyError:
            raise KeyError(f"unknown queue {queue!r}") from None

    def _add_flavor(self, flavor: str) -> None:
        self._flavors.append(flavor)
        # Children after parents in _nodes, so walk it backwards to sum subtree quotas bottom-up.
        for node in reversed(self._nodes.values()):
            q = node.spec.quotas.get(flavor)
            node.nominal[flavor] = q.nominal if q else 0
            node.borrowing[flavor] = q.borrowing_limit if q else None
            node.lending[flavor] = q.lending_limit if q else None
            node.charged[flavor] = 0
            node.usage[flavor] = 0
            quota = node.nominal[flavor] + sum(c.quota[flavor] - c.guaranteed[flavor] for c in node.children)
            node.quota[flavor] = quota
            lending = node.lending[flavor]
            node.guaranteed[flavor] = 0 if lending is None else max(0, quota - lending)
        for node in self._nodes.values():  # parents first: reach flows down the tree
            # ``_potential``'s walk down the path, one step from the parent's: O(queues), not
            # O(queues x depth).
            parent = node.parent
            if parent is None:
                node.reach[flavor] = node.quota[flavor]
                continue
            most = node.guaranteed[flavor] + parent.reach[flavor]
            cap = node.borrowing[flavor]
            if cap is not None and node.quota[flavor] + cap < most:
                most = node.quota[flavor] + cap
            node.reach[flavor] = most

    def _charge(self, job_id: str, node: _Node, request: dict[str, int], *, log: bool = True) -> None:
        now = self.clock() if self.fair_sharing.half_life_seconds else 0.0
        for flavor, amount in request.items():
            self._add(node, flavor, amount, now)
        self._jobs[job_id] = (node, request)
        if log and self._undo:
            self._undo[-1].append((job_id, node.name, request, True))

    def _silent_release(self, job_id: str) -> None:
        node, request = self._jobs.pop(job_id)
        now = self.clock() if self.fair_sharing.half_life_seconds else 0.0
        for flavor, amount in request.items():
            self._remove(node, flavor, amount, now)

    def _add(self, node: _Node, flavor: str, amount: int, now: float) -> None:
        for n in node.path:
            n.usage[flavor] += amount
        n_: _Node | None = node
        while n_ is not None and amount > 0:
            before = n_.charged[flavor]
            self._touch(n_, flavor, now)
            n_.charged[flavor] = before + amount
            n_.version += 1
            kept = n_.guaranteed[flavor]
            amount = max(0, before + amount - kept) - max(0, before - kept)
            n_ = n_.parent

    def _remove(self, node: _Node, flavor: str, amount: int, now: float) -> None:
        for n in node.path:
            n.usage[flavor] -= amount
        n_: _Node | None = node
        while n_ is not None and amount > 0:
            before = n_.charged[flavor]
            self._touch(n_, flavor, now)
            n_.charged[flavor] = before - amount
            n_.version += 1
            kept = n_.guaranteed[flavor]
            amount = max(0, before - kept) - max(0, before - amount - kept)
            n_ = n_.parent

    def _touch(self, node: _Node, flavor: str, now: float) -> None:
        """Fold the charge held since the last change into the decayed charge."""
        if self.fair_sharing.half_life_seconds:
            node.decayed[flavor] = (self._decayed_charge(node, flavor, now), now)

    def _decayed_charge(self, node: _Node, flavor: str, now: float) -> float:
        half_life = self.fair_sharing.half_life_seconds
        if not half_life:
            return float(node.charged[flavor])
        value, since = node.decayed.get(flavor, (0.0, now))
        current = node.charged[flavor]
        # The charge was constant since the last change: the decayed value moves towards it.
        return current + (value - current) * math.pow(2.0, -max(0.0, now - since) / half_life)

    def _available(self, node: _Node, flavor: str) -> tuple[int, _Limit]:
        """What a job of ``node`` could take now, and the constraint that bounds the borrowed part."""
        path = node.path
        root = path[-1]
        avail = root.quota[flavor] - root.charged[flavor]
        limit = _Limit(root, LimitKind.POOL)
        for n in reversed(path[:-1]):
            kept = n.guaranteed[flavor]
            charged = n.charged[flavor]
            cap = n.borrowing[flavor]
            if cap is not None:
                most = n.quota[flavor] - kept - max(0, charged - kept) + cap
                if most < avail:
                    avail, limit = most, _Limit(n, LimitKind.BORROWING_LIMIT)
            avail = max(0, kept - charged) + avail
        return avail, limit

    def _extra_along_path(self, node: _Node, request: Mapping[str, int]) -> list[tuple[_Node, dict[str, int]]]:
        """For each queue from ``node`` to the root, what a job's request would add to its charge."""
        out: list[tuple[_Node, dict[str, int]]] = []
        extra = {f: a for f, a in request.items() if a and f in node.charged}
        n: _Node | None = node
        while n is not None:
            out.append((n, extra))
            nxt: dict[str, int] = {}
            for flavor, amount in extra.items():
                before, kept = n.charged[flavor], n.guaranteed[flavor]
                overflow = max(0, before + amount - kept) - max(0, before - kept)
                if overflow:
                    nxt[flavor] = overflow
            extra = nxt
            n = n.parent
        return out

    def _path_version(self, queue: str) -> int | None:
        """Changes whenever a charge that the queue's fair share depends on changes (not the root's).

        None for an unknown queue.
        """
        node = self._nodes.get(queue)
        return None if node is None else sum(n.version for n in node.path[:-1])

    def _potential(self, node: _Node, flavor: str) -> tuple[int, _Limit]:
        """What a job of ``node`` could take if every other queue were idle."""
        path = node.path
        root = path[-1]
        most = root.quota[flavor]
        limit = _Limit(root, LimitKind.POOL)
        for n in reversed(path[:-1]):
            most = n.guaranteed[flavor] + most
            cap = n.borrowing[flavor]
            if cap is not None and n.quota[flavor] + cap < most:
                most, limit = n.quota[flavor] + cap, _Limit(n, LimitKind.BORROWING_LIMIT)
        return most, limit

    def _not_a_leaf(self, queue: str) -> str:
        if queue not in self._nodes:
            return f"queue {queue} does not exist"
        # A few names, not all: a condition message over the CRD's 32,768 characters is refused.
        leaves = [n.name for n in _subtree(self._nodes[queue]) if n.is_leaf]
        return f"queue {queue} is not a leaf queue; jobs enter leaf queues only (under it: {some_named(leaves)})"

    def _gpus(self, amount: int) -> str:
        """``amount`` as reasons print it: GPUs, with decimals only for a share of one."""
        whole, part = divmod(amount, self.unit)
        return str(whole) if not part else f"{amount / self.unit:g}"

    def _no_such_flavor(self, node: _Node, flavor: str, need: int) -> str:
        known = ", ".join(self._flavors) or "none"
        return (
            f"queue {node.name} can never hold {self._gpus(need)} {flavor}: no queue of the tree has quota for that "
            f"flavour (flavours with quota: {known})"
        )

    def _explain_refusal(self, node: _Node, flavor: str, need: int, avail: int, limit: _Limit) -> str:
        nominal = node.nominal[flavor]
        used = node.usage[flavor]
        lent = _lent(node, flavor, avail)
        free_nominal = max(0, nominal - used) - lent
        more = avail - free_nominal
        q = self._gpus
        text = f"queue {node.name} needs {q(need)} {flavor} but can get {q(avail)} now: "
        text += f"nominal {q(nominal)}, {q(used)} in use, {q(free_nominal)} free within nominal"
        if lent:
            text += f" ({q(lent)} lent to other queues, reclaimable by preemption)"
        if node.parent is None:
            return text + ", no parent to borrow from"
        text += f", can borrow {q(more)} more"
        lim = limit.node
        if limit.kind is LimitKind.BORROWING_LIMIT:
            borrowed = max(0, lim.charged[flavor] - lim.quota[flavor])
            cap = q(lim.borrowing[flavor] or 0)
            if lim is node:
                return text + f" (borrowingLimit {cap}, {q(borrowed)} borrowed)"
            return text + f" (borrowingLimit {cap} of queue {lim.name}, {q(borrowed)} borrowed)"
        free = max(0, lim.quota[flavor] - lim.charged[flavor])
        return text + f" ({q(free)} unused of the {q(lim.quota[flavor])} shared in {lim.name}'s tree)"


def _lent(node: _Node, flavor: str, avail: int) -> int:
    """Of the queue's unused nominal, what a job of it cannot get now (others use it)."""
    unused = max(0, node.nominal[flavor] - node.usage[flavor])
    return unused - min(unused, avail)


def _describe_potential(limit: _Limit, flavor: str, most: int, q: Callable[[int], str]) -> str:
    n = limit.node
    if limit.kind is LimitKind.BORROWING_LIMIT:
        return f"quota {q(n.quota[flavor])} + borrowingLimit {q(n.borrowing[flavor] or 0)} of queue {n.name}"
    total = _total_nominal(n, flavor)
    if total > most:
        return f"{n.name}'s tree has {q(total)}, of which other queues keep {q(total - most)} for themselves"
    return f"{n.name}'s tree has {q(total)} in all"


def _total_nominal(node: _Node, flavor: str) -> int:
    return sum(n.nominal[flavor] for n in _subtree(node))


def _subtree(node: _Node) -> Iterator[_Node]:
    """The node and everything under it, without recursion (a tree may be thousands of levels deep)."""
    stack = [node]
    while stack:
        n = stack.pop()
        yield n
        stack.extend(reversed(n.children))


def _clean_usage(usage: Mapping[str, int]) -> dict[str, int]:
    """The non-zero entries; a ValueError names a bad one."""
    out: dict[str, int] = {}
    for flavor, amount in usage.items():
        if not isinstance(amount, int) or isinstance(amount, bool) or amount < 0:
            raise ValueError(f"usage[{flavor}] must be an integer >= 0, got {amount!r}")
        if amount:
            out[flavor] = amount
    return out
