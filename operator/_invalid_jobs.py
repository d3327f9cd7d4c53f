"""Telling the owner of a GPUJob the operator cannot act on what is wrong, on the job itself.

The schema refuses most bad input at ``kubectl apply``, but not all of it: the pod template keeps
unknown fields (a toleration ``operator: Exist``), and objects written by a client without the schema
(an older CRD) reach the watch as they are. Such a job is in no queue and holds nothing; without a
report its owner would see an empty status for ever. So the leader writes it Unschedulable with reason
``InvalidSpec`` and the error, which names the field, plus a Warning Event: once per spec, since the
report stays until the job is edited (a new generation is read afresh).

A job that holds an admission when its spec becomes unreadable keeps running as its last readable spec
(``ClusterCache.upsert_job``), and a finished one keeps its outcome: moving either to Unschedulable
would say that nothing runs while its pods do (or undo a Succeeded). Its report is the Warning Event
alone, once per spec and error for this leader; the status's ``observedGeneration`` stays at the spec
the operator acts on. One that holds an admission and was never readable (nothing to keep) has its
quota counted from its status (``status.totalGPUs`` in ``spec.queue``), and its Event says so, or says
it is not counted when even those cannot be read.

A readable job whose ``spec.priorityClassName`` names no PriorityClass waits the same way, with reason
``PriorityClassNotFound`` (``ClusterCache.waiting_on_priority_class``): the API server would refuse its
pods, so it is not admitted until the class exists, and it is admitted then without any edit.
"""

from __future__ import annotations

import datetime as dt
import logging

from kubegang.operator._cache import ClusterCache, InvalidJob
from kubegang.operator._conditions import Phase, transition
from kubegang.operator._ports import KubePort

__all__ = ["InvalidJobReporter"]

log = logging.getLogger(__name__)


class InvalidJobReporter:
    """Writes each invalid job's report once (per UID, generation, error and kind of report)."""

    def __init__(self, cache: ClusterCache, kube: KubePort) -> None:
        self.cache = cache
        self.kube = kube
        self._written: set[tuple[str, int | None, str, bool]] = set()
        """What this leader wrote (``InvalidJob.report_key``), so a report is not written again before
        its echo arrives, and an Event-only report not again at all."""

    def _wanted(self) -> list[InvalidJob]:
        return [*self.cache.invalid_jobs.values(), *self.cache.waiting_on_priority_class()]

    def due(self) -> list[InvalidJob]:
        """The jobs whose report is not written yet (their status does not say it, or, for an Event-only
        report, this leader has not recorded it)."""
        return [job for job in self._wanted() if not job.reported and job.report_key not in self._written]

    async def report(self, now: dt.datetime | None = None) -> int:
        """Write every due report; returns how many were written. A failed write is logged and tried
        again on a later step."""
        written = 0
        wanted = self._wanted()
        for job in wanted:
            if job.reported or job.report_key in self._written:
                continue
            involved = {"apiVersion": "kubegang.io/v1alpha1", "kind": "GPUJob", "name": job.name,
                        "namespace": job.namespace, "uid": job.uid}
            if job.leave_phase:
                log.warning("GPUJob %s/%s: %s", job.namespace, job.name, _event_only(job))
                self._written.add(job.report_key)
                written += 1
                await self.kube.event_on(involved, job.reason, _event_only(job), warning=True)
                continue
            patch = transition(job.status, Phase.UNSCHEDULABLE, job.reason, job.error,
                               now=now, observed_generation=job.generation)
            try:
                await self.kube.patch_named_job_status(job.namespace, job.name, patch)
            except Exception:
                log.exception("reporting the GPUJob %s/%s (%s) failed; retrying", job.namespace, job.name,
                              job.reason.value)
                continue
            self._written.add(job.report_key)
            written += 1
            await self.kube.event_on(involved, job.reason, job.error, warning=True)
        # Forget what no longer needs remembering (the job was edited, mended or deleted).
        self._written &= {job.report_key for job in wanted}
        return written


def _event_only(job: InvalidJob) -> str:
    """The Event of a job whose phase is left alone: the error, and what the operator does meanwhile."""
    edit = f"generation {job.generation}" if job.generation is not None else "the edit"
    if job.kept_generation is not None:
        return (f"{job.error}; {edit} is not applied: the gang goes on (counted in its queue, its pods "
                f"supervised) as generation {job.kept_generation} until the spec is fixed")
    phase = job.status.get("phase")
    if phase in {p.value for p in (Phase.SUCCEEDED, Phase.FAILED)}:
        return f"{job.error}; the job has {str(phase).lower()}, and that stands"
    if job.counted is not None:
        held = job.counted
        return (f"{job.error}; its pods are left as they are and the operator does not supervise the gang until "
                f"the spec is fixed, but its quota is counted from its status: {held.gpus} GPUs "
                f"(status.totalGPUs) in queue {held.queue}")
    why = f" ({job.uncounted})" if job.uncounted else ""
    return (f"{job.error}; its pods are left as they are, but the operator neither counts its quota nor "
            f"supervises the gang until the spec is fixed{why}")
