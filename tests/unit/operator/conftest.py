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


# -- the production admission over the real quota tree and ledger --------------------------------

from collections.abc import Mapping, Sequence  # noqa: E402

from kubegang.extender._authority import RepairOutcome, ReserveOutcome, WhatIfOutcome  # noqa: E402
from kubegang.extender._ledger import Ledger  # noqa: E402
from kubegang.operator._cache import ClusterCache  # noqa: E402
from kubegang.operator._extender_placement import ExtenderPlacement  # noqa: E402
from kubegang.operator._job import JobView  # noqa: E402
from kubegang.operator._quota_book import QuotaBook  # noqa: E402
from kubegang.placement import GangRequest, Placement, PlanResult  # noqa: E402
from kubegang.restclient import ApiStatusError  # noqa: E402


class InProcessClient:
    """The extender's ``PlacementClient`` surface, answered by a real ``Ledger`` in this process.

    It stands where gRPC would: every request is recorded (``requests``: verb and GangRequest), the
    answer is the ledger's.
    """

    def __init__(self, ledger: Ledger) -> None:
        self.ledger = ledger
        self.requests: list[tuple[str, GangRequest]] = []
        self.fail_for: set[str] = set()
        """Job names whose Plan raises, as a bug in a conversion would."""
        self.rooms = 0
        """``Room`` calls (one before each cycle that has waiting jobs)."""

    def _check(self, name: str) -> None:
        if name in self.fail_for:
            raise RuntimeError(f"injected failure planning {name}")

    def last(self, verb: str) -> GangRequest:
        """The last request of ``verb`` ("plan", "reserve", "what_if", "repair")."""
        return next(gang for v, gang in reversed(self.requests) if v == verb)

    async def plan(self, gang: GangRequest, *, namespace: str = "", name: str = "") -> PlanResult:
        return (await self.plan_at(gang, namespace=namespace, name=name))[0]

    async def plan_at(self, gang: GangRequest, *, namespace: str = "", name: str = "") -> tuple[PlanResult, int]:
        self.requests.append(("plan", gang))
        self._check(name)
        return self.ledger.plan(gang), self.ledger.room()

    async def room(self) -> int:
        self.rooms += 1
        return self.ledger.room()

    async def reserve(
        self,
        gang: GangRequest,
        plan: Placement | None = None,
        *,
        ttl_seconds: int = 0,
        namespace: str = "",
        name: str = "",
    ) -> ReserveOutcome:
        self.requests.append(("reserve", gang))
        return self.ledger.reserve(gang, plan, ttl_seconds or 120)

    async def release(self, job_uid: str) -> int:
        return self.ledger.release(job_uid)

    async def what_if(
        self, gang: GangRequest, candidates: Sequence[str], *, gone: Sequence[str] = (), namespace: str = "",
        name: str = ""
    ) -> WhatIfOutcome:
        self.requests.append(("what_if", gang))
        return self.ledger.what_if(gang, list(candidates), list(gone))

    async def repair(
        self, gang: GangRequest, *, ttl_seconds: int = 0, namespace: str = "", name: str = ""
    ) -> RepairOutcome:
        self.requests.append(("repair", gang))
        return self.ledger.repair(gang, ttl_seconds or 120)


def gpu_node(name: str, gpus: int = 8, leaf: str = "leaf-0") -> dict[str, Any]:
    """A Node object as the extender's watch sees it: ``gpus`` GPUs under leaf switch ``leaf``."""
    return {
        "metadata": {"name": name, "labels": {"kubegang.io/leaf": leaf}},
        "spec": {},
        "status": {"allocatable": {"nvidia.com/gpu": str(gpus), "cpu": "128", "memory": "1Ti", "pods": "110"}},
    }


def gpu_queue(
    name: str, nominal: int | None = None, parent: str | None = None, namespaces: Sequence[str] = (), **spec: Any
) -> dict[str, Any]:
    """A GPUQueue object: ``nominal`` GPUs of ``nvidia.com/gpu`` (none listed when None)."""
    body: dict[str, Any] = {"resources": [] if nominal is None else [{"flavor": "nvidia.com/gpu", "nominal": nominal}]}
    if parent:
        body["parent"] = parent
    if namespaces:
        body["namespaces"] = list(namespaces)
    body.update(spec)
    return {"apiVersion": "kubegang.io/v1alpha1", "kind": "GPUQueue", "metadata": {"name": name}, "spec": body}


LOWER_PRIORITY = {"withinQueue": "LowerPriority"}
"""A queue policy that lets a job evict lower-priority jobs of its own queue (docs/quota.md)."""


class FakeKube:
    """Records writes; optionally fails the creation of one named object."""

    def __init__(self) -> None:
        self.objects: dict[tuple[str, str, str], dict[str, Any]] = {}
        self.deleted: list[tuple[str, str, str]] = []
        self.status: dict[str, list[dict[str, Any]]] = {}
        self.events: list[tuple[str, str, str, bool]] = []
        self.fail_create: str | None = None
        self.versions: dict[str, int] = {}
        """Job key -> resourceVersion (counts status writes, from the job's own version)."""
        self.background_writes = 0
        self.patches: list[tuple[str, str, str, dict[str, Any]]] = []
        """Merge patches of Pods, RayClusters and GPUJob specs, in order."""

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

    async def patch(self, kind: str, namespace: str, name: str, patch: Mapping[str, Any]) -> bool:
        self.patches.append((kind, namespace, name, dict(patch)))
        return True

    async def event_on(self, involved: Mapping[str, str], reason: str, message: str, *,
                       warning: bool = False) -> None:
        self.events.append((f"{involved.get('kind')}/{involved.get('namespace')}/{involved.get('name')}", reason,
                            message, warning))

    async def reserve_background(self) -> None:
        self.background_writes += 1

    async def patch_job_status(
        self, job: JobView, patch: Mapping[str, Any], *, prepaid: bool = False, resource_version: str | None = None
    ) -> str | None:
        """Like the API server: a named resourceVersion is a precondition (409 when the job moved on)."""
        current = self.versions.get(job.key, int(job.resource_version or 0))
        if resource_version is not None and resource_version != str(current):
            raise ApiStatusError(409, "Conflict", f"{job.key} is at {current}")
        self.versions[job.key] = current + 1
        self.status.setdefault(job.key, []).append(dict(patch))
        return str(current + 1)

    async def patch_named_job_status(self, namespace: str, name: str, patch: Mapping[str, Any]) -> None:
        self.status.setdefault(f"{namespace}/{name}", []).append(dict(patch))

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
    """The operator's admission and supervisor over the production adapters: ``QuotaBook`` (the real
    quota tree, built from GPUQueue objects in the cache) and ``ExtenderPlacement`` over the
    extender's ``Ledger`` (called in process instead of over gRPC). Only the Kubernetes API is
    recorded, by ``FakeKube``; the watches are played by ``echo_pods`` / ``drop_deleted_pods``.

    ``capacity``: leaf queues (roots without children) and their nominal GPUs, each with the
    ``preemption`` policy when given; ``queues``: further GPUQueue objects (see ``gpu_queue``).
    ``nodes``: node name -> GPUs, under the leaf switch ``leaves`` names (default ``leaf-0``).
    """

    def __init__(
        self,
        capacity: Mapping[str, int],
        nodes: Mapping[str, int],
        *,
        queues: Sequence[Mapping[str, Any]] = (),
        leaves: Mapping[str, str] | None = None,
        preemption: Mapping[str, str] | None = None,
    ) -> None:
        from kubegang.operator._admission import Admission
        from kubegang.operator._supervisor import Supervisor

        self.ledger = Ledger()
        for name, gpus in nodes.items():
            self.ledger.upsert_node(gpu_node(name, gpus, (leaves or {}).get(name, "leaf-0")))
        self.client = InProcessClient(self.ledger)
        self.cache = ClusterCache()
        for queue, nominal in capacity.items():
            extra = {"preemption": dict(preemption)} if preemption else {}
            self.cache.upsert_queue(gpu_queue(queue, nominal, **extra))
        for body in queues:
            self.cache.upsert_queue(body)
        self.kube = FakeKube()
        self.quota = QuotaBook(priority_of=self.cache.priority_of, node_products=lambda: self.cache.gpu_products)
        self.placement = ExtenderPlacement(self.client)  # type: ignore[arg-type]
        self.admission = Admission(self.cache, self.quota, self.placement, self.kube)
        self.supervisor = Supervisor(self.admission)
        self._pod_uids: dict[tuple[str, str], str] = {}

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

    def submit(self, body: dict[str, Any]) -> JobView:
        view = self.cache.upsert_job(body)
        assert view is not None
        return view

    def represented(self, name: str, namespace: str = "team-a") -> JobView:
        """The GPUJob the source bridge created, as the API server returns it (with a UID), fed to the cache."""
        manifest = self.kube.objects[("GPUJob", namespace, name)]
        body = {**manifest, "metadata": {**manifest["metadata"], "uid": f"uid-{name}", "generation": 1,
                                         "creationTimestamp": "2025-01-01T00:00:00Z"}, "status": {}}
        return self.submit(body)

    def pod_pins(self) -> dict[str, dict[str, Any]]:
        """The merge patches written to pods (the bridge's pins), by pod name."""
        return {name: patch for kind, _, name, patch in self.kube.patches if kind == "Pod"}

    def see_pod(self, body: Mapping[str, Any]) -> None:
        """The watches (the operator's cache and the extender's ledger) see a pod as ``body``."""
        meta = body["metadata"]
        uid = meta.get("uid") or self._pod_uids.setdefault(
            (meta["namespace"], meta["name"]), f"pod-uid-{len(self._pod_uids)}"
        )
        echo = {**body, "metadata": {**meta, "uid": uid}}
        self.cache.upsert_pod(echo)
        self.ledger.upsert_pod(echo)

    def echo_pods(self, phase: str = "Running", bound: bool = True) -> None:
        """Let the watches deliver every created pod back, as kwok would run them."""
        for pod in self.kube.pods():
            body = {**pod, "status": {"phase": phase}, "spec": {**pod["spec"]}}
            if bound:
                body["spec"]["nodeName"] = pod["metadata"]["annotations"]["kubegang.io/node"]
            self.see_pod(body)

    def drop_deleted_pods(self) -> None:
        """The watches report the deleted pods gone."""
        for kind, ns, name in self.kube.deleted:
            if kind == "Pod":
                for uid in list(self.cache.pods):
                    self.cache.remove_pod(
                        {"metadata": {"name": name, "namespace": ns, "labels": {"kubegang.io/job-uid": uid}}}
                    )
                pod_uid = self._pod_uids.pop((ns, name), None)
                if pod_uid is not None:
                    self.ledger.delete_pod(pod_uid)

    def delete_job(self, uid: str) -> None:
        """The GPUJob is deleted: the watch reports it gone, and the API's garbage collector deletes its
        pods (owner references; not a write of the operator, so not in ``kube.deleted``)."""
        self.cache.remove_job(uid)
        for key, pod in list(self.kube.objects.items()):
            labels = pod["metadata"].get("labels") or {}
            if key[0] == "Pod" and labels.get("kubegang.io/job-uid") == uid:
                del self.kube.objects[key]
                self.cache.remove_pod(pod)
                pod_uid = self._pod_uids.pop(key[1:], None)
                if pod_uid is not None:
                    self.ledger.delete_pod(pod_uid)

    def last_status(self, key: str) -> dict[str, Any]:
        merged: dict[str, Any] = {}
        for patch in self.kube.status.get(key, []):
            merged.update(patch)
        return merged

    def held_gpus(self) -> dict[str, list[str]]:
        """What the ledger holds: ``node/gpu`` -> holders (``job-uid#index``), only GPUs held."""
        return {
            f"{node}/{gpu['index']}": gpu["holders"]
            for node, info in self.ledger.snapshot()["nodes"].items()
            for gpu in info["gpus"]
            if gpu["holders"]
        }

    def holds_nothing(self, uid: str) -> bool:
        """Neither quota (the tree) nor GPUs (the ledger's pods and reservations) are held for ``uid``."""
        snapshot = self.ledger.snapshot()
        return (
            uid not in self.quota.tree
            and uid not in snapshot["reservations"]
            and not any(h.startswith(f"{uid}#") for holders in self.held_gpus().values() for h in holders)
        )


@pytest.fixture
def make_world() -> Any:
    def make(capacity: Mapping[str, int], nodes: Mapping[str, int], **options: Any) -> World:
        return World(capacity, nodes, **options)

    return make
