"""The production engine, rebuilt in the plugin from the API objects the user could read.

Nothing here decides: the quota answers are the operator's ``QuotaBook`` over ``kubegang.quota``, the
placement answers the extender's ``Ledger`` (fed exactly as its watches feed it), and "would it
start now" is one pass of the core ``AdmissionCycle`` driven against both (``dry_run``), the cycle
the operator's leader runs. The plugin only reads the outcome back.

Where RBAC hides other namespaces, the quota tree still counts their GPUs: each leaf's usage as the
operator last wrote it in ``GPUQueue.status.usage`` is charged to the tree as one anonymous holder,
less what the visible jobs account for, so refusals name the same numbers as the operator's.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping, Sequence
from typing import Any

from kubegang.admission import (
    AdmissionCycle,
    Admit,
    Effect,
    Entry,
    Evict,
    Plan,
    Release,
    Reserve,
    WhatIf,
    WhatIfAnswer,
    run_async,
)
from kubegang.api import Placement
from kubegang.extender import JOB_UID_LABEL, Ledger, PlacementClient, ReserveOutcome, WhatIfOutcome
from kubegang.extender._authority import RepairOutcome
from kubegang.extender._watch import gpunode_status
from kubegang.kubectl._objects import ClusterObjects
from kubegang.levels import Level
from kubegang.operator._cache import ClusterCache
from kubegang.operator._extender_placement import ExtenderPlacement, gang_request
from kubegang.operator._job import JobSpecError, JobView, job_view
from kubegang.operator._quota_book import QuotaBook
from kubegang.operator._watches import GPU_PRODUCT_LABEL
from kubegang.placement import MILLI, GangRequest, PlanResult, PodAssignment, Unplaceable
from kubegang.placement import Placement as CorePlacement
from kubegang.quota import QueuePosition

log = logging.getLogger("kubegang.kubectl")

HIDDEN_HOLDER = "kubectl-gang/hidden"
"""Prefix of the anonymous quota holders standing for the jobs the user cannot see."""
DRY_RUN_TTL_SECONDS = 60.0


class LedgerClient(PlacementClient):
    """The extender's gRPC client, answered in process by a :class:`Ledger`: the same calls,
    so the operator's ``ExtenderPlacement`` drives it unchanged."""

    def __init__(self, ledger: Ledger) -> None:  # no channel: nothing goes over the network
        self.ledger = ledger
        self.refused: dict[str, Unplaceable] = {}
        """Job UID -> the last Plan refusal (best domain and how many pods it holds)."""

    async def close(self) -> None:
        return None

    async def plan(self, gang: GangRequest, *, namespace: str = "", name: str = "",
                   deadline_s: float | None = None) -> PlanResult:
        return (await self.plan_at(gang, namespace=namespace, name=name, deadline_s=deadline_s))[0]

    async def plan_at(self, gang: GangRequest, *, namespace: str = "", name: str = "",
                      deadline_s: float | None = None) -> tuple[PlanResult, int | None]:
        result = self.ledger.plan(gang)
        if isinstance(result, Unplaceable):
            self.refused[gang.id] = result
        return result, self.ledger.room()

    async def room(self, *, deadline_s: float | None = None) -> int | None:
        return self.ledger.room()

    async def reserve(self, gang: GangRequest, plan: CorePlacement | None = None, *, ttl_seconds: int = 0,
                      namespace: str = "", name: str = "", deadline_s: float | None = None) -> ReserveOutcome:
        return self.ledger.reserve(gang, plan, ttl_seconds)

    async def release(self, job_uid: str, *, deadline_s: float | None = None) -> int:
        return self.ledger.release(job_uid)

    async def repair(self, gang: GangRequest, *, ttl_seconds: int = 0, namespace: str = "", name: str = "",
                     deadline_s: float | None = None) -> RepairOutcome:
        return self.ledger.repair(gang, ttl_seconds)

    async def what_if(self, gang: GangRequest, candidates: list[str], *, gone: Sequence[str] = (),
                      namespace: str = "", name: str = "", deadline_s: float | None = None) -> WhatIfOutcome:
        return self.ledger.what_if(gang, candidates, gone)


class Engine:
    """Quota book, ledger and cycle over one set of :class:`ClusterObjects`."""

    def __init__(self, objects: ClusterObjects) -> None:
        self.objects = objects
        # A user who may not list PriorityClasses has none here: a job's class is then taken on trust, not
        # held back as missing (the operator, which lists them all, knows whether it exists).
        self.cache = ClusterCache(priority_classes_listed=not self.priority_classes_hidden)
        self.invalid: dict[str, str] = {}
        """``namespace/name`` -> why the operator cannot read that GPUJob."""
        self._added: list[Mapping[str, Any]] = []
        """Jobs added after reading (``what-if``'s manifest)."""
        for queue in objects.queues:
            self.cache.upsert_queue(queue)
        for pc in objects.priority_classes:
            name = (pc.get("metadata") or {}).get("name")
            if name:
                self.cache.set_priority(str(name), int(pc.get("value") or 0))
        for node in objects.nodes:
            meta = node.get("metadata") or {}
            self.cache.set_node_product(str(meta.get("name", "")), (meta.get("labels") or {}).get(GPU_PRODUCT_LABEL))
        for body in objects.jobs:
            self.add_job(body)
        for pod in objects.pods:
            self.cache.upsert_pod(pod)
            # As the operator's watch does: a pod group is complete, and so offered to the cycle, by its pods.
            self.cache.upsert_source_pod(pod)
        self.book = QuotaBook(self.cache.priority_of, lambda: self.cache.gpu_products)
        self.problems = self.book.set_queues(list(self.cache.queues.values()))
        for job in self.cache.holding():
            self.book.record(job)
        self._charge_hidden_usage()
        self.ledger = Ledger()
        self.ledger.replace_all(
            objects.nodes,
            {str(o["metadata"]["name"]): s for o in objects.gpunodes if (s := gpunode_status(o)) is not None},
            objects.pods,
            objects.jobs,  # an admitted job's status.placement is its durable reservation
        )
        self.ledger.synced = True
        self.reservations = self._replay_reservations()
        """Job UIDs whose extender reservation (from ``/debug/snapshot``) is held in this ledger."""
        self.client = LedgerClient(self.ledger)

    # -- inputs ----------------------------------------------------------------------------------
    def add_job(self, body: Mapping[str, Any]) -> JobView | None:
        """Add a GPUJob object (as listed, or a manifest for ``what-if``); None when it is invalid."""
        meta = body.get("metadata") or {}
        view = self.cache.upsert_job(body)
        if body not in self.objects.jobs:
            self._added.append(body)
        if view is None:
            key = f"{meta.get('namespace')}/{meta.get('name')}"
            try:
                job_view(body)
            except JobSpecError as exc:
                self.invalid[key] = str(exc)
        return view

    @property
    def placement_unseen(self) -> str | None:
        """Why placement cannot be answered at all from what the user may read (no Nodes), else None."""
        if "nodes" in self.objects.hidden:
            return f"nodes are not visible to you ({self.objects.hidden['nodes']})"
        return None

    @property
    def placement_partial(self) -> str | None:
        """Why placement answers may be too optimistic (GPUs held by pods the user cannot see), else None."""
        if "pods" in self.objects.hidden:
            return "other namespaces' pods are not visible to you: the GPUs they hold may count as free here"
        return None

    @property
    def priority_classes_hidden(self) -> bool:
        """Whether the user could not list PriorityClasses (so a class missing here may well exist)."""
        return "priorityclasses" in self.objects.hidden

    def missing_priority_class(self, job: JobView) -> str | None:
        """Why ``job`` is not admissible because its ``spec.priorityClassName`` names no PriorityClass (the
        operator's own ``PriorityClassNotFound`` message), else None. Never said where the user could
        not list the classes: the cache then takes every name on trust."""
        return next((w.error for w in self.cache.waiting_on_priority_class() if w.uid == job.uid), None)

    @property
    def jobs_hidden(self) -> bool:
        """Whether other namespaces' GPUJobs were hidden from the user."""
        return "gpujobs" in self.objects.hidden

    def _charge_hidden_usage(self) -> None:
        if not self.jobs_hidden:
            return
        tree = self.book.tree
        for body in self.cache.queues.values():
            name = str(body["metadata"]["name"])
            if name not in tree.leaves:
                continue
            visible = tree.usage(name)
            for row in (body.get("status") or {}).get("usage") or []:
                flavor, gpus = str(row.get("flavor")), float(row.get("gpus") or 0)
                rest = round(gpus * MILLI) - visible.get(flavor, 0)
                if rest > 0:
                    tree.record(f"{HIDDEN_HOLDER}/{name}/{flavor}", name, {flavor: rest})

    def _replay_reservations(self) -> set[str]:
        """Hold again the reservations the extender's snapshot lists (they live only in its memory)."""
        held: set[str] = set()
        extender = self.objects.extender or {}
        for uid, raw in (extender.get("reservations") or {}).items():
            job = self.cache.job(uid)
            if job is None:
                continue
            gang = gang_request(job)
            assignments = tuple(PodAssignment(int(a["pod"]), str(a["node"]), tuple(int(g) for g in a["gpus"]),
                                              job.gpu_milli or MILLI) for a in raw.get("placement") or [])
            placement = CorePlacement(gang.id, assignments, gang.required_level or Level.CLUSTER, "", 0.0, True)
            outcome = self.ledger.reserve(gang, placement, DRY_RUN_TTL_SECONDS * 60)
            if isinstance(outcome.result, CorePlacement):
                held.add(uid)
            else:
                log.warning("reservation of %s from the snapshot not replayed: %s", job.key, outcome.result.reason)
        return held

    # -- reading -----------------------------------------------------------------------------------
    def find(self, namespace: str, name: str) -> JobView | None:
        return next((j for j in self.cache.all_jobs() if j.namespace == namespace and j.name == name), None)

    def visible(self, uid: str) -> JobView | None:
        """A job the user may see (``HIDDEN_HOLDER`` entries and unknown UIDs are None)."""
        return self.cache.job(uid)

    def pending(self) -> list[JobView]:
        return self.cache.pending()

    def positions(self) -> dict[str, QueuePosition]:
        """Every visible waiting job's position, by the core rule (``kubegang.quota.queue_positions``)."""
        return self.book.positions(self.pending())

    def priority(self, job: JobView) -> int:
        return self.book.priority(job)

    def gpus(self, job: JobView) -> float:
        return float(job.spec.total_gpus())

    # -- one admission cycle, answered here --------------------------------------------------------
    def dry_run(self) -> dict[str, Entry[JobView, Placement]]:
        """One pass of the core admission cycle over the waiting jobs, against this quota book and
        ledger: what the operator's next cycle would decide, by UID. The pass admits and evicts on an
        engine of its own, rebuilt from the same objects, so this one stays as it was read.

        Placement effects go through the operator's own adapter (``ExtenderPlacement``) over
        :class:`LedgerClient`, so every conversion is the operator's and every answer the extender's."""
        scratch = Engine(self.objects)
        for body in self._added:
            scratch.add_job(body)
        entries = scratch._cycle()
        self.client.refused.update(scratch.client.refused)
        return entries

    def reservations_held(self) -> dict[str, frozenset[str]]:
        """Job UID -> the nodes it holds by backfill reservation, as the operator wrote them
        (``status.queuePosition.reservedNodes``; the cycle keeps them in memory)."""
        out: dict[str, frozenset[str]] = {}
        for job in self.pending():
            position = job.status.get("queuePosition")
            nodes = position.get("reservedNodes") if isinstance(position, Mapping) else None
            if nodes:
                out[job.uid] = frozenset(str(n) for n in nodes)
        return out

    def _cycle(self) -> dict[str, Entry[JobView, Placement]]:
        cycle: AdmissionCycle[JobView, Placement] = AdmissionCycle(self.book)
        self.book.begin_cycle()  # as the operator's cycle does: the held gangs read as they are now
        for uid, nodes in self.reservations_held().items():
            try:  # later jobs are placed around them, as in the operator's cycle
                cycle.backfill.reserve(uid, nodes)
            except ValueError as exc:
                log.warning("backfill reservation of %s not replayed: %s", uid, exc)
        port = ExtenderPlacement(self.client, reservation_ttl_seconds=int(DRY_RUN_TTL_SECONDS))

        async def answer(effect: Effect[JobView, Placement]) -> Any:
            if isinstance(effect, Plan):
                return await port.plan(effect.job, excluded_nodes=effect.excluded_nodes,
                                       preferred_domain=effect.preferred_domain)
            if isinstance(effect, Reserve):
                return await port.reserve(effect.job, effect.placement)
            if isinstance(effect, WhatIf):
                return await port.what_if(effect.job, effect.candidates, excluded_nodes=effect.excluded_nodes,
                                          gone=effect.gone)
            if isinstance(effect, Release):
                await port.release(effect.job.uid)
                return None
            if isinstance(effect, Evict):
                self.forget_gang(effect.victim.uid)
                return None
            if isinstance(effect, Admit):
                return None
            raise TypeError(f"unknown effect {effect!r}")

        cycle_run = cycle.schedule(self.pending(), holds_pods=lambda uid: bool(self.cache.pods.get(uid)))
        entries = asyncio.run(run_async(cycle_run, answer))
        return {entry.job.uid: entry for entry in entries}

    def blocked(self, uid: str) -> Unplaceable | None:
        """What the placer said when it last found no place for ``uid`` (its best domain, the pods it holds)."""
        return self.client.refused.get(uid)

    def what_if(self, job: JobView, candidates: Sequence[JobView], *, gone: Sequence[JobView] = ()) -> WhatIfAnswer:
        """The extender's ``WhatIf`` on this ledger, through the operator's adapter (``gone``: as
        :attr:`kubegang.admission.WhatIf.gone`)."""
        port = ExtenderPlacement(self.client)
        return asyncio.run(port.what_if(job, candidates, gone=gone))

    def forget_gang(self, uid: str) -> None:
        """As if the gang's pods were gone: its GPUs and its quota are free (an eviction)."""
        for pod in self.objects.pods:
            labels = (pod.get("metadata") or {}).get("labels") or {}
            if labels.get(JOB_UID_LABEL) == uid:
                self.ledger.delete_pod(str(pod["metadata"]["uid"]))
        self.ledger.release(uid)
        self.book.release(uid)
