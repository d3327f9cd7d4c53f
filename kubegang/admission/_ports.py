"""The admission cycle's quota port, and the placement ports its drivers answer effects with.

Quota is in-memory and synchronous everywhere (the operator's ``QuotaBook`` and the simulator's
adapter both sit on ``kubegang.quota``), so the cycle calls it directly. Placement may be remote (the
extender, over gRPC) or local (the simulator's snapshot): the cycle never calls it, it *yields* the
questions (:mod:`._types` effects) and its driver answers them, waiting or not. That keeps the cycle
one piece of synchronous, I/O-free code for both.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from kubegang.admission._types import J, Preemptible, Verdict
from kubegang.quota import PendingJob, Rank


class QuotaPort(Protocol[J]):
    """Hierarchical quota: who may run, and in which order."""

    def order(self, pending: Sequence[J]) -> list[J]:
        """The heads of the leaf queues among ``pending``, in fair-share order."""
        ...

    def rank(self, job: J) -> Rank | None:
        """``job``'s (leaf queue, priority, creation time), the key ``order`` ranks a queue's jobs by; None
        for a job in no leaf queue (``order`` gives every such job as a head). The cycle sorts each
        queue's jobs by it once, so that its rounds pass ``order`` only the queues' heads."""
        ...

    def pending_job(self, job: J) -> PendingJob:
        """``job`` as the quota tree orders it (queue, request, priority, creation time): the cycle reads
        its priority to put reservation holders first among the heads of their priority."""
        ...

    def flavor_options(self, job: J) -> list[J]:
        """``job`` once per quota flavour it may use, in the order to try them (never empty)."""
        ...

    def can_admit(self, job: J) -> Verdict:
        """Whether ``job`` fits in quota up the tree now (``never`` when it cannot ever)."""
        ...

    def admit(self, job: J) -> Verdict:
        """Take ``job``'s quota up the tree atomically, or refuse with a reason."""
        ...

    def release(self, job_uid: str) -> None:
        """Give back the quota of ``job_uid`` (no-op when it holds none)."""
        ...

    def claim(self, job: J) -> Verdict:
        """Count ``job``'s quota as taken without admitting it: a preemptor that waits for its victims to
        go holds what their eviction freed, so no other job is admitted into it meanwhile. Not a running
        job (no preemption candidate, no end); ``release`` gives it back."""
        ...

    def preemption_candidates(self, job: J) -> list[Preemptible[J]]:
        """Admitted gangs the queues' preemption policies allow ``job`` to evict, least disruptive first."""
        ...

    def quota_victims(self, job: J, candidates: Sequence[str]) -> list[str] | None:
        """The fewest of ``candidates`` (UIDs, in order) whose eviction lets quota admit ``job``
        (``kubegang.quota.quota_victims``): [] when quota is not the problem, None when not enough."""
        ...

    def can_admit_without(self, job: J, evicted: Sequence[str]) -> Verdict:
        """Whether ``job`` would fit in quota if the gangs with UIDs ``evicted`` gave theirs back."""
        ...

    def reserve_after(self, job: J) -> float | None:
        """Seconds ``job`` may be blocked before it reserves its nodes, when its queue sets its own
        (None: the cycle's ``BackfillPolicy``)."""
        ...

    def running(self) -> list[J]:
        """Gangs holding an admission, the longest-running first (what a backfill reservation waits for)."""
        ...

    def ends_at(self, job: J) -> float | None:
        """When the running gang ``job`` ends at the latest, in the cycle's clock: its start (now, if it
        has not started) plus its time limit; None when it has none."""
        ...

    def predicted_run_seconds(self, job: J) -> float | None:
        """How long ``job`` is predicted to run once started, from finished gangs like it
        (``kubegang.quota.RunTimeHistory``); None: no prediction (backfill keeps to its time limit)."""
        ...
