"""Gangs whose pods another controller makes (``_sources``): a pod group and a RayCluster go through the
production admission (quota tree, extender ledger) as the GPUJob that represents them; only the API
is recorded (``FakeKube``)."""

from __future__ import annotations

from typing import Any

from kubegang.api import source_job_name
from kubegang.extender._pods import pod_demand
from kubegang.extender._wire import Pod
from kubegang.operator._conditions import Phase
from kubegang.operator._sources import GROUP_GONE_SECONDS, SourceBridge
from kubegang.operator._types import WaitReason
from kubegang.podcontract import ADMISSION_GATE, JOB_UID_LABEL, NODE_ANNOTATION, POD_INDEX_LABEL

from .conftest import World, gpu_queue

NODES = {f"n{i}": 8 for i in range(6)}


def group_pod(i: int, *, group: str = "workers", size: int = 4, gpus: int = 8, queue: str = "team-a",
              gate: bool = True, **labels: str) -> dict[str, Any]:
    """A pod a Deployment-like controller made, as the watch delivers it."""
    spec: dict[str, Any] = {"schedulerName": "kubegang", "containers": [
        {"name": "main", "image": "trainer:1", "resources": {"limits": {"nvidia.com/gpu": gpus}}}]}
    if gate:
        spec["schedulingGates"] = [{"name": ADMISSION_GATE}]
    return {"metadata": {"name": f"{group}-{i}", "namespace": "team-a", "uid": f"{group}-uid-{i}",
                         "labels": {"kubegang.io/pod-group": group, "kubegang.io/group-size": str(size),
                                    "kubegang.io/queue": queue, **labels},
                         "annotations": {"kubegang.io/topology-required": "leaf"}},
            "spec": spec, "status": {"phase": "Pending"}}


async def test_a_pod_group_is_admitted_whole_only_when_quota_allows_and_its_pods_are_pinned() -> None:
    world = World({"team-a": 24}, NODES)
    for i in range(4):
        world.cache.upsert_source_pod(group_pod(i))
    await world.admission.sources.sync()
    job = world.represented(source_job_name_for("workers"))
    assert (job.replicas, job.gpus_per_replica, job.queue, job.spec.topology.required) == (4, 8, "team-a", "leaf")
    assert job.spec.pod_source is not None and job.spec.pod_source.name == "workers"

    outcomes = await world.cycle()
    waiting = next(o for o in outcomes if o.job == job.key)
    assert waiting.reason is WaitReason.EXCEEDS_QUEUE_CAPACITY  # 32 GPUs > the queue's 24
    await world.admission.sources.sync()
    assert world.pod_pins() == {} and world.kube.pods() == []

    world.cache.upsert_queue(gpu_queue("team-a", 32))
    await world.cycle()
    admitted = world.cache.job(job.uid)
    assert admitted is not None and admitted.phase is Phase.ADMITTED
    await world.admission.sources.sync()
    pinned = world.pod_pins()
    assert sorted(pinned) == [f"workers-{i}" for i in range(4)]
    slots = {p.index: p.node for p in admitted.placement.pods} if admitted.placement else {}
    assert sorted(int(p["metadata"]["labels"][POD_INDEX_LABEL]) for p in pinned.values()) == [0, 1, 2, 3]
    for patch in pinned.values():
        meta = patch["metadata"]
        assert meta["labels"][JOB_UID_LABEL] == job.uid
        assert meta["annotations"][NODE_ANNOTATION] == slots[int(meta["labels"][POD_INDEX_LABEL])]
        assert patch["spec"] == {"schedulingGates": []}  # the gate is lifted in the same write
    assert world.kube.pods() == []  # kubegang made no pod of its own
    # A second step pins nothing twice while the watch has not echoed the patches yet.
    await world.admission.sources.sync()
    assert len([p for p in world.kube.patches if p[0] == "Pod"]) == 4


def source_job_name_for(group: str) -> str:
    from kubegang.api import PodSourceKind

    return source_job_name(PodSourceKind.POD_GROUP, group)


async def test_a_pod_group_with_a_native_sidecar_is_represented_with_the_sidecars_gpus() -> None:
    """The GPUJob copies the init containers' restartPolicy, so it plans 8 + 1 GPUs per pod as
    kube-scheduler and the extender count them (KEP-753 sidecar), not 8."""
    world = World({"team-a": 64}, NODES)
    for i in range(2):
        pod = group_pod(i, size=2)
        pod["spec"]["initContainers"] = [{"name": "proxy", "image": "p:1", "restartPolicy": "Always",
                                          "resources": {"limits": {"nvidia.com/gpu": 1}}}]
        world.cache.upsert_source_pod(pod)
        assert pod_demand(Pod.model_validate(pod)).gpus == 9
    await world.admission.sources.sync()
    job = world.represented(source_job_name_for("workers"))
    assert (job.replicas, job.gpus_per_replica) == (2, 9)


async def test_an_incomplete_group_waits_and_an_extra_pod_beyond_the_size_stays_unpinned() -> None:
    world = World({"team-a": 64}, NODES)
    for i in range(3):
        world.cache.upsert_source_pod(group_pod(i))
    await world.admission.sources.sync()
    job = world.represented(source_job_name_for("workers"))
    await world.cycle()
    assert (world.cache.job(job.uid) or job).phase is not Phase.ADMITTED  # 3 of 4 pods exist
    world.cache.upsert_source_pod(group_pod(3))
    world.cache.upsert_source_pod(group_pod(4))  # one more than the group's size
    await world.cycle()
    assert (world.cache.job(job.uid) or job).phase is Phase.ADMITTED
    await world.admission.sources.sync()
    assert len(world.pod_pins()) == 4 and "workers-4" not in world.pod_pins()


async def test_the_extender_refuses_a_group_pod_until_it_is_pinned() -> None:
    world = World({"team-a": 32}, NODES)
    pod = group_pod(0, gate=False)
    demand = pod_demand(Pod.model_validate(pod))
    verdict = world.ledger.filter(demand, list(NODES))
    assert verdict.passed == [] and "waits for kubegang to admit its gang (PodGroup workers)" in \
        verdict.unresolvable["n0"]
    plain = {**pod, "metadata": {**pod["metadata"], "labels": {}}}
    assert world.ledger.filter(pod_demand(Pod.model_validate(plain)), list(NODES)).passed == list(NODES)


async def test_a_group_with_mixed_gpu_requests_gets_an_event_naming_it_and_no_gpujob() -> None:
    world = World({"team-a": 64}, NODES)
    world.cache.upsert_source_pod(group_pod(0))
    world.cache.upsert_source_pod(group_pod(1, gpus=4))
    await world.admission.sources.sync()
    assert [k for k in world.kube.objects if k[0] == "GPUJob"] == []
    [(where, reason, message, warning)] = world.kube.events
    assert where == "Pod/team-a/workers-0" and reason == "NotAdmissible" and warning
    assert "workers-1" in message and "same group size, queue and GPU request" in message
    await world.admission.sources.sync()
    assert len(world.kube.events) == 1  # reported once


async def test_evicting_a_group_deletes_its_pods_and_a_group_gone_loses_its_gpujob() -> None:
    world = World({"team-a": 32}, NODES)
    clock = [0.0]
    world.admission.sources = SourceBridge(world.cache, world.kube, clock=lambda: clock[0])
    for i in range(4):
        world.cache.upsert_source_pod(group_pod(i))
    await world.admission.sources.sync()
    job = world.represented(source_job_name_for("workers"))
    await world.cycle()
    admitted = world.cache.job(job.uid)
    assert admitted is not None and admitted.phase is Phase.ADMITTED
    await world.admission.teardown(admitted)
    assert sorted(n for k, _, n in world.kube.deleted if k == "Pod") == [f"workers-{i}" for i in range(4)]
    assert world.holds_nothing(job.uid)
    world.cache.assume(admitted, {"phase": "Queued", "admittedAt": None})
    for i in range(4):
        world.cache.remove_source_pod(group_pod(i))
    await world.admission.sources.sync()
    clock[0] = GROUP_GONE_SECONDS - 1  # docs: deleted 10 s after the group's last pod, not before
    await world.admission.sources.sync()
    assert ("GPUJob", "team-a", job.name) not in world.kube.deleted
    clock[0] = GROUP_GONE_SECONDS + 1
    await world.admission.sources.sync()
    assert ("GPUJob", "team-a", job.name) in world.kube.deleted


def ray_cluster(*, worker_gpus: tuple[int, ...] = (8,), replicas: int = 4, suspend: bool | None = None
                ) -> dict[str, Any]:
    def container(gpus: int) -> dict[str, Any]:
        res: dict[str, Any] = {"requests": {"cpu": "1"}}
        if gpus:
            res["limits"] = {"nvidia.com/gpu": gpus}
        return {"name": "ray", "image": "rayproject/ray:2.46.0", "resources": res}

    spec: dict[str, Any] = {
        "headGroupSpec": {"rayStartParams": {}, "template": {"spec": {"containers": [container(0)]}}},
        "workerGroupSpecs": [{"groupName": f"g{i}", "replicas": replicas, "minReplicas": 0, "maxReplicas": 8,
                              "rayStartParams": {}, "template": {"spec": {"containers": [container(g)]}}}
                             for i, g in enumerate(worker_gpus)]}
    if suspend is not None:
        spec["suspend"] = suspend
    return {"apiVersion": "ray.io/v1", "kind": "RayCluster",
            "metadata": {"name": "rc", "namespace": "team-a", "uid": "rc-uid",
                         "labels": {"kubegang.io/queue": "team-a"},
                         "annotations": {"kubegang.io/topology-required": "leaf"}},
            "spec": spec}


async def test_a_ray_cluster_is_held_suspended_represented_by_its_gpu_workers_and_opened_on_admission() -> None:
    from kubegang.api import PodSourceKind

    world = World({"team-a": 32}, NODES)
    world.cache.upsert_raycluster(ray_cluster())
    await world.admission.sources.sync()
    assert ("RayCluster", "team-a", "rc", {"spec": {"suspend": True}}) in world.kube.patches
    name = source_job_name(PodSourceKind.RAY_CLUSTER, "rc")
    manifest = world.kube.objects[("GPUJob", "team-a", name)]
    assert manifest["metadata"]["ownerReferences"][0]["uid"] == "rc-uid"  # deleted with the RayCluster
    job = world.represented(name)
    assert (job.replicas, job.gpus_per_replica, job.total_gpus) == (4, 8, 32)  # the CPU head is not in it
    world.cache.upsert_raycluster(ray_cluster(suspend=True))
    await world.cycle()
    assert (world.cache.job(job.uid) or job).phase is Phase.ADMITTED
    assert ("RayCluster", "team-a", "rc", {"spec": {"suspend": False}}) in world.kube.patches
    world.kube.patches.clear()
    await world.admission.sources.sync()
    assert world.kube.patches == []  # admitted: no longer held

    # KubeRay makes the workers; the bridge pins them, and the watch echoes the pins.
    for i in range(4):
        world.cache.upsert_source_pod(ray_worker(i))
    await world.admission.sources.sync()
    pins = world.pod_pins()
    assert sorted(pins) == [f"rc-g0-worker-{i}" for i in range(4)]
    for i in range(4):
        pod = ray_worker(i)
        pod["metadata"]["labels"] |= pins[f"rc-g0-worker-{i}"]["metadata"]["labels"]
        world.see_pod(pod)
    admitted = world.cache.job(job.uid)
    assert admitted is not None and len(world.cache.pods_of(job.uid)) == 4

    # A preemption or requeue suspends it again, and leaves every pod to KubeRay: deleting the pinned
    # workers as well raced KubeRay into making new ones, and its worker group then stalled for minutes.
    world.kube.patches.clear()
    await world.admission.teardown(admitted)
    assert ("RayCluster", "team-a", "rc", {"spec": {"suspend": True}}) in world.kube.patches
    assert [d for d in world.kube.deleted if d[0] == "Pod"] == []


async def test_a_ray_cluster_with_different_gpu_counts_per_group_is_refused_by_an_event_on_it() -> None:
    world = World({"team-a": 64}, NODES)
    world.cache.upsert_raycluster(ray_cluster(worker_gpus=(8, 4), suspend=True))
    await world.admission.sources.sync()
    assert [k for k in world.kube.objects if k[0] == "GPUJob"] == []
    [(where, reason, message, _)] = world.kube.events
    assert where == "RayCluster/team-a/rc" and reason == "NotAdmissible"
    assert message.startswith("spec.workerGroupSpecs:") and "'g0': 8, 'g1': 4" in message


def ray_worker(i: int, gpus: int = 8) -> dict[str, Any]:
    """A worker pod KubeRay made for RayCluster ``rc``, as the watch delivers it."""
    return {"metadata": {"name": f"rc-g0-worker-{i}", "namespace": "team-a", "uid": f"rc-w{i}",
                         "labels": {"ray.io/cluster": "rc", "ray.io/node-type": "worker", "ray.io/group": "g0"}},
            "spec": {"schedulerName": "kubegang", "containers": [
                {"name": "ray", "image": "rayproject/ray:2.46.0", "resources": {"limits": {"nvidia.com/gpu": gpus}}}]},
            "status": {"phase": "Pending"}}


async def test_a_ray_cluster_scaled_past_its_admission_waits_for_quota_as_a_growth_slice() -> None:
    from kubegang.api import PodSourceKind

    world = World({"team-a": 32}, NODES)
    world.cache.upsert_raycluster(ray_cluster(suspend=True))
    await world.admission.sources.sync()
    base = world.represented(source_job_name(PodSourceKind.RAY_CLUSTER, "rc"))
    await world.cycle()
    for i in range(4):
        world.cache.upsert_source_pod(ray_worker(i))
    await world.admission.sources.sync()
    assert sorted(world.pod_pins()) == [f"rc-g0-worker-{i}" for i in range(4)]

    # Scaled to 6 workers: the 2 added pods are a slice of their own, which waits for quota.
    world.cache.upsert_raycluster(ray_cluster(replicas=6, suspend=False))
    for i in (4, 5):
        world.cache.upsert_source_pod(ray_worker(i))
    world.kube.patches.clear()
    await world.admission.sources.sync()
    grown = world.represented("raycluster-rc.grow-1")
    assert (grown.replicas, grown.gpus_per_replica, grown.queue) == (2, 8, "team-a")
    assert grown.spec.topology.required == "leaf"
    assert world.kube.objects[("GPUJob", "team-a", "raycluster-rc.grow-1")]["metadata"]["ownerReferences"][0][
        "uid"] == "rc-uid"
    assert (world.cache.job(base.uid) or base).replicas == 4  # the admitted base is left as it is
    outcomes = await world.cycle()
    assert next(o for o in outcomes if o.job == grown.key).reason is WaitReason.QUOTA_EXHAUSTED  # 32 of 32 used
    await world.admission.sources.sync()
    assert world.pod_pins() == {}  # the added pods wait: nobody granted their quota

    world.cache.upsert_queue(gpu_queue("team-a", 48))
    await world.cycle()
    admitted = world.cache.job(grown.uid)
    assert admitted is not None and admitted.phase is Phase.ADMITTED
    await world.admission.sources.sync()
    pinned = world.pod_pins()
    assert sorted(pinned) == ["rc-g0-worker-4", "rc-g0-worker-5"]
    assert {p["metadata"]["labels"][JOB_UID_LABEL] for p in pinned.values()} == {grown.uid}

    # Preempting or restarting the slice takes only its pods: the cluster is not suspended.
    world.kube.patches.clear()
    await world.admission.teardown(admitted)
    assert [p for p in world.kube.patches if p[0] == "RayCluster"] == []

    # Scaled back to 4: the slice is no longer needed and goes.
    world.cache.upsert_raycluster(ray_cluster(replicas=4, suspend=False))
    await world.admission.sources.sync()
    assert ("GPUJob", "team-a", "raycluster-rc.grow-1") in world.kube.deleted
