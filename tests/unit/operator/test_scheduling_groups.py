"""Kubernetes' own PodGroups (scheduling.k8s.io/v1alpha2) as gangs: pods that name one in
``spec.schedulingGroup`` go through the production admission (quota tree, extender ledger) as the GPUJob
that represents the group, exactly like a labelled pod group; only the API is recorded (``FakeKube``)."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx2
import pytest

from kubegang.api import PodSourceKind, source_job_name
from kubegang.extender._pods import pod_demand
from kubegang.extender._wire import Pod as WirePod
from kubegang.operator._cache import ClusterCache
from kubegang.operator._conditions import Phase
from kubegang.operator._sources import GROUP_GONE_SECONDS, SourceBridge
from kubegang.operator._types import WaitReason
from kubegang.operator._watches import CacheFeed
from kubegang.podcontract import JOB_UID_LABEL, NODE_ANNOTATION, POD_INDEX_LABEL

from .conftest import World, gpu_queue
from .test_cache_feed import ScriptedApi

NODES = {f"n{i}": 8 for i in range(6)}
JOB = source_job_name(PodSourceKind.SCHEDULING_GROUP, "pg")


def member(i: int, *, gpus: int = 8, group: str = "pg", **labels: str) -> dict[str, Any]:
    """A pod a Deployment made from a template naming the PodGroup, as the watch delivers it."""
    return {"metadata": {"name": f"workers-{i}", "namespace": "team-a", "uid": f"uid-{i}", "labels": labels},
            "spec": {"schedulerName": "kubegang", "schedulingGroup": {"podGroupName": group}, "containers": [
                {"name": "main", "image": "trainer:1", "resources": {"limits": {"nvidia.com/gpu": gpus}}}]},
            "status": {"phase": "Pending"}}


def podgroup(min_count: int | None = 4, **labels: str) -> dict[str, Any]:
    policy: dict[str, Any] = {"gang": {"minCount": min_count}} if min_count is not None else {"basic": {}}
    return {"apiVersion": "scheduling.k8s.io/v1alpha2", "kind": "PodGroup",
            "metadata": {"name": "pg", "namespace": "team-a", "uid": "pg-uid", "labels": labels,
                         "annotations": {"kubegang.io/topology-required": "leaf"}},
            "spec": {"schedulingPolicy": policy,
                     "podGroupTemplateRef": {"workload": {"workloadName": "trainer", "podGroupTemplateName": "w"}}}}


def workload(**labels: str) -> dict[str, Any]:
    return {"apiVersion": "scheduling.k8s.io/v1alpha2", "kind": "Workload",
            "metadata": {"name": "trainer", "namespace": "team-a", "labels": labels}, "spec": {}}


async def test_a_native_podgroup_is_one_gpujob_sized_by_min_count_admitted_whole_and_pinned() -> None:
    world = World({"team-a": 24}, NODES)
    world.cache.record_scheduling_object("PodGroup", podgroup())
    world.cache.record_scheduling_object("Workload", workload(**{"kubegang.io/queue": "team-a"}))
    for i in range(4):
        world.cache.upsert_source_pod(member(i))
    await world.admission.sources.sync()
    manifest = world.kube.objects[("GPUJob", "team-a", JOB)]
    owner = manifest["metadata"]["ownerReferences"][0]
    assert (owner["apiVersion"], owner["kind"], owner["uid"]) == ("scheduling.k8s.io/v1alpha2", "PodGroup", "pg-uid")
    job = world.represented(JOB)
    assert (job.replicas, job.gpus_per_replica, job.queue, job.spec.topology.required) == (4, 8, "team-a", "leaf")
    assert job.spec.pod_source is not None and job.spec.pod_source.kind is PodSourceKind.SCHEDULING_GROUP

    outcomes = await world.cycle()
    assert next(o for o in outcomes if o.job == job.key).reason is WaitReason.EXCEEDS_QUEUE_CAPACITY
    await world.admission.sources.sync()
    assert world.pod_pins() == {}

    world.cache.upsert_queue(gpu_queue("team-a", 32))
    await world.cycle()
    admitted = world.cache.job(job.uid)
    assert admitted is not None and admitted.phase is Phase.ADMITTED and admitted.placement is not None
    await world.admission.sources.sync()
    pinned = world.pod_pins()
    assert sorted(pinned) == [f"workers-{i}" for i in range(4)]
    slots = {p.index: p.node for p in admitted.placement.pods}
    for patch in pinned.values():
        meta = patch["metadata"]
        assert meta["labels"][JOB_UID_LABEL] == job.uid
        assert meta["annotations"][NODE_ANNOTATION] == slots[int(meta["labels"][POD_INDEX_LABEL])]
    assert world.kube.pods() == []  # kubegang made no pod of its own


async def test_a_group_waits_for_min_count_pods_and_pods_beyond_it_stay_unpinned() -> None:
    world = World({"team-a": 64}, NODES)
    world.cache.record_scheduling_object("PodGroup", podgroup(**{"kubegang.io/queue": "team-a"}))
    for i in range(3):
        world.cache.upsert_source_pod(member(i))
    await world.admission.sources.sync()
    job = world.represented(JOB)
    await world.cycle()
    assert (world.cache.job(job.uid) or job).phase is not Phase.ADMITTED  # 3 of minCount 4
    world.cache.upsert_source_pod(member(3))
    world.cache.upsert_source_pod(member(4))
    await world.cycle()
    assert (world.cache.job(job.uid) or job).phase is Phase.ADMITTED
    await world.admission.sources.sync()
    assert len(world.pod_pins()) == 4 and "workers-4" not in world.pod_pins()


async def test_pods_whose_podgroup_does_not_exist_yet_get_an_event_then_a_gpujob_when_it_appears() -> None:
    world = World({"team-a": 32}, NODES)
    world.cache.upsert_source_pod(member(0, **{"kubegang.io/queue": "team-a"}))
    await world.admission.sources.sync()
    assert [k for k in world.kube.objects if k[0] == "GPUJob"] == []
    [(where, reason, message, warning)] = world.kube.events
    assert where == "Pod/team-a/workers-0" and reason == "NotAdmissible" and warning
    assert message.startswith("spec.schedulingGroup.podGroupName: PodGroup 'pg'")
    world.cache.record_scheduling_object("PodGroup", podgroup(min_count=1))
    await world.admission.sources.sync()
    assert ("GPUJob", "team-a", JOB) in world.kube.objects  # the queue came from the pod's label


@pytest.mark.parametrize(("group", "named"), [
    (podgroup(None, **{"kubegang.io/queue": "team-a"}), "spec.schedulingPolicy.gang: required"),
    (podgroup(), "metadata.labels[kubegang.io/queue]"),
])
async def test_a_podgroup_kubegang_cannot_admit_gets_one_event_on_itself_naming_the_field(
        group: dict[str, Any], named: str) -> None:
    world = World({"team-a": 32}, NODES)
    world.cache.record_scheduling_object("PodGroup", group)
    world.cache.upsert_source_pod(member(0))
    await world.admission.sources.sync()
    await world.admission.sources.sync()
    assert [k for k in world.kube.objects if k[0] == "GPUJob"] == []
    [(where, reason, message, _)] = world.kube.events
    assert where == "PodGroup/team-a/pg" and reason == "NotAdmissible" and message.startswith(named)


async def test_a_podgroup_whose_pods_ask_for_no_gpu_is_not_kubegangs_and_gets_nothing() -> None:
    world = World({"team-a": 32}, NODES)
    world.cache.record_scheduling_object("PodGroup", podgroup())  # no queue anywhere
    world.cache.upsert_source_pod(member(0, gpus=0))
    await world.admission.sources.sync()
    assert world.kube.objects == {} and world.kube.events == []


async def test_pods_of_one_podgroup_asking_for_different_gpus_are_named() -> None:
    world = World({"team-a": 32}, NODES)
    world.cache.record_scheduling_object("PodGroup", podgroup(2, **{"kubegang.io/queue": "team-a"}))
    world.cache.upsert_source_pod(member(0))
    world.cache.upsert_source_pod(member(1, gpus=4))
    await world.admission.sources.sync()
    [(_, _, message, _)] = world.kube.events
    assert message.startswith("pod workers-1: every pod of group 'pg' must carry the same GPU request as workers-0")


async def test_the_extender_holds_a_pod_naming_a_podgroup_even_before_its_gpujob_exists() -> None:
    world = World({"team-a": 32}, NODES)
    demand = pod_demand(WirePod.model_validate(member(0)))
    verdict = world.ledger.filter(demand, list(NODES))
    assert verdict.passed == [] and "waits for kubegang to admit its gang (SchedulingGroup pg)" in \
        verdict.unresolvable["n0"]
    plain = member(0)
    del plain["spec"]["schedulingGroup"]
    assert world.ledger.filter(pod_demand(WirePod.model_validate(plain)), list(NODES)).passed == list(NODES)


async def test_evicting_deletes_the_pods_and_a_group_without_pods_loses_its_gpujob() -> None:
    world = World({"team-a": 32}, NODES)
    clock = [0.0]
    world.admission.sources = SourceBridge(world.cache, world.kube, clock=lambda: clock[0])
    world.cache.record_scheduling_object("PodGroup", podgroup(**{"kubegang.io/queue": "team-a"}))
    for i in range(4):
        world.cache.upsert_source_pod(member(i))
    await world.admission.sources.sync()
    job = world.represented(JOB)
    await world.cycle()
    admitted = world.cache.job(job.uid)
    assert admitted is not None and admitted.phase is Phase.ADMITTED
    await world.admission.teardown(admitted)
    assert sorted(n for k, _, n in world.kube.deleted if k == "Pod") == [f"workers-{i}" for i in range(4)]
    assert world.holds_nothing(job.uid)
    world.cache.assume(admitted, {"phase": "Queued", "admittedAt": None})
    for i in range(4):
        world.cache.remove_source_pod(member(i))
    assert world.cache.source_pods == {}
    await world.admission.sources.sync()
    clock[0] = GROUP_GONE_SECONDS - 1  # not before the group has been gone that long
    await world.admission.sources.sync()
    assert ("GPUJob", "team-a", JOB) not in world.kube.deleted
    clock[0] = GROUP_GONE_SECONDS + 1
    await world.admission.sources.sync()
    assert ("GPUJob", "team-a", JOB) in world.kube.deleted


async def test_a_new_leaders_lists_find_the_podgroups_and_the_pods_that_name_them() -> None:
    plain = member(1)
    del plain["spec"]["schedulingGroup"]
    api = ScriptedApi()
    api.objects = {"/api/v1/pods": [member(0), plain],
                   "/apis/scheduling.k8s.io/v1alpha2/podgroups": [podgroup(**{"kubegang.io/queue": "team-a"})]}
    cache = ClusterCache()
    feed = CacheFeed(httpx2.AsyncClient(transport=httpx2.MockTransport(api.handler), base_url="https://api"), cache)
    task = asyncio.create_task(feed.run())
    try:
        await asyncio.wait_for(feed.synced(), 5)
        assert set(cache.podgroups) == {("team-a", "pg")}
        assert {k: sorted(v) for k, v in cache.source_pods.items()} == {
            ("team-a", PodSourceKind.SCHEDULING_GROUP, "pg"): ["workers-0"]}
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
