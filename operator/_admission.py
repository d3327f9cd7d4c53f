"""The leader's admission: it drives the core cycle (``kubegang.admission``) against the cache, the
quota tree and the extender, and carries out what the cycle decides.

The cycle itself (order, quota, placement, preemption, backfill reservation, a typed outcome per job)
is the core's ``AdmissionCycle``, the very code the simulator in ``bench/`` runs. This module answers
its effects, each one at the moment the cycle asks:

- ``Plan`` / ``Reserve`` / ``WhatIf`` / ``Release``: the extender's Placement service (gRPC);
- ``Evict``: delete the victim's pods, release its reservation and quota, requeue it with a reason;
- ``Admit``: assume the admission in the cache (the next decision counts it) and hand the gang to a
  bounded set of background tasks, which first confirm it in GPUJob status (phase Admitted,
  ``status.placement``; a new leader reads admissions from there), then create the Service / hostfile
  ConfigMap the framework needs and every pod at once, while the cycle goes on.

Decisions stay sequential: the extender holds the reservation before the next ``Plan``, so capacity
is never counted twice, while the slow part (one API write per pod) overlaps with later decisions.
The number of gangs in creation is bounded (back-pressure well inside the reservation TTL). Reports
that decide nothing (Queued reasons, Events) go to the background lane (``_status_writer``).

A failure after the decision undoes the earlier steps in reverse (delete what was created, reset the
status, release the reservation, give the quota back), so a job is either fully admitted or waiting.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as dt
import logging
import time
from collections.abc import Callable, Coroutine, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from kubegang.admission import (
    AdmissionCycle,
    Admit,
    AdmitResult,
    CycleSettings,
    Effect,
    Entry,
    Evict,
    Plan,
    Release,
    Reserve,
    WaitReason,
    WhatIf,
    run_async,
)
from kubegang.api import GPUJobStatus, Placement
from kubegang.operator import _metrics as metrics
from kubegang.operator._cache import HOLDING_PHASES, ClusterCache
from kubegang.operator._conditions import (
    CondType,
    Phase,
    get_condition,
    set_condition,
    transition,
)
from kubegang.operator._gang_objects import DEFAULT_MASTER_PORT, build_gang
from kubegang.operator._job import JobView, status_fields, timestamp
from kubegang.operator._leader import NotLeading
from kubegang.operator._ports import KubePort, PlacementPort, QuotaPort
from kubegang.operator._sources import SourceBridge
from kubegang.operator._status_writer import StatusWriter
from kubegang.restclient import ApiStatusError

log = logging.getLogger("kubegang.operator.admission")

NOT_ADMITTED: dict[str, Any] = status_fields(GPUJobStatus(admitted_at=None, pods_created_at=None, ready_replicas=0))
"""Status fields cleared when a job gives its admission back. ``placement`` stays: its domain is
preferred when the gang is placed again, and a new admission overwrites it."""

Clock = Callable[[], dt.datetime]

HELD_BACK_REASONS = frozenset({WaitReason.WAITING_FOR_PODS, WaitReason.PREVIOUS_PODS_TERMINATING})
"""Reasons of jobs the cycle was not offered (``ClusterCache.held_back``): once it is, they are out of date."""

MESSAGE_REFRESH_SECONDS = 30.0
"""A waiting job's message (numbers of free GPUs, quota left) is rewritten at most this often while
its phase and reason stay the same: fresh enough for a human, not a write per cycle per job."""


def utcnow() -> dt.datetime:
    """The current time, timezone-aware (the default clock)."""
    return dt.datetime.now(dt.UTC)


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
        settings: CycleSettings | None = None,
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
        self.cycle: AdmissionCycle[JobView, Placement] = AdmissionCycle(quota, settings=settings)
        """The core cycle; it keeps its memos (Unschedulable, backoff, preemptions, reservations)."""
        self.writer = writer or StatusWriter(kube, on_lost=cache.forget, versions=cache.versions)
        self._creating: dict[str, asyncio.Task[None]] = {}
        """UID → the background task creating that gang's objects."""
        self._creation_failures: dict[str, tuple[int, int]] = {}
        """UID → (generation, failed pod creations in a row at it): the backoff of refused pods."""
        self._creation_slots = asyncio.Semaphore(creation_concurrency)
        self._background: set[asyncio.Task[Any]] = set()
        self._waiting_written: dict[str, tuple[str, str, float]] = {}
        """UID → (phase, reason, monotonic time) of the last waiting status written."""
        self._reserving: set[str] = set()
        """UIDs of jobs holding a backfill reservation (announced once, by an Event)."""
        self._held_back: dict[str, tuple[str, tuple[str, ...]]] = {}
        """UID -> (reason, subject) of each job reported held back last cycle (``_report_held_back``):
        its Event is recorded once per wait, not on every refreshed message."""
        self.sources = SourceBridge(cache, kube)
        """RayClusters and pod groups, represented by GPUJobs with ``spec.podSource`` (``_sources``)."""
        self._changed = cache.changes()
        """Jobs changed since the last cycle: any of them that holds an admission is counted (``_count_holding``)."""

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
        for holder in self.cache.unread_holding.values():
            self.quota.record_holder(holder)
        for queue in self.cache.queues:
            # At 0 before the queue's first admission: a counter that appears at 1 shows no increase(),
            # and KubegangQueueStarving would read a queue that just admitted as one that did not.
            metrics.JOBS_ADMITTED.labels(queue)
        self.cache.queues_changed = False
        self.cycle.tree_changed()
        return problems

    def _count_holding(self) -> None:
        """Count the quota of every changed job that holds an admission the book does not count.

        The API is the truth. An admission write that timed out after the API server had applied it
        is undone here (its quota released), then comes back through the watch as Admitted, and the
        supervisor finishes that gang: uncounted, a second gang was admitted onto the same quota."""
        for uid in self._changed.take():
            # A holding job never readable is counted from its status (``ClusterCache.unread_holding``)
            # until it is readable (then counted once, as the job it is), holds nothing or is deleted.
            holder = self.cache.unread_holding.get(uid)
            if holder is not None:
                if self.quota.record_holder(holder):
                    log.warning("%s holds an admission but its spec cannot be read: %s GPUs counted in queue "
                                "%s from its status", holder.key, holder.gpus, holder.queue)
                continue
            released = self.quota.release_holder(uid)
            job = self.cache.job(uid)
            if job is not None and job.phase in HOLDING_PHASES and self.quota.record(job) and not released:
                log.warning("%s holds an admission the quota book did not count (a write whose answer was "
                            "lost?): counted now", job.key)

    async def release_deleted(self) -> None:
        """Give back the reservation and quota of jobs deleted since the last cycle."""
        while self.cache.deleted:
            uid = self.cache.deleted.pop()
            self.writer.discard(uid)
            self._waiting_written.pop(uid, None)
            self._creation_failures.pop(uid, None)
            self._reserving.discard(uid)
            self.cycle.forget(uid)
            self.quota.release(uid)
            await self.placement.release(uid)

    # -- background work ---------------------------------------------------------------------------
    def creating(self, uid: str) -> bool:
        """Whether the gang of ``uid`` is being created right now (the supervisor leaves it alone)."""
        return uid in self._creating

    def spawn(self, work: Coroutine[Any, Any, Any]) -> None:
        """Run ``work`` in the background: ``settle`` waits for it, ``abandon`` cancels it."""
        task = asyncio.create_task(work)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    def notify(self, job: JobView, reason: str, message: str, *, warning: bool = False) -> None:
        """Record an Event without waiting for it (Events are for humans; decisions do not wait)."""
        self.spawn(self.kube.event(job, reason, message, warning=warning))

    def abandon(self) -> None:
        """Cancel every gang creation and Event under way: this replica stops leading (its fence would
        refuse their writes) or stops; the next leader decides those jobs again from the API."""
        for task in (*self._creating.values(), *self._background):
            task.cancel()

    async def abandoned(self) -> None:
        """Wait until what ``abandon`` cancelled has ended (before the clients it uses are closed)."""
        await asyncio.gather(*self._creating.values(), *self._background, return_exceptions=True)

    async def settle(self) -> None:
        """Wait for every gang in creation, Event and queued status write (tests, shutdown)."""
        while self._creating or self._background:
            await asyncio.gather(*self._creating.values(), *self._background, return_exceptions=True)
        await self.writer.settle()

    # -- the cycle -------------------------------------------------------------------------------
    async def run_cycle(self) -> list[Outcome]:
        """One pass of the core cycle over the waiting jobs; returns what happened to each."""
        if self.cache.queues_changed:
            self.sync_queues()
        await self.release_deleted()
        self._count_holding()
        pending = self.cache.pending()
        self._report_held_back()
        self._export_queue_gauges(pending)
        room = await self.placement.room() if pending else None
        self.quota.begin_cycle()
        entries = await run_async(
            self.cycle.schedule(pending, holds_pods=lambda uid: bool(self.cache.pods.get(uid)), room=room),
            self._answer,
        )
        return [self._report(entry) for entry in entries]

    async def _answer(self, effect: Effect[JobView, Placement]) -> Any:
        """Carry out one effect of the cycle (its placement questions and its decisions)."""
        if isinstance(effect, Plan):
            with _timed("plan"):
                return await self.placement.plan(
                    effect.job, excluded_nodes=effect.excluded_nodes, preferred_domain=effect.preferred_domain
                )
        if isinstance(effect, Reserve):
            with _timed("reserve"):
                return await self.placement.reserve(effect.job, effect.placement)
        if isinstance(effect, WhatIf):
            with _timed("preempt"):
                return await self.placement.what_if(effect.job, effect.candidates, excluded_nodes=effect.excluded_nodes,
                                                    gone=effect.gone)
        if isinstance(effect, Release):
            await self.placement.release(effect.job.uid)
            return None
        if isinstance(effect, Evict):
            await self.evict(effect.victim, preemptor=effect.preemptor, why=effect.why)
            return None
        if isinstance(effect, Admit):
            await self._admit(effect.job, effect.placement)
            return None
        raise TypeError(f"unknown effect {effect!r}")

    async def _admit(self, job: JobView, placement: Placement) -> None:
        """Record the admission (assumed now, confirmed in the background) and start the gang."""
        # Waiting for a slot is the back-pressure that keeps reservations far from their TTL.
        await self._creation_slots.acquire()
        admitted, status = self._assume_admission(job, placement)
        self._creating[job.uid] = asyncio.create_task(
            self._confirm_and_create(admitted, status, placement), name=f"kubegang-create-{job.key}"
        )
        self._waiting_written.pop(job.uid, None)
        metrics.JOBS_ADMITTED.labels(job.queue).inc()
        metrics.QUEUE_WAIT_SECONDS.labels(job.queue).observe(max((self.clock() - job.created).total_seconds(), 0))
        # No Event: the Admitted condition says the same in the same write (one API write fewer per job).
        log.info("admitted %s: %s", job.key, _admitted_message(job, placement))

    def _report(self, entry: Entry[JobView, Placement]) -> Outcome:
        """Write what the cycle said of a job that was not admitted (in the background lane)."""
        job, reason = entry.job, entry.reason
        outcome = Outcome(job.key, entry.result, entry.message, reason)
        if entry.result is AdmitResult.ADMITTED and entry.placement is not None:
            self._reserving.discard(job.uid)
            return dataclasses.replace(outcome, message=_admitted_message(job, entry.placement))
        if reason is WaitReason.WAITING_IN_QUEUE and job.phase is not Phase.PENDING \
                and job.status.get("reason") not in HELD_BACK_REASONS:
            # Not tried this cycle: it keeps the more specific reason it has, unless that reason was why
            # it was not offered to the cycle at all (its pods exist, or are gone, now).
            return outcome
        if entry.reservation and job.uid not in self._reserving:
            self._reserving.add(job.uid)
            self.notify(job, "BackfillReservation", f"reserved {len(entry.reservation)} nodes "
                        f"({', '.join(sorted(entry.reservation)[:8])}{' ...' if len(entry.reservation) > 8 else ''}): "
                        "later jobs are placed around them until this job starts")
        if entry.result is AdmitResult.PREEMPTING:
            names = ", ".join(v.key for v in entry.victims)
            self.notify(job, "Preempting", f"evicting {len(entry.victims)} gang(s) to make room: {names}")
            outcome = dataclasses.replace(outcome, message=names)
        phase = Phase.UNSCHEDULABLE if entry.result is AdmitResult.UNSCHEDULABLE else Phase.QUEUED
        try:
            self._mark_waiting(job, phase, reason or WaitReason.WAITING_IN_QUEUE, entry.message,
                               warning=entry.result is AdmitResult.ERROR)
        except Exception:
            log.exception("could not record why %s waits", job.key)
        return outcome

    async def _confirm_and_create(self, job: JobView, status: dict[str, Any], placement: Placement) -> None:
        try:
            with _timed("record"):
                await self.writer.write(job, status, fenced=True)
        except Exception as exc:
            if isinstance(exc, NotLeading) or (isinstance(exc, ApiStatusError) and exc.code in (404, 409)):
                # Fenced: this replica lost the Lease, or the job changed (another leader's decision,
                # a user's edit) or was deleted since it was read. Nothing was written; the job, if
                # it still exists, is decided again.
                log.warning("admission of %s not recorded (%s); undoing", job.key, exc)
            else:
                log.exception("recording the admission of %s failed; undoing", job.key)
            self._creating.pop(job.uid, None)
            self._creation_slots.release()
            self.cache.forget(job.uid)
            if not isinstance(exc, NotLeading):
                # A deposed replica leaves the reservation alone: the extender keys it by the job's
                # UID, and the new leader may have reserved that very job since.
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
        if error is None:
            self._creation_failures.pop(job.uid, None)
        else:
            try:
                await self._undo_admission(job, error)
            except Exception:
                log.exception("undoing the admission of %s failed", job.key)

    def _assume_admission(self, job: JobView, placement: Placement) -> tuple[JobView, dict[str, Any]]:
        now = self.clock()
        source = job.spec.pod_source
        creating = (f"letting {source.kind.value} {source.name} make its {job.replicas} GPU pods" if source
                    else f"creating {job.replicas} pods")
        message = f"{_admitted_message(job, placement)}; {creating}"
        status = transition(
            job.status, Phase.ADMITTED, "Admitted", message, now=now, observed_generation=job.generation
        )
        status |= status_fields(GPUJobStatus(
            placement=placement, admitted_at=timestamp(now), pods_created_at=None, ready_replicas=0,
            total_gpus=job.requested_gpus, queue_position=None,  # it waits no more: in the same write
        ))
        return self.cache.assume(job, status), status

    async def create_gang(self, job: JobView, placement: Placement) -> str | None:
        """Step 5: create the gang's objects (idempotent); returns an error message or None.

        Also used by the supervisor for an admission recorded by a leader that died before step 5.
        ``podsCreatedAt`` is assumed here and written with the gang's next status write (Running,
        ready count, requeue): one write fewer per job. A new leader that finds it unwritten counts
        the gang timeout from ``admittedAt``, which is earlier, so a gang never waits longer.
        """
        if job.spec.pod_source is not None:
            # Another controller makes the pods: let it (the bridge pins each pod as it appears).
            try:
                await self.sources.open(job)
            except Exception as exc:
                log.exception("opening the source of %s failed", job.key)
                return f"letting {job.spec.pod_source.kind.value} {job.spec.pod_source.name} start failed: {exc}"
            self.cache.assume(job, status_fields(GPUJobStatus(pods_created_at=timestamp(self.clock()))))
            return None
        objects = build_gang(
            job, placement, master_port=self.master_port, shared_gpu_resource=self.shared_gpu_resource
        )
        try:
            for extra in (objects.service, objects.config_map):
                if extra is not None:
                    await self.kube.create(extra)
            # Every pod at once: the gang is placed and reserved, so nothing waits for siblings.
            created = await asyncio.gather(*(self.kube.create(pod) for pod in objects.pods))
        except Exception as exc:
            log.exception("creating the gang of %s failed", job.key)
            return f"creating pods failed: {exc}"
        # AlreadyExists is success for a pod of this very attempt (a leader finishing step 5), not for a
        # pod of an earlier attempt still being deleted (a gang requeued a moment ago), which holds
        # the name: the supervisor creates it once the old one is gone (``missing_pods``).
        seen = self.cache.pods.get(job.uid, {})
        stale = [pod["metadata"]["name"] for pod, new in zip(objects.pods, created, strict=True)
                 if not new and (state := seen.get(pod["metadata"]["name"])) is not None
                 and (state.attempt != job.attempt or state.deleting)]
        if stale:
            log.info("%s: pods %s of an earlier attempt still exist; created once they are gone", job.key, stale)
        now = self.clock()
        self.cache.expect_pods(job, (pod["metadata"]["name"] for pod, new in zip(objects.pods, created, strict=True)
                                     if new), now)
        self.cache.assume(job, status_fields(GPUJobStatus(pods_created_at=timestamp(now))))
        return None

    async def _undo_admission(self, job: JobView, error: str) -> None:
        await self.teardown(job)
        self.cache.forget(job.uid)
        # Refused pods (a webhook, a LimitRange, a quota) are refused again at once: back off, doubling
        # while the spec stays the same, as for any other failure of the job's admission.
        generation, failures = self._creation_failures.get(job.uid, (job.generation, 0))
        failures = failures + 1 if generation == job.generation else 1
        self._creation_failures[job.uid] = (job.generation, failures)
        delay = self.cycle.back_off(job, failures)
        message = f"requeued: {error}; retrying in {delay:.0f}s"
        patch = transition(job.status, Phase.QUEUED, "AdmissionFailed", message, now=self.clock())
        patch.update(NOT_ADMITTED)
        self.cache.assume(job, patch)
        try:
            await self.writer.write(job, patch)
        except Exception as exc:
            self._write_again(job, patch, "the requeue after a failed admission", exc)

    def _write_again(self, job: JobView, patch: dict[str, Any], what: str, error: Exception) -> None:
        """A gang already torn down whose status write failed: the API still says it holds. Send it once
        more in the background lane. Were the assumption simply kept, the API's Admitted would stand
        for ever (an extender or a new leader would hold its GPUs again); if the second write fails too,
        the assumption goes (``on_lost``), and the API's admission is counted and finished again."""
        log.warning("writing %s of %s failed (%s); writing it again in the background", what, job.key, error)
        self.writer.later(job, patch)

    async def teardown(self, job: JobView, *, keep_finished_pods: bool = False) -> None:
        """Delete the gang's pods (all at once) and release its reservation and quota."""
        creating = self._creating.get(job.uid)
        if creating is not None and creating is not asyncio.current_task():
            # Deleting while its creation still runs could leave a pod created after the delete.
            await asyncio.wait({creating})
        pods = self.cache.pods_of(job.uid)
        doomed = [p for p in pods if not (keep_finished_pods and p.phase in ("Succeeded", "Failed"))]
        names = {p.name for p in doomed}
        if job.spec.pod_source is not None:
            # Its controller's pods: a RayCluster is suspended (KubeRay deletes them all, and kubegang
            # none: see ``SourceBridge.close``), a pod group's pods are deleted (made anew, they wait
            # unpinned). None has a name kubegang chose.
            try:
                if await self.sources.close(job, keep_finished_pods=keep_finished_pods):
                    names = set()
            except Exception:
                log.exception("taking the pods of %s away failed", job.key)
        elif not keep_finished_pods:
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

    # -- eviction and waiting -------------------------------------------------------------------
    async def evict(self, victim: JobView, *, preemptor: JobView, why: str) -> None:
        """Evict ``victim`` whole for ``preemptor`` and requeue it, saying who and why."""
        await self.teardown(victim)
        message = f"preempted by {preemptor.key} {why}".rstrip()
        now = self.clock()
        status = transition(victim.status, Phase.QUEUED, "Preempted", f"requeued: {message}", now=now)
        status["conditions"] = set_condition(
            status["conditions"], CondType.PREEMPTED, True, "Preempted", message, now=now
        )
        status.update(NOT_ADMITTED)
        self.cache.assume(victim, status)
        try:
            await self.writer.write(victim, status)
        except Exception as exc:
            self._write_again(victim, status, "the eviction", exc)
        self.notify(victim, "Preempted", message, warning=True)
        metrics.JOBS_PREEMPTED.labels(victim.queue).inc()
        log.info("evicted %s: %s", victim.key, message)

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

    def _report_held_back(self) -> None:
        """Say why the waiting jobs the cycle is not offered yet wait (``ClusterCache.held_back``: a pod
        group missing pods, a gang whose earlier pods are stuck terminating): a Queued condition written
        as any waiting reason is (once, again when it changes, a new message at most every
        ``MESSAGE_REFRESH_SECONDS``), and an Event once per wait (Warning for stuck pods: someone must
        act; Normal for a group whose controller has not made its pods yet)."""
        reported: dict[str, tuple[str, tuple[str, ...]]] = {}
        for held in self.cache.held_back(self.clock()):
            job = held.job
            key = (held.reason.value, held.subject)
            reported[job.uid] = key
            try:
                self._mark_waiting(job, Phase.QUEUED, held.reason, held.message)
            except Exception:
                log.exception("could not record why %s waits", job.key)
                continue
            if self._held_back.get(job.uid) != key:
                self.notify(job, held.reason, held.message,
                            warning=held.reason is WaitReason.PREVIOUS_PODS_TERMINATING)
        self._held_back = reported

    def _export_queue_gauges(self, pending: Sequence[JobView]) -> None:
        # Existing queues only: the jobs of a deleted queue still wait, but its series goes with it.
        counts: dict[str, int] = {name: 0 for name in self.cache.queues}
        for job in pending:
            if job.queue in counts:
                counts[job.queue] += 1
        metrics.QUEUE_PENDING_JOBS.export(counts)


def _admitted_message(job: JobView, placement: Placement) -> str:
    where = f" in {placement.domain}" if placement.domain else ""
    return f"admitted to queue {job.queue} on {len(placement.nodes)} nodes{where}"


def requeue_patch(
    job: JobView, reason: str, message: str, now: dt.datetime, *, extra: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """Status for a gang sent back to its queue (restart, timeout): no placement, no admission."""
    patch = transition(job.status, Phase.QUEUED, reason, message, now=now)
    patch.update(NOT_ADMITTED)
    if extra:
        patch.update(extra)
    return patch
