"""Telling the owner of a GPUJob the operator cannot read what is wrong, on the job itself.

The schema refuses most bad input at ``kubectl apply``, but not all of it: the pod template keeps
unknown fields (a toleration ``operator: Exist``), and objects written by a client without the schema
(an older CRD) reach the watch as they are. Such a job is in no queue and holds nothing; without a
report its owner would see an empty status for ever. So the leader writes it Unschedulable with reason
``InvalidSpec`` and the error, which names the field, plus a Warning Event: once per spec, since the
report stays until the job is edited (a new generation is read afresh).
"""

from __future__ import annotations

import datetime as dt
import logging

from kubegang.admission import WaitReason
from kubegang.operator._cache import ClusterCache, InvalidJob
from kubegang.operator._conditions import Phase, transition
from kubegang.operator._ports import KubePort

__all__ = ["InvalidJobReporter"]

log = logging.getLogger(__name__)


class InvalidJobReporter:
    """Writes each invalid job's report once (per UID, generation and error)."""

    def __init__(self, cache: ClusterCache, kube: KubePort) -> None:
        self.cache = cache
        self.kube = kube
        self._written: set[tuple[str, int | None, str]] = set()
        """What this leader wrote, so a report is not written again before its echo arrives."""

    def due(self) -> list[InvalidJob]:
        """The invalid jobs whose status does not say their error yet."""
        return [job for job in self.cache.invalid_jobs.values()
                if not job.reported and (job.uid, job.generation, job.error) not in self._written]

    async def report(self, now: dt.datetime | None = None) -> int:
        """Write every due report; returns how many were written. A failed write is logged and tried
        again on a later step."""
        written = 0
        for job in self.due():
            patch = transition(job.status, Phase.UNSCHEDULABLE, WaitReason.INVALID_SPEC, job.error,
                               now=now, observed_generation=job.generation)
            try:
                await self.kube.patch_named_job_status(job.namespace, job.name, patch)
            except Exception:
                log.exception("reporting the invalid GPUJob %s/%s failed; retrying", job.namespace, job.name)
                continue
            self._written.add((job.uid, job.generation, job.error))
            written += 1
            await self.kube.event_on({"apiVersion": "kubegang.io/v1alpha1", "kind": "GPUJob", "name": job.name,
                                      "namespace": job.namespace, "uid": job.uid},
                                     WaitReason.INVALID_SPEC, job.error, warning=True)
        # Forget what no longer needs remembering (the job was edited, mended or deleted).
        current = {(j.uid, j.generation, j.error) for j in self.cache.invalid_jobs.values()}
        self._written &= current
        return written
