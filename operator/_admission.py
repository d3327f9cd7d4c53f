"""The admission cycle: one decision at a time, owned by the leader (Kueue's scheduler, in small).

Each cycle takes a fresh look at the cache and walks the heads of the leaf queues. For each head:

1. **Order**: the heads of the leaf queues among waiting jobs, in fair-share order (the quota port).
2. **Quota**: does the job fit up the GPUQueue tree? Never → Unschedulable with the reason; not now →
   try preemption, else Queued with the reason.
3. **Place**: ``Plan`` the whole gang on the extender (failing nodes excluded, previous domain
   preferred); no room → try preemption, else Queued. Then take the quota and ``Reserve`` the placement.
4. **Record**: assume the admission in the cache (the next decision counts it) and hand the gang to a
   bounded set of background tasks, which first confirm it in GPUJob status (phase Admitted,
   ``status.placement``; a new leader reads admissions from there) ...
5. **Create**: ... then create the Service / hostfile ConfigMap the framework needs and every pod at
   once, while the cycle goes on to the next decision.

Decisions stay sequential: the extender holds the reservation before the next ``Plan``, so capacity
is never counted twice, while the slow part (one API write per pod) overlaps with later decisions.
The number of gangs in creation is bounded (back-pressure well inside the reservation TTL). Reports
that decide nothing (Queued reasons, Events) go to the background lane (``_status_writer``).

A failure at any step undoes the earlier ones in reverse (delete what was created, reset the status,
release the reservation, give the quota back), so a job is either fully admitted or still waiting.
Preemption evicts whole gangs, only those the quota policy offers *and* the extender's ``WhatIf`` says
are needed, and only when their eviction makes the waiting gang fit.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as dt
import enum
import logging
import time
from collections.abc import Callable, Coroutine, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from kubegang.api import Placement
from kubegang.operator import _metrics as metrics
from kubegang.operator._cache import ClusterCache
from kubegang.operator._conditions import (
    CondType,
    Phase,
    get_condition,
    now_rfc3339,
    set_condition,
    transition,
)
from kubegang.operator._gang_objects import DEFAULT_MASTER_PORT, build_gang
from kubegang.operator._job import JobView
from kubegang.operator._ports import KubePort, PlacementPort, QuotaPort
from kubegang.operator._status_writer import StatusWriter
from kubegang.operator._types import WaitReason

log = logging.getLogger("kubegang.operator.admission")

_NOT_ADMITTED: dict[str, Any] = {"admittedAt": None, "podsCreatedAt": None, "readyReplicas": 0}
"""Status fields cleared when a job gives its admission back. ``placement`` stays: its domain is
preferred when the gang is placed again, and a new admission overwrites it."""

Clock = Callable[[], dt.datetime]

MESSAGE_REFRESH_SECONDS = 30.0
"""A waiting job's message (numbers of free GPUs, quota left) is rewritten at most this often while
its phase and reason stay the same: fresh enough for a human, not a write per cycle per job."""


def utcnow() -> dt.datetime:
    """The current time, timezone-aware (the default clock)."""
    return dt.datetime.now(dt.UTC)


class AdmitResult(enum.StrEnum):
    """What one admission attempt ended in."""

    ADMITTED = "Admitted"
    QUEUED = "Queued"
    UNSCHEDULABLE = "Unschedulable"
    PREEMPTING = "Preempting"
    ERROR = "Error"


@dataclasses.dataclass(frozen=True)
class Outcome:
    """What one admission attempt ended in (logged, returned for tests)."""

    job: str
    """namespace/name."""
    result: AdmitResult
    """Admitted, Queued, Unschedulable, Preempting or Error."""
    message: str = ""
    """The reason, as written in the job's condition."""
    reason: WaitReason | None = None
    """The condition reason when not admitted."""


CLUSTER_BOUND = WaitReason.NO_NODE_LARGE_ENOUGH
"""An Unschedulable that the cluster (new nodes), not the queue tree, can change: tried every cycle."""

BACKOFF_FIRST_SECONDS = 1.0
"""First retry delay of a job whose admission raised; doubled per failure up to ``BACKOFF_MAX_SECONDS``."""
BACKOFF_MAX_SECONDS = 300.0
"""Longest retry delay of a failing job (a spec change retries it at once)."""


@contextmanager
def _timed(step: str) -> Iterator[None]:
    start = time.perf_counter()
    try:
        yield
    finally:
        metrics.ADMISSION_STEP_SECONDS.labels(step).observe(time.perf_counter() - start)


class Admission:
    """The leader's admission cycle and the eviction of gangs it preempts."""

    def __init__(
        self,
        cache: ClusterCache,
        quota: QuotaPort,
        placement: PlacementPort,
        kube: KubePort,
        *,
        master_port: int = DEFAULT_MASTER_PORT,
        shared_gpu_resource: str | None = None,
        clock: Clock = utcnow,
        max_rounds: int = 8,
        creation_concurrency: int = 32,
        writer: StatusWriter | None = None,
    ) -> None:
        self.cache = cache
        self.quota = quota
        self.placement = placement
        self.kube = kube
        self.master_port = master_port
        self.shared_gpu_resource = shared_gpu_resource
        self.clock = clock
        self._preempting: dict[str, frozenset[str]] = {}
        """Preemptor UID → UIDs of the victims it is waiting for."""
        self._never: dict[str, int] = {}
        """UID → generation of jobs found Unschedulable under the current queue tree."""
        self.max_rounds = max_rounds
        self.writer = writer or StatusWriter(kube, on_lost=cache.forget)
        self._creating: dict[str, asyncio.Task[None]] = {}
        """UID → the background task creating that gang's objects."""
        self._creation_slots = asyncio.Semaphore(creation_concurrency)
        self._background: set[asyncio.Task[Any]] = set()
        self._waiting_written: dict[str, tuple[str, str, float]] = {}
        """UID → (phase, reason, monotonic time) of the last waiting status written."""
        self._retry_at: dict[str, tuple[int, float, int]] = {}
        """UID → (generation, monotonic time of the next try, failures so far) of jobs whose handling
        raised: they wait out a backoff while the cycle serves everyone else."""

    # -- housekeeping before a cycle -------------------------------------------------------------
    def sync_queues(self) -> list[str]:
        """Rebuild the quota tree from the cached queues and re-take the quota of holding jobs.

        Run after a queue change and when this replica becomes leader: the tree is derived state,
        the API (queues + admitted jobs' status) is the truth.
        """
        problems = self.quota.set_queues(list(self.cache.queues.values()))
        for problem in problems:
            log.error("GPUQueue tree problem: %s", problem)
        for job in self.cache.holding():
            # An admission is a fact even if a lowered quota would refuse it today: record, not admit.
            self.quota.record(job)
        self.cache.queues_changed = False
        self._never.clear()
        return problems

    async def release_deleted(self) -> None:
        """Give back the reservation and quota of jobs deleted since the last cycle."""
        while self.cache.deleted:
            uid = self.cache.deleted.pop()
            self.writer.discard(uid)
            self._waiting_written.pop(uid, None)
            self.quota.release(uid)
            await self.placement.release(uid)

    # -- background work ---------------------------------------------------------------------------
    def creating(self, uid: str) -> bool:
        """Whether the gang of ``uid`` is being created right now (the supervisor leaves it alone)."""
        return uid in self._creating

    def _spawn(self, work: Coroutine[Any, Any, Any]) -> None:
        task = asyncio.create_task(work)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    def notify(self, job: JobView, reason: str, message: str, *, warning: bool = False) -> None:
        """Record an Event without waiting for it (Events are for humans; decisions do not wait)."""
        self._spawn(self.kube.event(job, reason, message, warning=warning))

    async def settle(self) -> None:
        """Wait for every gang in creation, Event and queued status write (tests, shutdown)."""
        while self._creating or self._background:
            await asyncio.gather(*self._creating.values(), *self._background, return_exceptions=True)
        await self.writer.settle()

    # -- the cycle -------------------------------------------------------------------------------
    async def run_cycle(self) -> list[Outcome]:
        """One pass over the queue heads; returns what happened to each.

        BestEffortFIFO, as in Kueue: a head that cannot be admitted now steps aside for the next job
        of its queue, for at most ``max_rounds`` rounds per cycle; a head that is preempting holds its
        queue, so nobody behind it takes the GPUs it is freeing.
        """
        if self.cache.queues_changed:
            self.sync_queues()
        await self.release_deleted()
        pending = self.cache.pending()
        self._export_queue_gauges(pending)
        # Jobs already found Unschedulable are not retried until the tree or the job changes; jobs
        # whose handling failed wait out their backoff.
        now = time.monotonic()
        candidates = [
            job for job in pending if self._never.get(job.uid) != job.generation and not self._backing_off(job, now)
        ]
        outcomes: list[Outcome] = []
        tried: set[str] = set()
        held_queues: set[str] = set()
        for _ in range(self.max_rounds):
            # (1) Order: heads of the leaf queues, fair share first.
            with _timed("order"):
                ordered, failed = self._order(candidates)
            outcomes.extend(failed)
            failed_keys = {o.job for o in failed}
            tried.update(job.uid for job in candidates if job.key in failed_keys)
            heads = [job for job in ordered if job.uid not in tried and job.queue not in held_queues]
            if not heads:
                break
            for job in heads:
                outcome = await self._attempt(job)
                outcomes.append(outcome)
                tried.add(job.uid)
                if outcome.reason is WaitReason.PREEMPTING:
                    held_queues.add(job.queue)  # nobody behind it takes the GPUs it is freeing
                if outcome.result is AdmitResult.UNSCHEDULABLE and outcome.reason is not CLUSTER_BOUND:
                    self._never[job.uid] = job.generation
            candidates = [job for job in candidates if job.uid not in tried]
        for job in candidates:
            if job.phase is Phase.PENDING:
                self._mark_waiting(
                    job, Phase.QUEUED, WaitReason.WAITING_IN_QUEUE,
                    f"waiting in queue {job.queue} behind jobs admitted first",
                )
        return outcomes

    # -- isolation of failures: one bad job never stops the others ------------------------------
    def _backing_off(self, job: JobView, now: float) -> bool:
        entry = self._retry_at.get(job.uid)
        return entry is not None and entry[0] == job.generation and now < entry[1]

    def _order(self, candidates: list[JobView]) -> tuple[list[JobView], list[Outcome]]:
        """The quota port's order; when it raises, the jobs it raises for are set aside as failed."""
        try:
            return self.quota.order(candidates), []
        except Exception:
            log.exception("ordering %d waiting jobs failed; finding the job that breaks it", len(candidates))
        good: list[JobView] = []
        failed: list[Outcome] = []
        for job in candidates:
            try:
                self.quota.order([job])
            except Exception as exc:
                failed.append(self._failed(job, exc))
            else:
                good.append(job)
        try:
            return self.quota.order(good), failed
        except Exception as exc:  # no single job breaks it: a bug of the port; try again next cycle
            log.error("ordering still fails without the failing jobs: %s", exc)
            return [], failed

    async def _attempt(self, job: JobView) -> Outcome:
        """``try_admit``, with any error turned into that job's AdmissionError (and a backoff)."""
        try:
            outcome = await self.try_admit(job)
        except Exception as exc:
            if job.uid not in self._creating:
                # Whatever the failed attempt took is given back (no-ops when it took nothing).
                self.quota.release(job.uid)
                await self.placement.release(job.uid)
            return self._failed(job, exc)
        if outcome.result is not AdmitResult.ERROR:
            self._retry_at.pop(job.uid, None)
        return outcome

    def _failed(self, job: JobView, exc: Exception) -> Outcome:
        log.error("admission of %s failed: %s", job.key, exc, exc_info=exc)
        generation, _, failures = self._retry_at.get(job.uid, (job.generation, 0.0, 0))
        failures = failures + 1 if generation == job.generation else 1
        delay = min(BACKOFF_FIRST_SECONDS * 2 ** (failures - 1), BACKOFF_MAX_SECONDS)
        self._retry_at[job.uid] = (job.generation, time.monotonic() + delay, failures)
        message = f"admission failed ({type(exc).__name__}: {exc}); retrying in {delay:.0f}s"
        try:
            self._mark_waiting(job, Phase.QUEUED, WaitReason.ADMISSION_ERROR, message, warning=True)
        except Exception:
            log.exception("could not record the admission error of %s", job.key)
        return Outcome(job.key, AdmitResult.ERROR, message, WaitReason.ADMISSION_ERROR)

    async def try_admit(self, job: JobView) -> Outcome:
        """Steps 2 to 5 for one queue head."""
        excluded = job.excluded_nodes
        previous = job.placement
        preferred = previous.domain if previous is not None else None
        if not job.gpus_per_replica and not job.gpu_milli:
            message = (
                "the job asks for no GPU: set spec.gpusPerReplica >= 1, an nvidia.com/gpu limit in "
                "spec.template, or spec.gpuFraction"
            )
            return self._unschedulable(job, WaitReason.NO_GPUS_REQUESTED, message)

        # (2) Quota up the GPUQueue tree, for each flavour the job may use (Kueue's flavour assignment).
        with _timed("quota"):
            options = [(option, self.quota.can_admit(option)) for option in self.quota.flavor_options(job)]
        possible = [(option, verdict) for option, verdict in options if not verdict.never]
        if not possible:
            reason = "; ".join(dict.fromkeys(verdict.reason for _, verdict in options))
            cause = options[0][1].cause if options else None
            return self._unschedulable(job, cause or WaitReason.EXCEEDS_QUEUE_CAPACITY, reason)
        waiting_for = self._preempting.get(job.uid)
        if waiting_for and any(self.cache.pods.get(uid) for uid in waiting_for):
            # Their GPUs are not free until their pods are gone; planning now would race them.
            return self._queued(job, WaitReason.PREEMPTING, "waiting for preempted gangs to terminate")
        fitting = [option for option, verdict in possible if verdict.ok]
        if not fitting:
            first, verdict = possible[0]
            message = f"waiting for quota in queue {job.queue}: {verdict.reason}"
            return await self._preempt_or_queue(first, WaitReason.QUOTA_EXHAUSTED, message)

        # (3) Plan the whole gang (first flavour that places it), take the quota, reserve the placement.
        refusals: list[tuple[str, bool]] = []
        chosen: tuple[JobView, Placement] | None = None
        for option in fitting:
            with _timed("plan"):
                plan = await self.placement.plan(option, excluded_nodes=excluded, preferred_domain=preferred)
            if plan.placement is not None:
                chosen = (option, plan.placement)
                break
            refusals.append((plan.reason, plan.never))
        if chosen is None:
            if all(never for _, never in refusals):
                return self._unschedulable(job, WaitReason.NO_NODE_LARGE_ENOUGH, refusals[0][0])
            first_refusal = next(reason for reason, never in refusals if not never)
            return await self._preempt_or_queue(
                fitting[0], WaitReason.INSUFFICIENT_GPUS, f"waiting for GPUs: {first_refusal}"
            )
        job, placement = chosen
        taken = self.quota.admit(job)
        if not taken.ok:
            return self._queued(
                job, WaitReason.QUOTA_EXHAUSTED, f"waiting for quota in queue {job.queue}: {taken.reason}"
            )
        with _timed("reserve"):
            reserved = await self.placement.reserve(job, placement)
        if not reserved.ok:
            self.quota.release(job.uid)
            return self._queued(job, WaitReason.RESERVATION_FAILED, f"waiting for GPUs: {reserved.reason}")

        # (4) Record the admission: assume it in the cache now (the next decision counts it), confirm it
        # in the API in the background, before any pod exists (a new leader finds admissions there).
        # (5) Then create the framework objects and every pod of the gang, also off the decision path.
        # Waiting for a slot is the back-pressure that keeps reservations far from their TTL.
        await self._creation_slots.acquire()
        admitted, status = self._assume_admission(job, placement)
        self._creating[job.uid] = asyncio.create_task(
            self._confirm_and_create(admitted, status, placement), name=f"kubegang-create-{job.key}"
        )
        self._preempting.pop(job.uid, None)
        self._waiting_written.pop(job.uid, None)
        self._retry_at.pop(job.uid, None)
        metrics.JOBS_ADMITTED.labels(job.queue).inc()
        metrics.QUEUE_WAIT_SECONDS.labels(job.queue).observe(max((self.clock() - job.created).total_seconds(), 0))
        message = f"admitted to queue {job.queue} on {len(placement.nodes)} nodes" + (
            f" in {placement.domain}" if placement.domain else ""
        )
        self.notify(admitted, "Admitted", message)
        log.info("admitted %s: %s", job.key, message)
        return Outcome(job.key, AdmitResult.ADMITTED, message)

    async def _confirm_and_create(self, job: JobView, status: dict[str, Any], placement: Placement) -> None:
        try:
            with _timed("record"):
                await self.writer.write(job, status)
        except Exception:
            log.exception("recording the admission of %s failed; undoing", job.key)
            self._creating.pop(job.uid, None)
            self._creation_slots.release()
            self.cache.forget(job.uid)
            await self.placement.release(job.uid)
            self.quota.release(job.uid)
            self.cache.wake.set()  # the job waits again: let the next cycle see it
            return
        try:
            with _timed("create"):
                error = await self.create_gang(job, placement)
        except Exception as exc:  # create_gang reports its own failures; this is a bug guard
            error = f"creating the gang failed: {exc}"
        finally:
            # Before the undo: teardown waits for a gang in creation, and must not wait for itself.
            self._creating.pop(job.uid, None)
            self._creation_slots.release()
        if error is not None:
            try:
                await self._undo_admission(job, error)
            except Exception:
                log.exception("undoing the admission of %s failed", job.key)

    def _assume_admission(self, job: JobView, placement: Placement) -> tuple[JobView, dict[str, Any]]:
        now = self.clock()
        message = f"admitted to queue {job.queue}; creating {job.replicas} pods"
        status = transition(
            job.status, Phase.ADMITTED, "Admitted", message, now=now, observed_generation=job.generation
        )
        status["placement"] = placement.to_dict()
        status["admittedAt"] = now_rfc3339(now)
        status["podsCreatedAt"] = None
        status["readyReplicas"] = 0
        status["totalGPUs"] = job.spec.total_gpus()
        return self.cache.assume(job, status), status

    async def create_gang(self, job: JobView, placement: Placement) -> str | None:
        """Step 5: create the gang's objects (idempotent); returns an error message or None.

        Also used by the supervisor for an admission recorded by a leader that died before step 5.
        ``podsCreatedAt`` is assumed here and written with the gang's next status write (Running,
        ready count, requeue): one write fewer per job. A new leader that finds it unwritten counts
        the gang timeout from ``admittedAt``, which is earlier, so a gang never waits longer.
        """
        objects = build_gang(
            job, placement, master_port=self.master_port, shared_gpu_resource=self.shared_gpu_resource
        )
        try:
            for extra in (objects.service, objects.config_map):
                if extra is not None:
                    await self.kube.create(extra)
            # Every pod at once: the gang is placed and reserved, so nothing waits for siblings.
            await asyncio.gather(*(self.kube.create(pod) for pod in objects.pods))
        except Exception as exc:
            log.exception("creating the gang of %s failed", job.key)
            return f"creating pods failed: {exc}"
        self.cache.assume(job, {"podsCreatedAt": now_rfc3339(self.clock())})
        return None

    async def _undo_admission(self, job: JobView, error: str) -> None:
        await self.teardown(job)
        self.cache.forget(job.uid)
        patch = transition(job.status, Phase.QUEUED, "AdmissionFailed", f"requeued: {error}", now=self.clock())
        patch.update(_NOT_ADMITTED)
        self.cache.assume(job, patch)
        try:
            await self.writer.write(job, patch)
        except Exception:
            log.exception("could not reset the status of %s after a failed admission", job.key)

    async def teardown(self, job: JobView, *, keep_finished_pods: bool = False) -> None:
        """Delete the gang's pods (all at once) and release its reservation and quota."""
        creating = self._creating.get(job.uid)
        if creating is not None and creating is not asyncio.current_task():
            # Deleting while its creation still runs could leave a pod created after the delete.
            await asyncio.wait({creating})
        pods = self.cache.pods_of(job.uid)
        doomed = [p for p in pods if not (keep_finished_pods and p.phase in ("Succeeded", "Failed"))]
        names = {p.name for p in doomed}
        if not keep_finished_pods:
            # Pods the cache has not seen yet (just created) are deleted by their deterministic names.
            names |= {f"{job.name}-{i}" for i in range(job.replicas)}
        results = await asyncio.gather(
            *(self.kube.delete("Pod", job.namespace, name) for name in sorted(names)), return_exceptions=True
        )
        for result in results:
            if isinstance(result, BaseException):
                log.error("deleting a pod of %s failed: %s", job.key, result)
        await self.placement.release(job.uid)
        self.quota.release(job.uid)

    # -- waiting and preemption ------------------------------------------------------------------
    async def _preempt_or_queue(self, job: JobView, reason: WaitReason, message: str) -> Outcome:
        victims = await self._choose_victims(job)
        if not victims:
            return self._queued(job, reason, message)
        for victim, why in victims:
            await self.evict(victim, preemptor=job, why=why)
        self._preempting[job.uid] = frozenset(v.uid for v, _ in victims)
        names = ", ".join(v.key for v, _ in victims)
        self.notify(job, "Preempting", f"evicting {len(victims)} gang(s) to make room: {names}")
        self._mark_waiting(job, Phase.QUEUED, WaitReason.PREEMPTING, f"{message}; preempting {names}")
        return Outcome(job.key, AdmitResult.PREEMPTING, names, WaitReason.PREEMPTING)

    async def _choose_victims(self, job: JobView) -> list[tuple[JobView, str]]:
        with _timed("preempt"):
            candidates = self.quota.preemption_candidates(job)
            if not candidates:
                return []
            by_uid = {c.job.uid: c for c in candidates}
            # Quota first: the fewest candidates (in policy order) whose quota the job needs; the
            # extender is asked about GPUs with those first in line, since they go anyway.
            for_quota = self._quota_victims(job, list(by_uid))
            if for_quota is None:
                return []
            order = for_quota + [uid for uid in by_uid if uid not in for_quota]
            for_gpus = await self.placement.what_if(job, [by_uid[uid].job for uid in order])
            if for_gpus is None:
                return []  # not placeable even with every candidate gone: evict nobody
            unknown = [uid for uid in for_gpus if uid not in by_uid]
            if unknown:
                # The extender may only pick among what policy allows; anything else is a bug there.
                log.error("WhatIf for %s returned non-candidates %s; not preempting", job.key, unknown)
                return []
            chosen = list(dict.fromkeys([*for_quota, *for_gpus]))
            if not chosen or not self.quota.can_admit_without(job, chosen).ok:
                return []
            return [(by_uid[uid].job, by_uid[uid].why) for uid in chosen]

    def _quota_victims(self, job: JobView, candidates: Sequence[str]) -> list[str] | None:
        """The shortest prefix of ``candidates`` whose eviction lets ``job`` fit in quota, pruned of
        members a later, larger one makes unnecessary; [] when quota is not the problem, None when
        no eviction among them is enough."""
        chosen: list[str] = []
        for uid in candidates:
            if self.quota.can_admit_without(job, chosen).ok:
                break
            chosen.append(uid)
        if not self.quota.can_admit_without(job, chosen).ok:
            return None
        for uid in list(chosen[:-1]):
            trial = [u for u in chosen if u != uid]
            if self.quota.can_admit_without(job, trial).ok:
                chosen = trial
        return chosen

    async def evict(self, victim: JobView, *, preemptor: JobView, why: str) -> None:
        """Evict ``victim`` whole for ``preemptor`` and requeue it, saying who and why."""
        await self.teardown(victim)
        message = f"preempted by {preemptor.key} {why}".rstrip()
        now = self.clock()
        status = transition(victim.status, Phase.QUEUED, "Preempted", f"requeued: {message}", now=now)
        status["conditions"] = set_condition(
            status["conditions"], CondType.PREEMPTED, True, "Preempted", message, now=now
        )
        status.update(_NOT_ADMITTED)
        self.cache.assume(victim, status)
        await self.writer.write(victim, status)
        self.notify(victim, "Preempted", message, warning=True)
        metrics.JOBS_PREEMPTED.labels(victim.queue).inc()
        log.info("evicted %s: %s", victim.key, message)

    def _queued(self, job: JobView, reason: WaitReason, message: str) -> Outcome:
        self._mark_waiting(job, Phase.QUEUED, reason, message)
        return Outcome(job.key, AdmitResult.QUEUED, message, reason)

    def _unschedulable(self, job: JobView, reason: WaitReason, message: str) -> Outcome:
        self._mark_waiting(job, Phase.UNSCHEDULABLE, reason, message)
        return Outcome(job.key, AdmitResult.UNSCHEDULABLE, message, reason)

    def _mark_waiting(self, job: JobView, phase: Phase, reason: str, message: str, *, warning: bool = False) -> None:
        """Say why ``job`` waits, in the background lane, and only when that is news.

        A new phase or reason is written at once (queued behind decisions); a new message under the
        same reason (free-GPU numbers move every cycle) at most every ``MESSAGE_REFRESH_SECONDS``.
        """
        cond_type = CondType.UNSCHEDULABLE if phase is Phase.UNSCHEDULABLE else CondType.QUEUED
        current = get_condition(job.status.get("conditions") or [], cond_type)
        if job.phase is phase and current is not None and current.get("reason") == reason:
            if current.get("message") == message:
                return
            last = self._waiting_written.get(job.uid)
            fresh = last is not None and time.monotonic() - last[2] < MESSAGE_REFRESH_SECONDS
            if fresh and last is not None and last[:2] == (phase.value, reason):
                return
        else:  # a new phase or reason (not a refreshed message): worth a line in the log
            log.info("%s %s: %s (%s)", job.key, phase.value, reason, message)
        patch = transition(job.status, phase, reason, message, now=self.clock(), observed_generation=job.generation)
        if phase is Phase.UNSCHEDULABLE or warning:
            self.notify(job, reason, message, warning=True)
        self.cache.assume(job, patch)
        self._waiting_written[job.uid] = (phase.value, reason, time.monotonic())
        self.writer.later(job, patch)

    def _export_queue_gauges(self, pending: Sequence[JobView]) -> None:
        counts: dict[str, int] = {name: 0 for name in self.cache.queues}
        for job in pending:
            counts[job.queue] = counts.get(job.queue, 0) + 1
        for queue, count in counts.items():
            metrics.QUEUE_PENDING_JOBS.labels(queue).set(count)


def requeue_patch(
    job: JobView, reason: str, message: str, now: dt.datetime, *, extra: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """Status for a gang sent back to its queue (restart, timeout): no placement, no admission."""
    patch = transition(job.status, Phase.QUEUED, reason, message, now=now)
    patch.update(_NOT_ADMITTED)
    if extra:
        patch.update(extra)
    return patch
