"""Builders for GPUJob objects and pods used by the operator's unit tests."""

from __future__ import annotations

from typing import Any

import pytest


def make_job_body(
    name: str = "train",
    *,
    namespace: str = "team-a",
    uid: str | None = None,
    replicas: int = 2,
    gpus: int = 8,
    queue: str = "team-a",
    framework: str = "none",
    status: dict[str, Any] | None = None,
    created: str = "2025-01-01T00:00:00Z",
    **spec: Any,
) -> dict[str, Any]:
    """A GPUJob object as the API server returns it."""
    return {
        "apiVersion": "kubegang.io/v1alpha1",
        "kind": "GPUJob",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": uid or f"uid-{name}",
            "generation": 1,
            "creationTimestamp": created,
        },
        "spec": {
            "replicas": replicas,
            "queue": queue,
            "framework": framework,
            "template": {
                "metadata": {"labels": {"app": "trainer"}},
                "spec": {
                    "containers": [
                        {
                            "name": "main",
                            "image": "trainer:1",
                            "env": [{"name": "USER_VAR", "value": "1"}, {"name": "RANK", "value": "bogus"}],
                            "resources": {"limits": {"nvidia.com/gpu": gpus}},
                        }
                    ]
                },
            },
            **spec,
        },
        "status": status or {},
    }


@pytest.fixture
def job_body() -> Any:
    return make_job_body


# -- in-memory fakes of the operator's own ports (kubegang.operator._ports) ------------------------

from collections.abc import Mapping, Sequence  # noqa: E402

from kubegang.admission import Preemptible, WhatIfAnswer  # noqa: E402
from kubegang.api import Placement, ReplicaPlacement  # noqa: E402
from kubegang.operator._cache import ClusterCache  # noqa: E402
from kubegang.operator._job import JobView  # noqa: E402
from kubegang.operator._ports import QueueUsage  # noqa: E402
from kubegang.operator._types import PlanResult, RepairResult, Verdict  # noqa: E402


class FakeQuota:
    """One flavour, flat queues: ``capacity`` now, ``ceiling`` ever; candidates by priority."""

    def __init__(self, capacity: dict[str, int], ceiling: dict[str, int] | None = None) -> None:
        self.capacity = capacity
        self.ceiling = ceiling or dict(capacity)
        self.held: dict[str, tuple[str, int]] = {}
        self.jobs: dict[str, JobView] = {}
        self.priority: dict[str, int] = {}

    def set_queues(self, queues: Sequence[Mapping[str, Any]]) -> list[str]:
        self.held.clear()
        return []

    def order(self, pending: Sequence[JobView]) -> list[JobView]:
        heads: dict[str, JobView] = {}
        for job in sorted(pending, key=lambda j: (-self.priority.get(j.uid, 0), j.created, j.name)):
            heads.setdefault(job.queue, job)
        return list(heads.values())

    def _used(self, queue: str, without: Sequence[str] = ()) -> int:
        return sum(g for uid, (q, g) in self.held.items() if q == queue and uid not in without)

    def _check(self, job: JobView, without: Sequence[str] = ()) -> Verdict:
        if job.total_gpus > self.ceiling.get(job.queue, 0):
            return Verdict(
                False,
                f"needs {job.total_gpus} GPUs but queue {job.queue} can never hold more than "
                f"{self.ceiling.get(job.queue, 0)}",
                never=True,
            )
        free = self.capacity.get(job.queue, 0) - self._used(job.queue, without)
        if job.total_gpus > free:
            return Verdict(False, f"needs {job.total_gpus} GPUs, {free} free")
        return Verdict(True)

    def flavor_options(self, job: JobView) -> list[JobView]:
        return [job]

    def can_admit(self, job: JobView) -> Verdict:
        return self._check(job)

    def can_admit_without(self, job: JobView, evicted: Sequence[str]) -> Verdict:
        return self._check(job, evicted)

    def admit(self, job: JobView) -> Verdict:
        verdict = self._check(job)
        if verdict.ok:
            self.held[job.uid] = (job.queue, job.total_gpus)
            self.jobs[job.uid] = job
        return verdict

    def record(self, job: JobView) -> None:
        self.held[job.uid] = (job.queue, job.total_gpus)
        self.jobs[job.uid] = job

    def release(self, job_uid: str) -> None:
        self.held.pop(job_uid, None)

    def quota_victims(self, job: JobView, candidates: Sequence[str]) -> list[str] | None:
        chosen: list[str] = []
        for uid in candidates:  # flat queues: the first candidates that free enough
            if self._check(job, chosen).ok:
                break
            chosen.append(uid)
        return chosen if self._check(job, chosen).ok else None

    def running(self) -> list[JobView]:
        return [self.jobs[uid] for uid in self.held]

    def reserve_after(self, job: JobView) -> float | None:
        return None

    def preemption_candidates(self, job: JobView) -> list[Preemptible[JobView]]:
        mine = self.priority.get(job.uid, 0)
        return [
            Preemptible(self.jobs[uid], "to make room for a higher-priority job")
            for uid, (queue, _) in self.held.items()
            if queue == job.queue and self.priority.get(uid, 0) < mine
        ]

    def usage(self) -> Mapping[str, QueueUsage]:
        return {q: QueueUsage(usage={"gpu": self._used(q)}, borrowed={}) for q in self.capacity}


class FakePlacement:
    """Nodes with free GPU counts; first-fit plans; WhatIf frees candidates in order."""

    def __init__(self, nodes: dict[str, int]) -> None:
        self.free = dict(nodes)
        self.reserved: dict[str, Placement] = {}
        self.gpus_per: dict[str, int] = {}
        self.plans: list[tuple[str, frozenset[str], str | None]] = []

    def _plan(self, job: JobView, free: dict[str, int], excluded: frozenset[str]) -> Placement | None:
        left = {n: f for n, f in free.items() if n not in excluded}
        slots = []
        for index in range(job.replicas):
            node = next((n for n in sorted(left) if left[n] >= job.gpus_per_replica), None)
            if node is None:
                return None
            left[node] -= job.gpus_per_replica
            slots.append(ReplicaPlacement(index=index, node=node, gpus=list(range(job.gpus_per_replica))))
        return Placement(pods=slots, domain="leaf-1")

    async def plan(self, job: JobView, *, excluded_nodes: frozenset[str], preferred_domain: str | None) -> PlanResult:
        self.plans.append((job.uid, excluded_nodes, preferred_domain))
        placement = self._plan(job, self.free, excluded_nodes)
        if placement is None:
            return PlanResult(None, f"needs {job.replicas} x {job.gpus_per_replica} GPUs; not enough free")
        return PlanResult(placement)

    async def reserve(self, job: JobView, placement: Placement) -> Verdict:
        for slot in placement.pods:
            self.free[slot.node] -= len(slot.gpus)
        self.reserved[job.uid] = placement
        return Verdict(True)

    async def release(self, job_uid: str) -> None:
        placement = self.reserved.pop(job_uid, None)
        if placement is not None:
            for slot in placement.pods:
                self.free[slot.node] += len(slot.gpus)

    async def repair(self, job: JobView) -> RepairResult:
        return RepairResult(self.reserved.get(job.uid))  # nothing in this fake takes reserved GPUs

    async def what_if(self, job: JobView, candidates: Sequence[JobView]) -> WhatIfAnswer:
        free = dict(self.free)
        chosen: list[str] = []
        for victim in candidates:
            if self._plan(job, free, frozenset()) is not None:
                break
            for slot in self.reserved[victim.uid].pods:
                free[slot.node] += len(slot.gpus)
            chosen.append(victim.uid)
        placement = self._plan(job, free, frozenset())
        return WhatIfAnswer(tuple(chosen), placement.nodes) if placement is not None else WhatIfAnswer(None)


class FakeKube:
    """Records writes; optionally fails the creation of one named object."""

    def __init__(self) -> None:
        self.objects: dict[tuple[str, str, str], dict[str, Any]] = {}
        self.deleted: list[tuple[str, str, str]] = []
        self.status: dict[str, list[dict[str, Any]]] = {}
        self.events: list[tuple[str, str, str, bool]] = []
        self.fail_create: str | None = None
        self.background_writes = 0

    async def create(self, manifest: Mapping[str, Any]) -> bool:
        meta = manifest["metadata"]
        key = (manifest["kind"], meta.get("namespace", ""), meta["name"])
        if meta["name"] == self.fail_create:
            raise RuntimeError(f"admission webhook denied {meta['name']}")
        if key in self.objects:
            return False
        self.objects[key] = dict(manifest)
        return True

    async def delete(self, kind: str, namespace: str, name: str) -> None:
        self.deleted.append((kind, namespace, name))
        self.objects.pop((kind, namespace, name), None)

    async def reserve_background(self) -> None:
        self.background_writes += 1

    async def patch_job_status(self, job: JobView, patch: Mapping[str, Any], *, prepaid: bool = False) -> None:
        self.status.setdefault(job.key, []).append(dict(patch))

    async def patch_queue_status(self, name: str, patch: Mapping[str, Any]) -> None:
        self.status.setdefault(f"queue/{name}", []).append(dict(patch))

    async def event(self, job: JobView, reason: str, message: str, *, warning: bool = False) -> None:
        self.events.append((job.key, reason, message, warning))

    def pods(self) -> list[dict[str, Any]]:
        return [o for (kind, _, _), o in self.objects.items() if kind == "Pod"]


@pytest.fixture
def cache() -> ClusterCache:
    return ClusterCache()


class World:
    """A cache, the three fakes, and the admission and supervisor wired to them."""

    def __init__(self, capacity: dict[str, int], nodes: dict[str, int], ceiling: dict[str, int] | None) -> None:
        from kubegang.operator._admission import Admission
        from kubegang.operator._supervisor import Supervisor

        self.cache = ClusterCache()
        self.quota = FakeQuota(capacity, ceiling)
        self.placement = FakePlacement(nodes)
        self.kube = FakeKube()
        self.admission = Admission(self.cache, self.quota, self.placement, self.kube)
        self.supervisor = Supervisor(self.admission)

    async def cycle(self) -> Any:
        """One admission cycle, then wait for the gangs it created and the reports it queued."""
        outcomes = await self.admission.run_cycle()
        await self.admission.settle()
        return outcomes

    async def supervise(self, job: JobView | None) -> Any:
        """Supervise one job and wait for what it left to the background."""
        assert job is not None
        decision = await self.supervisor.supervise(job)
        await self.admission.settle()
        return decision

    def submit(self, body: dict[str, Any], priority: int = 0) -> JobView:
        view = self.cache.upsert_job(body)
        assert view is not None
        self.quota.priority[view.uid] = priority
        return view

    def echo_pods(self, phase: str = "Running", bound: bool = True) -> None:
        """Let the watch deliver every created pod back to the cache, as kwok would run them."""
        for pod in self.kube.pods():
            body = {**pod, "status": {"phase": phase}, "spec": {**pod["spec"]}}
            if bound:
                body["spec"]["nodeName"] = pod["metadata"]["annotations"]["kubegang.io/node"]
            self.cache.upsert_pod(body)

    def drop_deleted_pods(self) -> None:
        """The watch reports the deleted pods gone."""
        for kind, ns, name in self.kube.deleted:
            if kind == "Pod":
                for uid in list(self.cache.pods):
                    self.cache.remove_pod(
                        {"metadata": {"name": name, "namespace": ns, "labels": {"kubegang.io/job-uid": uid}}}
                    )

    def last_status(self, key: str) -> dict[str, Any]:
        merged: dict[str, Any] = {}
        for patch in self.kube.status[key]:
            merged.update(patch)
        return merged


@pytest.fixture
def make_world() -> Any:
    def make(capacity: dict[str, int], nodes: dict[str, int], ceiling: dict[str, int] | None = None) -> World:
        return World(capacity, nodes, ceiling)

    return make
