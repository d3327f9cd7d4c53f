"""``ExtenderPlacement``: the operator's PlacementPort over the extender's gRPC ``PlacementClient``.

Translates jobs into the core's ``GangRequest``, and placements between the API's ``Placement`` (what
``status.placement`` records) and the core's with the extender's one conversion (``api_placement`` /
``core_placement``). Reserve sends the placement the cycle is about to record, so nothing planned is
cached here: what is reserved is what the status says. An
unreachable or refusing extender is an answer ("waiting for the extender: ..."), never an exception
that would stop the admission cycle.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import grpc

from kubegang.admission import WhatIfAnswer
from kubegang.api import Placement
from kubegang.extender import PlacementClient, api_placement, core_placement
from kubegang.levels import Level
from kubegang.operator._job import JobView
from kubegang.operator._types import PlanResult, RepairResult, Verdict
from kubegang.placement import GangRequest
from kubegang.placement import Placement as CorePlacement

log = logging.getLogger("kubegang.operator.placement")


def gang_request(
    job: JobView, excluded_nodes: frozenset[str] = frozenset(), preferred_domain: str | None = None
) -> GangRequest:
    """The core GangRequest of ``job`` (id = job UID)."""
    pod_spec = job.template.get("spec") or {}
    return GangRequest(
        id=job.uid,
        pods=job.replicas,
        gpus_per_pod=job.gpus_per_replica,
        gpu_fraction_milli=job.gpu_milli,
        cpu_milli=job.pod.cpu_milli,
        memory_mib=job.pod.memory_mib,
        gpu_product=job.gpu_product,
        node_selector=dict(pod_spec.get("nodeSelector") or {}),
        tolerations=job.tolerations,
        excluded_nodes=excluded_nodes,
        required_level=Level.parse(job.spec.topology.required) if job.spec.topology.required else None,
        preferred_level=Level.parse(job.spec.topology.preferred) if job.spec.topology.preferred else None,
        preferred_domain=preferred_domain,
    )


class ExtenderPlacement:
    """PlacementPort backed by the extender."""

    def __init__(self, client: PlacementClient, *, reservation_ttl_seconds: int = 120) -> None:
        self.client = client
        self.reservation_ttl_seconds = reservation_ttl_seconds
        self._room_unread = False
        """The last ``Room`` call failed (its warning is logged once per outage)."""

    async def plan(self, job: JobView, *, excluded_nodes: frozenset[str], preferred_domain: str | None) -> PlanResult:
        gang = gang_request(job, excluded_nodes, preferred_domain)
        try:
            result, room = await self.client.plan_at(gang, namespace=job.namespace, name=job.name)
        except grpc.aio.AioRpcError as exc:
            return PlanResult(None, f"extender unavailable ({exc.code().name}): {exc.details()}")
        if isinstance(result, CorePlacement):
            return PlanResult(api_placement(result))
        return PlanResult(None, result.reason, never=result.never, room=room)

    async def room(self) -> int | None:
        try:
            room = await self.client.room()
        except grpc.aio.AioRpcError as exc:
            # No epoch: this cycle asks every question again, as before the epoch existed. Said once per
            # outage: the Plans that follow put the extender's state in every waiting job's condition.
            if not self._room_unread:
                log.warning("reading the extender's room epoch failed (%s): %s", exc.code().name, exc.details())
            self._room_unread = True
            return None
        if self._room_unread:
            log.info("the extender's room epoch is read again")
        self._room_unread = False
        return room

    async def reserve(self, job: JobView, placement: Placement) -> Verdict:
        gang = gang_request(job)
        try:
            outcome = await self.client.reserve(
                gang, core_placement(gang, placement), ttl_seconds=self.reservation_ttl_seconds,
                namespace=job.namespace, name=job.name,
            )
        except grpc.aio.AioRpcError as exc:
            return Verdict(False, f"extender unavailable ({exc.code().name}): {exc.details()}")
        if not isinstance(outcome.result, CorePlacement):
            return Verdict(False, outcome.result.reason)
        if api_placement(outcome.result).pods != placement.pods:
            # The extender re-planned (the plan went stale); the recorded placement must be what is held.
            await self.release(job.uid)
            return Verdict(False, "the planned GPUs were taken before they could be reserved")
        return Verdict(True)

    async def release(self, job_uid: str) -> None:
        try:
            await self.client.release(job_uid)
        except grpc.aio.AioRpcError as exc:
            # The reservation lapses on its own (TTL); log so a stuck extender is visible.
            log.error("releasing the reservation of job %s failed: %s", job_uid, exc.details())

    async def repair(self, job: JobView) -> RepairResult:
        try:
            outcome = await self.client.repair(
                gang_request(job, job.excluded_nodes), ttl_seconds=self.reservation_ttl_seconds,
                namespace=job.namespace, name=job.name,
            )
        except grpc.aio.AioRpcError as exc:
            log.error("Repair for %s failed: %s", job.key, exc.details())
            return RepairResult(None, (), f"extender unavailable ({exc.code().name})")
        if isinstance(outcome.result, CorePlacement):
            return RepairResult(api_placement(outcome.result), outcome.displaced)
        return RepairResult(None, outcome.displaced, outcome.result.reason)

    async def what_if(self, job: JobView, candidates: Sequence[JobView], *,
                      excluded_nodes: frozenset[str] = frozenset(), gone: Sequence[JobView] = ()) -> WhatIfAnswer:
        try:
            outcome = await self.client.what_if(
                gang_request(job, excluded_nodes), [c.uid for c in candidates], gone=[g.uid for g in gone],
                namespace=job.namespace, name=job.name,
            )
        except grpc.aio.AioRpcError as exc:
            log.error("WhatIf for %s failed: %s", job.key, exc.details())
            return WhatIfAnswer(None)
        if not isinstance(outcome.result, CorePlacement):
            return WhatIfAnswer(None)
        # Empty victims: placeable without evicting anyone.
        return WhatIfAnswer(tuple(outcome.victims), frozenset(outcome.result.nodes))
