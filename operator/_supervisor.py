"""Carries out the gang state machine's decisions for every job (the leader's second loop).

``_lifecycle.decide`` says what to do; this module does it against the ports: delete the whole gang,
release its reservation and quota, write status, record events, count restarts. It also finishes
admissions a previous leader recorded but did not get to create pods for (step 5 of the cycle).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from kubegang.operator import _metrics as metrics
from kubegang.operator._admission import Admission, requeue_patch
from kubegang.operator._conditions import Phase, now_rfc3339, transition
from kubegang.operator._job import JobView
from kubegang.operator._lifecycle import Action, Decision, decide

log = logging.getLogger("kubegang.operator.supervisor")


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

    async def run_pass(self) -> float | None:
        """Look at every job once; returns the seconds until a timer is due (None: no timer)."""
        slots = asyncio.Semaphore(self.concurrency)

        async def act(job: JobView, decision: Decision) -> None:
            async with slots:
                try:
                    await self.supervise(job, decision)
                except Exception:
                    log.exception("supervising %s failed; retrying next pass", job.key)

        now = self.admission.clock()
        dues: list[float] = []
        work = []
        for job in list(self.cache.all_jobs()):
            if self.admission.creating(job.uid):
                continue  # its pods are being created; look again once they are
            decision = decide(job, self.cache.pods_of(job.uid), now)
            if decision.recheck_after is not None:
                dues.append(decision.recheck_after)
            if decision.action is not Action.NONE or decision.stale_pods:
                work.append(act(job, decision))
        await asyncio.gather(*work)
        return min(dues, default=None)

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
        elif action in (Action.RESTART, Action.TIMEOUT):
            await self._requeue(job, decision)
        elif action is Action.SUSPEND:
            await self.admission.teardown(job)
            await self._write(
                job,
                transition(job.status, Phase.SUSPENDED, decision.reason, decision.message, now=now)
                | {"admittedAt": None, "podsCreatedAt": None, "readyReplicas": 0},
            )
            self.admission.notify(job, "Suspended", decision.message)
        elif action is Action.RESUME:
            await self._write(job, transition(job.status, Phase.QUEUED, decision.reason, decision.message, now=now))
        elif action is Action.EXPIRE:
            log.info("deleting %s: %s", job.key, decision.message)
            await self.kube.delete("GPUJob", job.namespace, job.name)
        return decision

    async def _progress(self, job: JobView, decision: Decision) -> None:
        if job.phase is Phase.ADMITTED and job.admitted_at and not job.status.get("podsCreatedAt"):
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
        if job.status.get("readyReplicas") != decision.ready:
            patch["readyReplicas"] = decision.ready
        if decision.running and job.phase is not Phase.RUNNING:
            now = self.admission.clock()
            message = f"all {job.replicas} replicas running"
            patch |= transition(job.status, Phase.RUNNING, "AllReplicasRunning", message, now=now)
            patch["startedAt"] = now_rfc3339(now)
        if not patch:
            return
        if job.status.get("podsCreatedAt"):
            patch["podsCreatedAt"] = job.status["podsCreatedAt"]  # assumed at creation, written here
        if "phase" in patch:
            await self._write(job, patch)
        else:
            # A ready count alone decides nothing: report it in the background lane.
            self.cache.assume(job, patch)
            self.writer.later(job, patch)

    async def _finish(self, job: JobView, phase: Phase, decision: Decision) -> None:
        await self.admission.teardown(job, keep_finished_pods=True)
        now = self.admission.clock()
        patch = transition(job.status, phase, decision.reason, decision.message, now=now)
        patch.update({"finishedAt": now_rfc3339(now), "readyReplicas": decision.ready})
        await self._write(job, patch)
        self.admission.notify(job, decision.reason, decision.message, warning=phase is Phase.FAILED)

    async def _requeue(self, job: JobView, decision: Decision) -> None:
        await self.admission.teardown(job)
        extra: dict[str, Any] = {}
        if decision.action is Action.RESTART:
            extra["restarts"] = job.restarts + 1
        else:
            excluded = set(job.status.get("excludedNodes") or ()) | decision.excluded_nodes
            extra["excludedNodes"] = sorted(excluded)
        patch = requeue_patch(job, decision.reason, decision.message, self.admission.clock(), extra=extra)
        await self._write(job, patch)
        self.admission.notify(job, decision.reason, decision.message, warning=True)
        metrics.GANG_RESTARTS.labels(decision.reason).inc()

    async def _write(self, job: JobView, patch: dict[str, Any]) -> None:
        self.cache.assume(job, patch)
        try:
            await self.writer.write(job, patch)
        except Exception:
            self.cache.forget(job.uid)
            raise
