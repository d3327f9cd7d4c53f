"""Carries out the gang state machine's decisions for every job (the leader's second loop).

``_lifecycle.decide`` says what to do; this module does it against the ports: delete the whole gang,
release its reservation and quota, write status, record events, count restarts. It also finishes
admissions a previous leader recorded but did not get to create pods for (step 5 of the cycle).

A pass looks at the jobs that may have something to do, not at every job: those whose object, assumed
status or pods changed since their last look (the cache's ``changes``), those it acted on or skipped
last time, the Admitted ones (their pods are being created and bound, which is timed), and those whose
timer (``Decision.recheck_after``) is due. Every other job is as it was when its last look found
nothing to do, and ``decide`` is a function of the job, its pods and the clock, so it would find
nothing again. A full pass every ``FULL_PASS_SECONDS`` (and the first one of a leadership) is the
safety net.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
from typing import Any

from kubegang.api import GPUJobStatus
from kubegang.operator import _metrics as metrics
from kubegang.operator._admission import NOT_ADMITTED, Admission, requeue_patch
from kubegang.operator._conditions import Phase, transition
from kubegang.operator._gang_objects import build_pod, pod_name
from kubegang.operator._job import JobView, status_fields, timestamp
from kubegang.operator._lifecycle import Action, Decision, decide
from kubegang.operator._types import RepairResult, WaitReason

log = logging.getLogger("kubegang.operator.supervisor")

FULL_PASS_SECONDS = 10.0
"""Longest time between two passes that look at every job, whatever changed."""
REPAIR_INTERVAL_SECONDS = 2.0
"""How often an admitted gang whose pods are not all bound asks the extender whether a pod kubegang did
not place took some of its GPUs (``Repair``): a displaced slot is re-placed within seconds instead of
the gang sitting out ``gangTimeoutSeconds`` with most of its GPUs held."""
WATCH_LAG_SECONDS = 30.0
"""How long a pod this leader created may take to come back through the watch before the supervisor
creates it again (a pod deleted before it was ever seen, or a watch that broke). Under a saturated API
server its echo came more than the repair interval after the create returned."""
READY_REPORT_AFTER_SECONDS = 30.0
"""An admitted gang's ready count alone is written only once its pods were created this long ago. A gang
that forms in seconds then writes its count once, with Running (one status write per phase transition:
at 2,000 jobs the partial counts were about 400 extra writes of the API server's costliest kind, a
custom-resource status update), and a gang that hangs still shows how far it got. 10 s was too short
for a saturated control plane: in a full-size burst on two cores 215 of 2,000 gangs still wrote a
partial count (``kubegang_operator_gpujob_status_writes_total{change="ready_count"}``)."""
RECREATE_ATTEMPTS = 20
"""Tries to create a re-placed pod while the displaced one of the same name is still being deleted."""


class Supervisor:
    """Applies lifecycle decisions; shares the admission's ports, cache and clock."""

    def __init__(self, admission: Admission, *, concurrency: int = 32) -> None:
        self.admission = admission
        self.cache = admission.cache
        self.kube = admission.kube
        self.writer = admission.writer
        self.concurrency = concurrency
        """Jobs acted on at once in a pass: gangs are independent, and 200 jobs turning Running should
        cost a few round trips of the pass, not 200 in a row."""
        self._repaired_at: dict[str, float] = {}
        """Job UID -> clock seconds of its last Repair question."""
        self._changes = self.cache.changes()
        self._again: set[str] = set()
        """UIDs the next pass looks at even if they do not change (acted on, skipped, Admitted)."""
        self._timers: dict[str, dt.datetime] = {}
        """UID -> when its decision changes with time alone (``Decision.recheck_after``)."""
        self._full_at: dt.datetime | None = None
        """When the next pass looks at every job (None: the next one)."""
        self.looked_at = 0
        """Jobs the last pass looked at."""

    def look_at_everything(self) -> None:
        """Let the next pass look at every job (a new leadership: the cache was reloaded)."""
        self._full_at = None

    def _to_look_at(self, now: dt.datetime) -> list[JobView]:
        changed = self._changes.take()
        if self._full_at is None or now >= self._full_at:
            self._full_at = now + dt.timedelta(seconds=FULL_PASS_SECONDS)
            return list(self.cache.all_jobs())
        due = {uid for uid, at in self._timers.items() if at <= now}
        return self.cache.jobs_among(changed | self._again | due)

    async def run_pass(self) -> float | None:
        """Look at every job that may have something to do (see the module docstring) once; returns the
        seconds until a timer is due (None: no timer)."""
        slots = asyncio.Semaphore(self.concurrency)

        async def act(job: JobView, decision: Decision) -> None:
            async with slots:
                try:
                    await self.supervise(job, decision)
                except Exception:
                    log.exception("supervising %s failed; retrying next pass", job.key)

        now = self.admission.clock()
        dues: list[float] = []
        work: list[Any] = []
        again: set[str] = set()
        try:
            jobs = self._to_look_at(now)
            self.looked_at = len(jobs)
            for job in jobs:
                self._timers.pop(job.uid, None)
                if self.admission.creating(job.uid):
                    again.add(job.uid)
                    continue  # its pods are being created; look again once they are
                if job.phase is Phase.ADMITTED:
                    again.add(job.uid)  # in flight: missing pods and repairs below are timed
                try:
                    self._look_at(job, now, act, slots, work, again, dues)
                except Exception:
                    # One job's unreadable object must not stop the pass for every other job.
                    log.exception("supervising %s failed; retrying in %.0fs", job.key, FULL_PASS_SECONDS)
                    self._timers[job.uid] = now + dt.timedelta(seconds=FULL_PASS_SECONDS)
        except BaseException:
            self._full_at = None  # what changed was taken: look at every job next time
            raise
        self._repaired_at = {uid: t for uid, t in self._repaired_at.items() if uid in self.cache.jobs}
        self._timers = {uid: at for uid, at in self._timers.items() if uid in self.cache.jobs}
        dues += [(at - now).total_seconds() for at in self._timers.values()]
        self._again = again
        await asyncio.gather(*work)
        return min(dues, default=None)

    def _look_at(self, job: JobView, now: dt.datetime, act: Any, slots: asyncio.Semaphore, work: list[Any],
                 again: set[str], dues: list[float]) -> None:
        """Decide what ``job`` needs and queue that work (``run_pass``'s body for one job)."""
        decision = decide(job, self.cache.pods_of(job.uid), now)
        if decision.recheck_after is not None:
            self._timers[job.uid] = now + dt.timedelta(seconds=decision.recheck_after)
        if decision.stale_pods or decision.action not in (Action.NONE, Action.PROGRESS) or (
                decision.action is Action.PROGRESS and self._progress_due(job, decision)):
            again.add(job.uid)
            work.append(act(job, decision))
        if decision.action in (Action.NONE, Action.PROGRESS) and self._missing_pods(job, now):
            # Pods of this attempt that could not be created while an earlier attempt's pods of
            # the same names were still being deleted: create them now (idempotent).
            dues.append(REPAIR_INTERVAL_SECONDS)
            placement = job.placement
            if placement is not None:
                work.append(self._guarded(job, self.admission.create_gang(job, placement), slots))
        elif decision.action in (Action.NONE, Action.PROGRESS) and self._waits_for_binding(job):
            dues.append(REPAIR_INTERVAL_SECONDS)
            if now.timestamp() - self._repaired_at.get(job.uid, 0.0) >= REPAIR_INTERVAL_SECONDS:
                self._repaired_at[job.uid] = now.timestamp()
                work.append(self._guarded(job, self.repair(job), slots))

    async def _guarded(self, job: JobView, work: Any, slots: asyncio.Semaphore) -> None:
        async with slots:
            try:
                await work
            except Exception:
                log.exception("repairing %s failed; retrying next pass", job.key)

    def _missing_pods(self, job: JobView, now: dt.datetime) -> bool:
        """Admitted with its pods created a while ago, yet some pod of this attempt is not there (and no
        pod of an earlier attempt still holds its name)."""
        created = job.status_time("podsCreatedAt")
        if job.phase is not Phase.ADMITTED or created is None:
            return False
        if (now - created).total_seconds() < REPAIR_INTERVAL_SECONDS:
            return False  # the watch may not have delivered them yet
        pods = self.cache.pods_of(job.uid)
        current = {p.name for p in pods if p.attempt == job.attempt and not p.deleting}
        others = {p.name for p in pods if p.attempt != job.attempt or p.deleting}
        if len(current) >= job.replicas or others:
            return False
        missing = {pod_name(job, index) for index in range(job.replicas)} - current
        # Created by this leader moments ago and still on their way through the watch: not missing.
        on_their_way = self.cache.unseen_pods_of(
            job, created_after=now - dt.timedelta(seconds=WATCH_LAG_SECONDS))
        return not missing <= on_their_way

    def _waits_for_binding(self, job: JobView) -> bool:
        """Admitted, its pods created, some of them not bound yet (pods kubegang made: another
        controller's pods are not re-made under new names; their gang timeout requeues them)."""
        if job.phase is not Phase.ADMITTED or not job.pods_created_at or job.spec.pod_source is not None:
            return False
        pods = [p for p in self.cache.pods_of(job.uid) if p.attempt == job.attempt and not p.deleting]
        return len(pods) == job.replicas and any(p.bound_node is None for p in pods)

    async def repair(self, job: JobView) -> RepairResult:
        """Re-place the slots of ``job`` that pods kubegang did not place took (the extender's Repair).

        Moved slots get a new pod on their new node, the rest of the gang keeps its pods; when no place
        is found near the gang, it is requeued whole at once rather than after its gang timeout.
        """
        result = await self.admission.placement.repair(job)
        if not result.moved:
            return result
        intruders = ", ".join(sorted({m.intruder for m in result.moved}))
        indices = ", ".join(str(m.index) for m in result.moved)
        metrics.GANG_REPAIRS.labels("moved" if result.placement is not None else "requeued").inc()
        if result.placement is None:
            message = (f"pods not placed by kubegang ({intruders}) took the GPUs of replicas {indices}, and no "
                       f"other place was found near the gang ({result.reason}): requeued whole")
            await self._requeue(job, Decision(Action.TIMEOUT, WaitReason.GANG_DISPLACED, message))
            return result
        moved = {m.index for m in result.moved}
        for index in sorted(moved):
            await self.kube.delete("Pod", job.namespace, f"{job.name}-{index}")
        now = self.admission.clock()
        where = "; ".join(
            f"replica {p.index} to {p.node}" for p in result.placement.pods if p.index in moved
        )
        message = f"re-placed {where}: their GPUs on the planned nodes were taken by {intruders}"
        patch = transition(job.status, Phase.ADMITTED, "Repaired", message, now=now)
        patch |= status_fields(GPUJobStatus(placement=result.placement))
        await self._write(job, patch)
        placed = self.cache.job(job.uid) or job
        for slot in result.placement.pods:
            if slot.index in moved:
                await self._recreate(build_pod(placed, slot, master_port=self.admission.master_port,
                                               shared_gpu_resource=self.admission.shared_gpu_resource))
        self.admission.notify(job, "Repaired", message, warning=True)
        log.warning("%s: %s", job.key, message)
        return result

    async def _recreate(self, pod: dict[str, Any]) -> None:
        for _ in range(RECREATE_ATTEMPTS):
            if await self.kube.create(pod):
                return
            await asyncio.sleep(0.25)  # the displaced pod of that name is still being deleted
        raise RuntimeError(f"pod {pod['metadata']['name']} still exists after its deletion")

    async def supervise(self, job: JobView, decision: Decision | None = None) -> Decision:
        """Decide (unless ``decision`` is given) and act for one job."""
        now = self.admission.clock()
        if decision is None:
            decision = decide(job, self.cache.pods_of(job.uid), now)
        for name in decision.stale_pods:
            await self.kube.delete("Pod", job.namespace, name)
        action = decision.action
        if action is Action.PROGRESS:
            await self._progress(job, decision)
        elif action is Action.SUCCEED:
            await self._finish(job, Phase.SUCCEEDED, decision)
        elif action is Action.FAIL:
            await self._finish(job, Phase.FAILED, decision)
        elif action in (Action.RESTART, Action.TIMEOUT, Action.RESIZE):
            await self._requeue(job, decision)
        elif action is Action.SUSPEND:
            await self.admission.teardown(job)
            await self._write(
                job,
                transition(job.status, Phase.SUSPENDED, decision.reason, decision.message, now=now)
                | NOT_ADMITTED,
            )
            self.admission.notify(job, "Suspended", decision.message)
        elif action is Action.RESUME:
            await self._write(job, transition(job.status, Phase.QUEUED, decision.reason, decision.message, now=now))
        elif action is Action.EXPIRE:
            log.info("deleting %s: %s", job.key, decision.message)
            await self.kube.delete("GPUJob", job.namespace, job.name)
        return decision

    @staticmethod
    def _progress_due(job: JobView, decision: Decision) -> bool:
        """Whether ``_progress`` may have anything to do: an admission to finish, a ready count or the
        Running phase to report (most Running gangs have none of these on most passes)."""
        return bool(job.phase is Phase.ADMITTED and job.admitted_at and not job.pods_created_at) or \
            job.ready_replicas != decision.ready or (decision.running and job.phase is not Phase.RUNNING)

    async def _progress(self, job: JobView, decision: Decision) -> None:
        if job.phase is Phase.ADMITTED and job.admitted_at and not job.pods_created_at:
            current = [p for p in self.cache.pods_of(job.uid) if p.attempt == job.attempt and not p.deleting]
            placement = job.placement
            if placement is not None and len(current) < job.replicas:
                # Recorded by a leader that died during step 5: create what is missing (names are
                # deterministic and AlreadyExists is success, so nothing is duplicated).
                log.info("finishing the admission of %s (%d of %d pods seen)", job.key, len(current), job.replicas)
                error = await self.admission.create_gang(job, placement)
                if error:
                    log.error("could not create the gang of %s: %s", job.key, error)
                return
        patch: dict[str, Any] = {}
        if job.ready_replicas != decision.ready:
            patch |= status_fields(GPUJobStatus(ready_replicas=decision.ready))
        if decision.running and job.phase is not Phase.RUNNING:
            now = self.admission.clock()
            message = f"all {job.replicas} replicas running"
            patch |= transition(job.status, Phase.RUNNING, "AllReplicasRunning", message, now=now)
            patch |= status_fields(GPUJobStatus(started_at=timestamp(now)))
        if not patch:
            return
        if job.pods_created_at:
            patch["podsCreatedAt"] = job.pods_created_at  # assumed at creation, written here
        if "phase" in patch:
            self._write_behind(job, patch)
        elif not self._forming(job):
            # A ready count alone decides nothing: report it in the background lane.
            self.cache.assume(job, patch)
            self.writer.later(job, patch)

    def _forming(self, job: JobView) -> bool:
        """Admitted, its pods created less than ``READY_REPORT_AFTER_SECONDS`` ago: its ready count waits
        for the Running write (not assumed either, so a later pass still sees it differ)."""
        created = job.status_time("podsCreatedAt")
        if job.phase is not Phase.ADMITTED or created is None:
            return False
        age = (self.admission.clock() - created).total_seconds()
        return age < READY_REPORT_AFTER_SECONDS

    async def _finish(self, job: JobView, phase: Phase, decision: Decision) -> None:
        await self.admission.teardown(job, keep_finished_pods=True)
        now = self.admission.clock()
        if phase is Phase.SUCCEEDED and job.started_at is not None:
            self.admission.quota.finished_run(job, max(0.0, (now - job.started_at).total_seconds()))
        patch = transition(job.status, phase, decision.reason, decision.message, now=now)
        patch |= status_fields(GPUJobStatus(finished_at=timestamp(now), ready_replicas=decision.ready))
        if job.pods_created_at:
            # A gang that finished before a pass saw it Running never had the write that carries it.
            patch["podsCreatedAt"] = job.pods_created_at
        self._write_behind(job, patch)
        self.admission.notify(job, decision.reason, decision.message, warning=phase is Phase.FAILED)

    async def _requeue(self, job: JobView, decision: Decision) -> None:
        """Send the whole gang back to its queue: a restart (counted against ``restartLimit``), a timeout
        or displacement (its nodes excluded), or a resize (neither: the user's edit, not a failure)."""
        await self.admission.teardown(job)
        extra: dict[str, Any] = {}
        if decision.action is Action.RESTART:
            extra = status_fields(GPUJobStatus(restarts=job.restarts + 1))
        elif decision.action is Action.TIMEOUT:
            extra = status_fields(GPUJobStatus(excluded_nodes=sorted(job.excluded_nodes | decision.excluded_nodes)))
        patch = requeue_patch(job, decision.reason, decision.message, self.admission.clock(), extra=extra)
        await self._write(job, patch)
        self.admission.notify(job, decision.reason, decision.message, warning=True)
        if decision.action is not Action.RESIZE:
            metrics.GANG_RESTARTS.labels(decision.reason).inc()

    async def _write(self, job: JobView, patch: dict[str, Any]) -> None:
        self.cache.assume(job, patch)
        try:
            await self.writer.write(job, patch)
        except Exception:
            self.cache.forget(job.uid)
            raise

    def _write_behind(self, job: JobView, patch: dict[str, Any]) -> None:
        """Assume ``patch`` and write it without holding the pass: for a phase that reports what has
        happened already (Running; Succeeded or Failed once the gang is torn down), which nothing else of
        the pass or the next cycle waits for.

        The leader's loop runs the admission cycle and this pass in turn, so every write the pass awaited
        was a write the next waiting job's admission waited for too: in the short-job sweep a trial starts
        or ends every few tens of milliseconds, and each new trial waited for the previous trials'
        Running and Succeeded writes before its own cycle (benchmarks-sweep.md). The write keeps its
        place in the job's order (``StatusWriter`` takes each job's writes in turn). If it fails, the
        assumption goes and the loop is woken, so the next pass decides the job again from what the API
        says, as it would have after an awaited write that failed."""
        self.cache.assume(job, patch)

        async def confirm() -> None:
            try:
                await self.writer.write(job, patch)
            except Exception as exc:
                log.warning("writing %s of %s failed (%s); deciding it again", patch.get("phase"), job.key, exc)
                self.cache.forget(job.uid)
                self.cache.wake.set()

        self.admission.spawn(confirm())
