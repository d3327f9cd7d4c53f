"""``QuotaBook``: the operator's QuotaPort over the core quota tree (``kubegang.quota``).

Translates GPUQueue objects into ``QueueSpec`` values and jobs into per-flavour usage, and keeps the
tree as derived state: it is rebuilt from the API (queues, then the jobs that hold an admission)
whenever queues change or this replica becomes leader.

Flavours are assigned as Kueue does: a job that names a ``gpuProduct`` uses that flavour; one that
names none may use any flavour its own queue path (leaf, then ancestors) lists, tried in the order the
leaf lists them, except MIG profiles (``nvidia.com/mig-*``): their quota counts slices of that profile,
and every job this version admits asks for whole GPUs or a share of one. When a flavour is a GPU
product seen on the nodes (label ``nvidia.com/gpu.product``), the gang is also placed on GPUs of that
product, so quota and placement count the same GPUs. Unrelated queues of other trees never change a
job's choice.

A queue the tree cannot take (its parent does not exist, its parents form a cycle) is left out with
everything under it, and the rest of the tree is built and admits as usual: one queue's mistake never
freezes every other team's admissions. Each queue left out is reported (``left_out``) as its
GPUQueue's ``Active`` condition, and its jobs wait as ``QueueInactive``.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import pydantic

from kubegang.admission import Preemptible, quota_verdict
from kubegang.api import GPUQueue, QueueConditionReason
from kubegang.operator._cache import UnreadHolding
from kubegang.operator._job import JobView
from kubegang.operator._ports import LeftOut, QueueUsage
from kubegang.operator._types import Verdict, WaitReason
from kubegang.placement import MILLI
from kubegang.quota import (
    BorrowWithinParent,
    CandidateReason,
    FlavorQuota,
    PendingJob,
    PreemptionPolicy,
    ProblemKind,
    QueuePosition,
    QueueSpec,
    QuotaSpecError,
    QuotaTree,
    Rank,
    ReclaimFromBorrowers,
    RunClass,
    RunningJob,
    RunTimeHistory,
    WithinQueue,
    candidates_for,
    fits_after_eviction,
    is_mig_flavor,
    leaf_heads,
    queue_positions,
    quota_victims,
    some_named,
)

log = logging.getLogger("kubegang.operator.quota")

DEFAULT_FLAVOR = "nvidia.com/gpu"

PriorityOf = Callable[[JobView], int]
NodeProducts = Callable[[], Mapping[str, str]]
"""Node name → GPU product (label ``nvidia.com/gpu.product``) of the GPU nodes seen."""


def _no_nodes() -> Mapping[str, str]:
    return {}


def _milli(gpus: int | None) -> int | None:
    return None if gpus is None else gpus * MILLI


def queue_spec(body: Mapping[str, Any]) -> QueueSpec:
    """The core QueueSpec of a GPUQueue object, in thousandths of a GPU (so a shared-GPU job is charged
    its share, as placement counts it); pydantic.ValidationError when malformed."""
    model = GPUQueue.model_validate({k: v for k, v in body.items() if k != "status"})
    spec = model.spec
    return QueueSpec(
        name=str(model.metadata.name),
        parent=spec.parent,
        weight=spec.weight,
        quotas={
            r.flavor: FlavorQuota(
                nominal=r.nominal * MILLI,
                borrowing_limit=_milli(r.borrowing_limit),
                lending_limit=_milli(r.lending_limit),
            )
            for r in spec.resources
        },
        preemption=PreemptionPolicy(
            within_queue=WithinQueue(spec.preemption.within_queue),
            reclaim_from_borrowers=ReclaimFromBorrowers(spec.preemption.reclaim_from_borrowers),
            borrow_within_parent=BorrowWithinParent(spec.preemption.borrow_within_parent),
        ),
    )


_REASON_OF = {
    ProblemKind.UNKNOWN_PARENT: QueueConditionReason.PARENT_NOT_FOUND,
    ProblemKind.CYCLE: QueueConditionReason.PARENT_CYCLE,
    ProblemKind.INVALID: QueueConditionReason.INVALID_SPEC,
}


def build_tree(specs: Sequence[QueueSpec], unreadable: Mapping[str, LeftOut] | None = None,
               ) -> tuple[QuotaTree, dict[str, LeftOut]]:
    """The tree of every spec it can take, and why each other one is left out.

    A queue with a problem is left out, and so is every queue under it (its subtree's quota cannot be
    counted without it); the rest is built again, until it validates (each round leaves at least one
    queue out, so it ends). ``unreadable``: GPUQueues that gave no spec at all, left out from the start
    (their children are then inactive below them, not children of a queue that does not exist).
    """
    left_out: dict[str, LeftOut] = dict(unreadable or {})
    while True:
        grew = True
        while grew:
            grew = False
            for spec in specs:
                if spec.name not in left_out and spec.parent in left_out:
                    left_out[spec.name] = LeftOut(QueueConditionReason.PARENT_INACTIVE,
                                                  f"queue {spec.name}: parent {spec.parent} is left out of the quota "
                                                  f"tree ({left_out[spec.parent].message})")
                    grew = True
        kept = [s for s in specs if s.name not in left_out]
        try:
            return QuotaTree(kept, unit=MILLI), left_out
        except QuotaSpecError as exc:
            for problem in exc.problems:
                for name in problem.members or (problem.queue,):
                    left_out.setdefault(name, LeftOut(_REASON_OF[problem.kind], str(problem)))


class QuotaBook:
    """QuotaPort backed by :class:`kubegang.quota.QuotaTree`."""

    def __init__(self, priority_of: PriorityOf, node_products: NodeProducts = _no_nodes, *,
                 job_of: Callable[[str], JobView | None] | None = None) -> None:
        self.priority_of = priority_of
        self.node_products = node_products
        self.job_of = job_of
        """The job as the cache has it now (its ``startedAt`` comes after the admission this book
        recorded); None: the recorded view."""
        self._assigned: dict[str, str] = {}
        """Job UID → flavour of its current admission (kept across tree rebuilds of this leader)."""
        self.tree = QuotaTree([], unit=MILLI)
        self._path_flavors: tuple[QuotaTree, dict[str, tuple[str, ...]]] = (self.tree, {})
        """The tree they were computed for, and each queue's ``path_flavors`` (fixed per tree)."""
        self._namespaces: dict[str, frozenset[str]] = {}
        self._queue_priority: dict[str, int] = {}
        self._reserve_after: dict[str, float] = {}
        self._held: dict[str, JobView] = {}
        self._rows: dict[str, RunningJob] | None = None
        """The held gangs as ``candidates_for`` reads them, built once per cycle (``begin_cycle``) and kept
        current as gangs are kept and released: every blocked head of a cycle asks for its preemption
        candidates, and building a row for every held gang each time made a cycle O(heads x held) (5.6 ms a
        head at 1,000 held gangs; 3.5 s of CPU for a cycle of 1,000 blocked heads)."""
        self._stale_rows: set[str] = set()
        """UIDs kept or released since their row was built."""
        self._holders: dict[str, tuple[str, dict[str, int]]] = {}
        """UID -> (queue, usage) of the jobs counted from their status alone (``record_holder``)."""
        self._order: dict[str, int] = {}
        """Job UID -> when this book first recorded it (a counter): which of two gangs that started
        in the same second (``startedAt`` has whole seconds) was admitted later."""
        self._recorded = 0
        self._left_out: dict[str, LeftOut] = {}
        self.history = RunTimeHistory()
        """Run times of the gangs this leader saw succeed (a new leader starts without: no predictions)."""

    # -- tree ------------------------------------------------------------------------------------
    @property
    def left_out(self) -> Mapping[str, LeftOut]:
        """GPUQueues not in the tree, and why (written as their ``Active`` condition)."""
        return self._left_out

    def set_queues(self, queues: Sequence[Mapping[str, Any]]) -> list[str]:
        specs: list[QueueSpec] = []
        problems: list[str] = []
        namespaces: dict[str, frozenset[str]] = {}
        priorities: dict[str, int] = {}
        reserve_after: dict[str, float] = {}
        unreadable: dict[str, LeftOut] = {}
        for body in queues:
            name = (body.get("metadata") or {}).get("name", "?")
            try:
                spec = queue_spec(body)
                model = GPUQueue.model_validate({k: v for k, v in body.items() if k != "status"})
            except pydantic.ValidationError as exc:
                # Reported on the queue itself (its Active condition), not only in the log: its jobs
                # would otherwise read "queue does not exist" while its status said it was fine.
                error = exc.errors()[0]
                where = ".".join(str(part) for part in error["loc"])
                unreadable[str(name)] = LeftOut(QueueConditionReason.INVALID_SPEC,
                                                f"queue {name}: {where}: {error['msg']}")
                continue
            specs.append(spec)
            namespaces[str(name)] = frozenset(model.spec.namespaces)
            if model.spec.priority is not None:
                priorities[str(name)] = model.spec.priority
            if model.spec.backfill.reserve_after_seconds is not None:
                reserve_after[str(name)] = float(model.spec.backfill.reserve_after_seconds)
        tree, left_out = build_tree(specs, unreadable)
        problems += [why.message for why in left_out.values()]
        self.tree = tree
        self._left_out = left_out
        self._namespaces = namespaces
        self._queue_priority = priorities
        self._reserve_after = reserve_after
        self._held = {}
        self._holders = {}
        self._order = {}
        self._rows = None
        return problems

    def path_flavors(self, queue: str) -> list[str]:
        """Flavours a job of ``queue`` may use: those listed on its path, the leaf's order first.

        A path that lists none (a tree whose quota sits in other subtrees) falls back to the flavours
        of its root's whole tree, then to ``nvidia.com/gpu``. MIG profile flavours are never among
        them: a whole-GPU or shared-GPU job charged to a MIG profile's quota would let the queue run
        that many GPUs on top of its GPUs' quota (docs/quota.md: such a flavour's quota is never used).
        """
        tree, known = self._path_flavors
        if tree is not self.tree:
            tree, known = self._path_flavors = (self.tree, {})
        out = known.get(queue)
        if out is None:
            out = known[queue] = tuple(self._path_flavors_of(queue))
        return list(out)

    def _path_flavors_of(self, queue: str) -> list[str]:
        tree = self.tree
        if queue not in tree.queues:
            return [DEFAULT_FLAVOR]
        path = tree.path(queue)
        out = _listed(tree.spec(q).quotas for q in path)
        if not out:
            root = path[-1]
            out = _listed(tree.spec(q).quotas for q in tree.queues if tree.path(q)[-1] == root)
        return out or [DEFAULT_FLAVOR]

    def flavor_options(self, job: JobView) -> list[JobView]:
        """The job once per flavour it may use, in the order to try them (Kueue's flavour assignment).

        Each view has ``flavor`` set; when the flavour is a GPU product the nodes carry, its
        ``gpu_product`` is set too, so the extender places the gang on GPUs of that flavour.
        """
        if job.gpu_product:
            return [dataclasses.replace(job, flavor=job.gpu_product)]
        products = set(self.node_products().values())
        return [
            dataclasses.replace(job, flavor=f, flavor_product=f if f in products else None)
            for f in self.path_flavors(job.queue)
        ]

    def flavor_of(self, job: JobView) -> str:
        """The quota flavour the job's GPUs count against.

        The assigned flavour when the job carries or holds one; for an admission read back from the
        API (a new leader), the product of the nodes it was placed on when that is one of its path's
        flavours, else the first flavour of its path.
        """
        if job.flavor:
            return job.flavor
        if job.gpu_product:
            return job.gpu_product
        assigned = self._assigned.get(job.uid)
        if assigned:
            return assigned
        placement = job.placement
        return self.placed_flavor(job.queue, placement.nodes if placement is not None else frozenset())

    def placed_flavor(self, queue: str, nodes: Iterable[str]) -> str:
        """The flavour of an admission of ``queue`` read back from the API, placed on ``nodes``: their
        GPU product when that is one of the queue path's flavours, else the path's first flavour."""
        flavors = self.path_flavors(queue)
        products = self.node_products()
        placed = {products[node] for node in nodes if node in products}
        return next((f for f in flavors if f in placed), flavors[0])

    def usage_of(self, job: JobView) -> dict[str, int]:
        """Thousandths of a GPU per flavour of the whole gang (a shared-GPU job is charged its share)."""
        milli = job.replicas * job.gpu_milli_per_replica
        return {self.flavor_of(job): milli} if milli else {}

    def priority(self, job: JobView) -> int:
        """Explicit spec.priority, else the PriorityClass value, else the queue's default."""
        if job.spec.priority is not None:
            return job.spec.priority
        if job.spec.priority_class_name:
            return self.priority_of(job)
        return self._queue_priority.get(job.queue, 0)

    # -- QuotaPort -------------------------------------------------------------------------------
    def order(self, pending: Sequence[JobView]) -> list[JobView]:
        leaves = self.tree.leaves
        waiting = [job for job in pending if job.queue in leaves]
        stray = [job for job in pending if job.queue not in leaves]  # can_admit explains: no such leaf queue
        return leaf_heads(self.tree, waiting, self._rank, self.pending_job) + stray

    def rank(self, job: JobView) -> Rank | None:
        return self._rank(job) if job.queue in self.tree.leaves else None

    def _rank(self, job: JobView) -> Rank:
        return job.queue, self.priority(job), job.created.timestamp()

    def _namespace_refusal(self, job: JobView) -> Verdict | None:
        """No for a job whose queue cannot take it whatever the usage: unknown, not a leaf, or not
        serving the job's namespace (each its own condition reason)."""
        why = self._left_out.get(job.queue)
        if why is not None:
            return Verdict(False, f"queue {job.queue} is left out of the quota tree: {why.message}", never=True,
                           cause=WaitReason.QUEUE_INACTIVE)
        if job.queue not in self.tree.queues:
            return Verdict(False, f"queue {job.queue} does not exist (leaf queues: {some_named(self.tree.leaves)})",
                           never=True,
                           cause=WaitReason.QUEUE_NOT_FOUND)
        if job.queue not in self.tree.leaves:
            return Verdict(False, quota_verdict(self.tree.can_admit(job.queue, {})).reason, never=True,
                           cause=WaitReason.NOT_A_LEAF_QUEUE)
        allowed = self._namespaces.get(job.queue)
        if allowed and job.namespace not in allowed:
            return Verdict(
                False,
                f"queue {job.queue} does not serve namespace {job.namespace} (it serves: {some_named(allowed)})",
                never=True,
                cause=WaitReason.NAMESPACE_NOT_SERVED,
            )
        return None

    def can_admit(self, job: JobView) -> Verdict:
        refusal = self._namespace_refusal(job)
        if refusal is not None:
            return refusal
        return quota_verdict(self.tree.can_admit(job.queue, self.usage_of(job)))

    def admit(self, job: JobView) -> Verdict:
        if job.uid in self.tree:
            return Verdict(True)
        refusal = self._namespace_refusal(job)
        if refusal is not None:
            return refusal
        held = dataclasses.replace(job, flavor=self.flavor_of(job))
        verdict = quota_verdict(self.tree.admit(job.uid, job.queue, self.usage_of(held)))
        if verdict.ok:
            self._keep(held)
        return verdict

    def claim(self, job: JobView) -> Verdict:
        if job.uid in self.tree:
            return Verdict(True)
        held = dataclasses.replace(job, flavor=self.flavor_of(job))
        return quota_verdict(self.tree.admit(job.uid, job.queue, self.usage_of(held)))

    def record(self, job: JobView) -> bool:
        if job.uid in self.tree:
            return False
        held = dataclasses.replace(job, flavor=self.flavor_of(job))
        if not self._record_in_tree(job.uid, job.key, job.queue, self.usage_of(held)):
            return False
        self._keep(held)
        return True

    def _record_in_tree(self, uid: str, key: str, queue: str, usage: dict[str, int]) -> bool:
        """Count a holding admission in the tree without checking limits; False (logged) when it cannot be."""
        try:
            self.tree.record(uid, queue, usage)
        except KeyError:
            # Its queue was deleted or left out of the tree: the gang keeps running, its quota is not
            # counted until the queue is back (docs/api.md); every other queue admits as usual.
            log.warning("job %s holds GPUs in queue %s, which is not in the quota tree: not counted", key, queue)
            return False
        except ValueError as exc:
            log.error("cannot account job %s in queue %s: %s", key, queue, exc)
            return False
        return True

    def record_holder(self, holder: UnreadHolding) -> bool:
        """Account a job that holds an admission but whose spec was never readable, as its status says
        (queue, ``totalGPUs``, the flavour of its placement's nodes), without checking limits; True when
        it was not counted so before (a change of what its status says replaces the old count).

        Only the tree holds it: it is not in ``running`` nor a preemption candidate, since the cycle
        cannot evict (nor place again, nor supervise) a gang whose spec it cannot read. Once readable, it
        is released (``release_holder``) and recorded as the job it is."""
        usage = {self.placed_flavor(holder.queue, holder.nodes): holder.milli} if holder.milli else {}
        counted = self._holders.get(holder.uid)
        if counted == (holder.queue, usage):
            return False
        if holder.uid in self.tree:
            if counted is None:
                return False  # counted as a readable job already: never twice
            self.release(holder.uid)
        if not self._record_in_tree(holder.uid, holder.key, holder.queue, usage):
            return False
        self._holders[holder.uid] = (holder.queue, usage)
        return True

    def release_holder(self, job_uid: str) -> bool:
        """Release the quota of ``job_uid`` if it is counted from its status alone (``record_holder``);
        True when it was."""
        if job_uid not in self._holders:
            return False
        self.release(job_uid)
        return True

    def _keep(self, held: JobView) -> None:
        assert held.flavor is not None
        if held.uid not in self._held:
            self._recorded += 1
            self._order[held.uid] = self._recorded
        self._held[held.uid] = held
        self._assigned[held.uid] = held.flavor
        self._stale_rows.add(held.uid)

    def release(self, job_uid: str) -> None:
        self.tree.release(job_uid)
        self._held.pop(job_uid, None)
        self._holders.pop(job_uid, None)
        self._order.pop(job_uid, None)
        self._assigned.pop(job_uid, None)
        self._stale_rows.add(job_uid)

    def positions(self, pending: Sequence[JobView]) -> dict[str, QueuePosition]:
        """Where each waiting job stands (``kubegang.quota.queue_positions``: the cycle's own order)."""
        return queue_positions(self.tree, [self.pending_job(job) for job in pending])

    def pending_job(self, job: JobView) -> PendingJob:
        """``job`` as the quota tree sees it: queue, request, priority and creation time."""
        return PendingJob(job.uid, job.queue, self.usage_of(job), self.priority(job), job.created.timestamp())

    def can_admit_without(self, job: JobView, evicted: Sequence[str]) -> Verdict:
        return quota_verdict(fits_after_eviction(self.tree, self.pending_job(job), evicted))

    def quota_victims(self, job: JobView, candidates: Sequence[str]) -> list[str] | None:
        return quota_victims(self.tree, self.pending_job(job), candidates)

    def reserve_after(self, job: JobView) -> float | None:
        return self._reserve_after.get(job.queue)

    def running(self) -> list[JobView]:
        return sorted(self._held.values(), key=self._started)

    def _started(self, held: JobView) -> float:
        """When the gang started (``startedAt``, else ``admittedAt``), wall-clock seconds; infinity (the
        most recent of all, ties then go by UID as before) for a gang admitted so recently that neither
        is known yet. Read from the job as it is now: the view this book recorded was taken at
        admission, before either time was set, and every gang this leader admitted would look equally
        old (the victim among them chosen by UID instead of by the work it would lose)."""
        current = (self.job_of(held.uid) if self.job_of is not None else None) or held
        # Status times have whole seconds: within one, the gang this book recorded later is the
        # more recent (a fraction of a second at most, so it never reorders different seconds).
        within = (self._order.get(held.uid, 0) % 1_000_000) * 1e-7
        if current.started_at is not None:
            return current.started_at.timestamp() + within
        admitted = current.status_time("admittedAt")
        if admitted is not None:
            return admitted.timestamp() + within
        return math.inf

    def finished_run(self, job: JobView, seconds: float) -> None:
        """``job`` succeeded ``seconds`` after it started: a run time for the predictions."""
        self.history.observe(_run_class(job), seconds)

    def predicted_run_seconds(self, job: JobView) -> float | None:
        return self.history.predict(_run_class(job))

    def ends_at(self, job: JobView) -> float | None:
        """``startedAt`` (now, if not yet Running) plus ``timeLimitSeconds``, on the cycle's monotonic
        clock."""
        limit = job.time_limit
        if limit is None:
            return None
        current = (self.job_of(job.uid) if self.job_of is not None else None) or job
        started = current.started_at
        wall = time.time()
        left = limit if started is None else started.timestamp() + limit - wall
        return time.monotonic() + left

    def preemption_candidates(self, job: JobView) -> list[Preemptible[JobView]]:
        if job.queue not in self.tree.leaves:
            return []
        return [
            Preemptible(self._held[c.job.job_id], _why(c.reason, job, self._held[c.job.job_id]))
            for c in candidates_for(self.pending_job(job), self.tree, self._running_rows())
        ]

    def begin_cycle(self) -> None:
        """A cycle starts: the held gangs' rows are built afresh at its first blocked head, with their
        start and priority as the cache has them now. Within a cycle they change only as gangs are kept
        or released (a snapshot per cycle, as Kueue's): a gang's ``startedAt`` arriving meanwhile moves
        it among the victims from the next cycle on."""
        self._rows = None

    def _running_rows(self) -> Iterable[RunningJob]:
        """The held gangs as ``candidates_for`` reads them (``_rows``)."""
        if self._rows is None:
            self._rows = {uid: self._row(held) for uid, held in self._held.items()}
            self._stale_rows.clear()
        elif self._stale_rows:
            for uid in self._stale_rows:
                held = self._held.get(uid)
                if held is None:
                    self._rows.pop(uid, None)
                else:
                    self._rows[uid] = self._row(held)
            self._stale_rows.clear()
        return self._rows.values()

    def _row(self, held: JobView) -> RunningJob:
        """One held gang as ``candidates_for`` reads it: what the tree charges it (what evicting it gives
        back, rather than its pods' requests counted again), its priority and when it started."""
        usage = self.tree.job_usage(held.uid) if held.uid in self.tree else self.usage_of(held)
        return RunningJob(held.uid, held.queue, usage, self.priority(held), self._started(held))

    def usage(self) -> Mapping[str, QueueUsage]:
        out: dict[str, QueueUsage] = {}
        for name in self.tree.queues:
            status = self.tree.status(name)
            out[name] = QueueUsage(
                usage={f: v / MILLI for f, v in status.usage.items()},
                borrowed={f: v / MILLI for f, v in status.borrowed.items()},
                fair_share=status.fair_share,
            )
        return out


def _listed(quotas: Iterable[Mapping[str, object]]) -> list[str]:
    """The flavours the listings name, first listing first, without repeats or MIG profiles."""
    out: list[str] = []
    for listing in quotas:
        out.extend(f for f in listing if f not in out and not is_mig_flavor(f))
    return out


def _why(reason: CandidateReason, preemptor: JobView, victim: JobView) -> str:
    """The end of "preempted by <preemptor> ..." in the victim's condition."""
    if reason is CandidateReason.WITHIN_QUEUE:
        return f"(higher priority in queue {victim.queue})"
    if reason is CandidateReason.RECLAIM_FROM_BORROWERS:
        return f"to reclaim nominal quota of queue {preemptor.queue} (queue {victim.queue} was borrowing it)"
    return f"(higher priority; queue {victim.queue} was running on borrowed quota)"


def _run_class(job: JobView) -> RunClass:
    """What makes two GPUJobs the same kind of run (``kubegang.quota.RunClass``)."""
    return RunClass(job.queue, job.total_gpus, job.time_limit)
