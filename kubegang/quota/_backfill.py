"""Backfill past a queue head that does not fit on the GPUs, with a reservation so it cannot starve.

Why: with strict FIFO per leaf queue, a head that fits in quota but not on the free GPUs (a 32-GPU
gang waiting for 8 whole nodes) holds back every job behind it, so with a handful of queues all
heads are soon big gangs and the cluster idles while small jobs that fit wait. Measured on the
simulator (``bench/sim/sweep_backfill.py``, 5 seeds, docs/benchmarks/backfill-sweep.md): with
Philly-like sizes, GPUs allocated while jobs wait rise from 90% to 96-98% and the mean queueing
delay falls from 1-7 h to 0.1-1.2 h. Backfill alone starves big gangs (the longest wait on
gb200-nvl72 grew from 26 h to 64 h): small jobs keep taking every GPU that frees up.

The rule, Slurm's EASY backfill, with run-time estimates where jobs give a time limit:

1. ``BEST_EFFORT_FIFO`` (default): a head that is not admitted (no room on the GPUs, or no quota)
   steps aside for the rest of the cycle, so the jobs behind it, in its queue and in others, may
   start now. ``STRICT_FIFO``: it keeps its place and its queue waits (the old behaviour, for teams
   that want strict order; a core setting, not exposed by the operator).
2. The first time a job is blocked is remembered (no room on the GPUs, or parked by quota: a gang
   bigger than what is free is refused by the root's quota before placement is asked). Once it has been blocked for
   ``reserve_after_seconds``, it gets a *reservation*: the nodes of the placement it would get once
   the fewest running gangs are gone (the preemption planner's answer, with those gangs waited for,
   not evicted). Every other gang is then placed with those nodes excluded, so GPUs freed there are
   kept for it, and it goes first among jobs of its priority. It starts as soon as it fits
   anywhere, at the latest when the gangs running on its nodes at reservation time have finished:
   its wait is bounded by ``reserve_after_seconds`` plus their remaining run time. The reservation
   keeps nodes, not quota: it bounds the wait when quota is not what blocks the job (queues that
   may borrow what the cluster has).
3. At most ``max_reservations`` at a time: each one keeps GPUs idle while its nodes drain.
4. **Time limits** (a GPUJob's ``timeLimitSeconds``, Slurm's ``--time``), where the gangs it waits for
   have them: the reservation takes the nodes whose gangs end first (the shortest prefix of running
   gangs, soonest limit first, whose departure lets it run), so it knows when it can start at the
   latest (``starts_by``). A job whose own limit ends before that may still be placed on those nodes:
   it is gone before the holder could use them, so it costs the holder nothing and the GPUs do not
   idle while they drain (Slurm's backfill). Such a reservation may be taken sooner
   (``planned_reserve_after_seconds``): it costs little when short jobs fill its window.
5. **Predicted tenants** (``predicted_tenants``): a job whose limit ends too late, but whose run time
   predicted from finished gangs like it (``kubegang.quota.RunTimeHistory``) ends by the latest start,
   may run on the reservation's nodes as its *tenant*. A tenant still running past its predicted end
   when the holder could start by evicting tenants alone is evicted (whole, requeued), so a wrong
   prediction costs the tenant its work, never the holder its start. EASY++'s predictions, with the
   limit still bounding every promise made to the holder.

Pure bookkeeping: the caller (the simulator, the operator) asks the placement engine for the
reservation's nodes and passes ``excluded_for(job)`` to it for every other gang.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from kubegang.quota._pending import PendingJob


class QueueingStrategy(enum.StrEnum):
    """What a queue head that fits in quota but not on the GPUs does (Kueue's names)."""

    STRICT_FIFO = "StrictFIFO"
    """It keeps its place: nothing behind it in its queue starts before it."""
    BEST_EFFORT_FIFO = "BestEffortFIFO"
    """It steps aside for the cycle; jobs behind it that fit start (backfill)."""


DEFAULT_RESERVE_AFTER_SECONDS = 48 * 3600.0
"""A blocked job reserves its place after 48 hours. A reservation idles the GPUs it drains, and
without run times it may wait for the longest job on its nodes: on the sweep (docs/quota.md,
"Backfill") 4-24 h cost up to 4 points of allocation on Kalos-like workloads; 48 h costs at most
0.6 (within seed noise) and still cuts the longest wait by 9-12 h against never reserving."""


DEFAULT_PLANNED_RESERVE_AFTER_SECONDS = 0.0
"""A blocked job whose latest start the time limits give reserves at once, as Slurm's backfill does:
jobs that end before it fill its nodes meanwhile, so the reservation idles little (measured on the
tuning seeds: docs/benchmarks-analysis.md, "Time limits")."""


@dataclass(frozen=True)
class BackfillPolicy:
    """How the admission cycle treats heads that fit in quota but not on the GPUs."""

    strategy: QueueingStrategy = QueueingStrategy.BEST_EFFORT_FIFO
    """``BestEffortFIFO`` backfills past a blocked head; ``StrictFIFO`` waits for it."""
    reserve_after_seconds: float | None = DEFAULT_RESERVE_AFTER_SECONDS
    """Seconds a job may stay blocked before it reserves its nodes; None: never (pure backfill,
    big gangs may starve). Only used with ``BestEffortFIFO``."""
    max_reservations: int = 1
    """Reservations held at once (EASY backfill holds one)."""
    replan: bool = True
    """Whether a reservation whose start the time limits give is planned again once a gang running
    when it was planned has gone (Slurm re-plans every backfill pass; nothing else can move it
    earlier): gangs end before their limits, so the nodes that free first and the latest start move."""
    planned_reserve_after_seconds: float | None = DEFAULT_PLANNED_RESERVE_AFTER_SECONDS
    """Seconds a job may stay blocked before it reserves when every gang it would wait for has a time
    limit, so its latest start is known and jobs that end before it may use its nodes meanwhile; None:
    ``reserve_after_seconds`` for those too."""
    predicted_tenants: bool = False
    """Whether a job whose time limit ends after a reservation's latest start, but whose predicted run
    time ends before it, may run on the reservation's nodes as its tenant: evicted (requeued) if still
    running past its prediction when the holder could start. False: such a job waits (Slurm's rule)."""

    def __post_init__(self) -> None:
        if not isinstance(self.strategy, QueueingStrategy):
            try:
                object.__setattr__(self, "strategy", QueueingStrategy(self.strategy))
            except ValueError:
                allowed = ", ".join(s.value for s in QueueingStrategy)
                raise ValueError(f"BackfillPolicy.strategy: {self.strategy!r} is not one of {allowed}") from None
        after = self.reserve_after_seconds
        if after is not None and (isinstance(after, bool) or not isinstance(after, int | float)
                                  or math.isnan(after) or after < 0):
            raise ValueError(
                f"BackfillPolicy.reserve_after_seconds: {after!r} must be a number of seconds >= 0, or None (never)")
        planned = self.planned_reserve_after_seconds
        if planned is not None and (isinstance(planned, bool) or not isinstance(planned, int | float)
                                    or math.isnan(planned) or planned < 0):
            raise ValueError(f"BackfillPolicy.planned_reserve_after_seconds: {planned!r} must be a number of "
                             "seconds >= 0, or None (as reserve_after_seconds)")
        if isinstance(self.max_reservations, bool) or not isinstance(self.max_reservations, int) \
                or self.max_reservations < 0:
            raise ValueError(f"BackfillPolicy.max_reservations: {self.max_reservations!r} must be an integer >= 0")


@dataclass(frozen=True)
class BackfillReservation:
    """Nodes held for one blocked job."""

    nodes: frozenset[str]
    """Other gangs are placed off them (unless they end by ``starts_by``)."""
    starts_by: float | None = None
    """When the holder can start on them at the latest, from the time limits of the gangs running
    there (the caller's clock); None: unknown (a gang there has no limit)."""
    ends_by: float | None = None
    """When the holder is gone from them at the latest (``starts_by`` plus its own time limit); None:
    unknown. A later reservation may take these nodes from then on (reservations in time)."""


class Backfill:
    """Blocked heads and their reservations, kept across admission cycles."""

    def __init__(self, policy: BackfillPolicy | None = None) -> None:
        self.policy = policy or BackfillPolicy()
        self._blocked_since: dict[str, float] = {}
        self._reserved: dict[str, BackfillReservation] = {}
        self._tenants: dict[str, dict[str, float]] = {}
        """Holder -> its tenants (``predicted_tenants``) and when each is predicted to end."""

    @property
    def steps_aside(self) -> bool:
        """Whether a blocked head steps aside for the jobs behind it."""
        return self.policy.strategy is QueueingStrategy.BEST_EFFORT_FIFO

    def blocked(self, job_id: str, now: float) -> None:
        """``job_id`` fits in quota but not on the GPUs at ``now`` (the first time counts)."""
        self._blocked_since.setdefault(job_id, now)

    def reservation_due(self, job_id: str, now: float, *, after: float | None = None,
                        planned: bool = False) -> bool:
        """Whether ``job_id`` should now get a reservation (the caller finds its nodes); ``after``
        overrides the policy's ``reserve_after_seconds`` (a queue's own setting); ``planned``: the
        threshold of a reservation whose start the time limits give (``planned_reserve_after_seconds``,
        when the policy sets one and the queue does not)."""
        if after is None:
            after = self.policy.reserve_after_seconds
            if planned and self.policy.planned_reserve_after_seconds is not None:
                after = self.policy.planned_reserve_after_seconds
        return (
            self.steps_aside
            and after is not None
            and job_id in self._blocked_since
            and job_id not in self._reserved
            and len(self._reserved) < self.policy.max_reservations
            and now - self._blocked_since[job_id] >= after
        )

    def could_plan_sooner(self, job_id: str, now: float, *, after: float | None = None) -> bool:
        """Whether a reservation with a known start would be due for ``job_id`` now though a plain one
        is not (the caller then asks whether the time limits give one)."""
        return (self.reservation_due(job_id, now, after=after, planned=True)
                and not self.reservation_due(job_id, now, after=after))

    def reserve(self, job_id: str, nodes: Iterable[str], starts_by: float | None = None,
                ends_by: float | None = None) -> None:
        """Keep ``nodes`` for ``job_id``: other gangs are placed without them until it starts, except
        those that end by ``starts_by`` (its latest start on them, when known); ``ends_by``: when it is
        gone from them at the latest, when known."""
        if job_id not in self._reserved and len(self._reserved) >= self.policy.max_reservations:
            raise ValueError(f"cannot reserve for {job_id!r}: {len(self._reserved)} reservation(s) held already, "
                             f"max_reservations is {self.policy.max_reservations}")
        self._reserved[job_id] = BackfillReservation(frozenset(nodes), starts_by, ends_by)

    def reservations(self) -> list[tuple[str, BackfillReservation]]:
        """Every (holder, reservation), in the order they were taken."""
        return list(self._reserved.items())

    def reservation(self, job_id: str) -> frozenset[str] | None:
        """The nodes reserved for ``job_id``, if it holds a reservation."""
        held = self._reserved.get(job_id)
        return held.nodes if held is not None else None

    def held(self, job_id: str) -> BackfillReservation | None:
        """The reservation of ``job_id`` (nodes and latest start), if it holds one."""
        return self._reserved.get(job_id)

    def excluded_for(self, job_id: str, ends_by: float | None = None, *,
                     starts_at: float | None = None) -> frozenset[str]:
        """Nodes ``job_id`` must not be placed on: those reserved for other jobs, less those of
        reservations it would leave in time (``ends_by``: its start plus its time limit, or its predicted
        end where it would be a tenant) and, when it would start only at ``starts_at`` (a reservation
        being planned), those whose holder is gone by then (reservations in time)."""
        out: set[str] = set()
        for holder, held in self._reserved.items():
            if holder == job_id:
                continue
            if _gone_in_time(held, ends_by):
                continue  # gone before the holder could start there
            if starts_at is not None and held.ends_by is not None and starts_at >= held.ends_by:
                continue  # starts after the holder has gone
            out |= held.nodes
        return frozenset(out)

    def overlaps(self, job_id: str, nodes: frozenset[str], starts_by: float | None) -> bool:
        """Whether reserving ``nodes`` for ``job_id`` from ``starts_by`` on would share nodes with
        another holder that is not gone by then: two holders each kept off the other's nodes would
        wait for each other for ever, so such a reservation is not taken."""
        return any(holder != job_id and nodes & held.nodes
                   and (starts_by is None or held.ends_by is None or held.ends_by > starts_by)
                   for holder, held in self._reserved.items())

    def lenders_to(self, job_id: str, ends_by: float | None, predicted_end: float | None) -> list[str]:
        """The holders whose nodes ``job_id`` is kept off by its limit (``ends_by``) but may use as their
        tenant, its run predicted to end at ``predicted_end`` before they could start; empty unless the
        policy takes ``predicted_tenants``."""
        if not self.policy.predicted_tenants or predicted_end is None:
            return []
        return [holder for holder, held in self._reserved.items()
                if holder != job_id and held.nodes and not _gone_in_time(held, ends_by)
                and _gone_in_time(held, predicted_end)]

    def lodge(self, job_id: str, holders: Iterable[str], predicted_end: float) -> None:
        """``job_id`` was admitted onto the nodes of ``holders`` as their tenant, predicted to end at
        ``predicted_end``."""
        for holder in holders:
            if holder in self._reserved:
                self._tenants.setdefault(holder, {})[job_id] = predicted_end

    def tenants(self, holder: str) -> Mapping[str, float]:
        """The tenants of ``holder`` and when each is predicted to end (some may have ended since)."""
        return self._tenants.get(holder, {})

    def overdue_tenants(self, holder: str, now: float) -> list[str]:
        """The tenants of ``holder`` past their predicted end at ``now`` (some may have ended since: the
        caller checks), in the order they were lodged."""
        return [uid for uid, end in self._tenants.get(holder, {}).items() if end <= now]

    def unlodge(self, job_id: str) -> None:
        """``job_id`` ended, was evicted or admitted afresh: it is nobody's tenant (until it lodges again)."""
        for tenants in self._tenants.values():
            tenants.pop(job_id, None)

    def forget(self, job_id: str) -> None:
        """``job_id`` started, ended or left the queue: drop its wait, its reservation, its tenants and
        its own tenancy."""
        self._blocked_since.pop(job_id, None)
        self._reserved.pop(job_id, None)
        self._tenants.pop(job_id, None)
        self.unlodge(job_id)

    def order(self, heads: Sequence[PendingJob]) -> list[PendingJob]:
        """``heads`` (in admission order: priority first) with reservation holders first among the heads
        of their priority, the rest in their order (a stable sort). The admission cycle orders its heads
        with it (``AdmissionCycle``, step 2)."""
        return sorted(heads, key=lambda h: (-h.priority, h.job_id not in self._reserved))


def _gone_in_time(held: BackfillReservation, ends_by: float | None) -> bool:
    """Whether a gang that ends by ``ends_by`` leaves ``held``'s nodes before its holder could start."""
    return ends_by is not None and held.starts_by is not None and ends_by <= held.starts_by
