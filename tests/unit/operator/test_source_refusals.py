"""A RayCluster or pod group whose GPUJob the CRD would refuse (``_sources``): no GPUJob is sent, and the
source gets one ``NotAdmissible`` Event naming its own field (the label, the template's node selector),
not the GPUJob's, and what that field allows; a 422 from the API server on the write is told the same
way, and the same refused write is not sent every step."""

from __future__ import annotations

import re
from typing import Any

import pytest

from kubegang.api import PodSourceKind, SourceError, source_job_name
from kubegang.operator import _sources
from kubegang.restclient import ApiStatusError

from .conftest import World
from .test_scheduling_groups import member, podgroup, workload
from .test_sources import NODES, group_pod, ray_cluster

RC_JOB = source_job_name(PodSourceKind.RAY_CLUSTER, "rc")
NAME_RULE = "lowercase letters, digits, '-' and '.', beginning and ending with a letter or digit"


def _gpujobs(world: World) -> list[tuple[str, str, str]]:
    return [k for k in world.kube.objects if k[0] == "GPUJob"]


def _worker(rc: dict[str, Any]) -> dict[str, Any]:
    spec: dict[str, Any] = rc["spec"]["workerGroupSpecs"][0]["template"]["spec"]
    return spec


def _with_queue(queue: str) -> dict[str, Any]:
    rc = ray_cluster(suspend=True)
    rc["metadata"]["labels"]["kubegang.io/queue"] = queue
    return rc


def _with_product(product: str) -> dict[str, Any]:
    rc = ray_cluster(suspend=True)
    _worker(rc)["nodeSelector"] = {"nvidia.com/gpu.product": product}
    return rc


def _with_priority_class(name: str) -> dict[str, Any]:
    rc = ray_cluster(suspend=True)
    _worker(rc)["priorityClassName"] = name
    return rc


@pytest.mark.parametrize(("rc", "named", "allowed"), [
    # A valid label value, not a GPUQueue name.
    (_with_queue("ML_Team"), "metadata.labels[kubegang.io/queue]: 'ML_Team' cannot be a GPUQueue's name", NAME_RULE),
    (_with_queue("Team.A"), "metadata.labels[kubegang.io/queue]: 'Team.A' cannot be a GPUQueue's name", NAME_RULE),
    (_with_product(""), "spec.workerGroupSpecs[0].template.spec.nodeSelector[nvidia.com/gpu.product]: ''",
     "must not be empty"),
    (_with_priority_class("High_Priority"),
     "spec.workerGroupSpecs[0].template.spec.priorityClassName: 'High_Priority' cannot be a PriorityClass's name",
     NAME_RULE),
])
async def test_a_ray_cluster_whose_gpujob_the_crd_would_refuse_gets_one_event_naming_its_own_field(
        rc: dict[str, Any], named: str, allowed: str) -> None:
    world = World({"team-a": 64}, NODES)
    world.cache.upsert_raycluster(rc)
    for _ in range(3):
        await world.admission.sources.sync()
    assert _gpujobs(world) == []  # nothing the API server would answer with 422 is sent
    [(where, reason, message, warning)] = world.kube.events  # once, not every step
    assert (where, reason, warning) == ("RayCluster/team-a/rc", "NotAdmissible", True)
    assert message.startswith(named) and allowed in message
    assert "should match pattern" not in message and "spec.queue" not in message

    # Fixed: represented at once, and a later refusal is reported afresh.
    world.cache.upsert_raycluster(ray_cluster(suspend=True))
    await world.admission.sources.sync()
    assert _gpujobs(world) == [("GPUJob", "team-a", RC_JOB)]


async def test_a_pod_group_whose_queue_label_is_no_gpuqueue_name_gets_an_event_on_its_first_pod() -> None:
    world = World({"team-a": 64}, NODES)
    for i in range(4):
        world.cache.upsert_source_pod(group_pod(i, queue="Team.A"))
    await world.admission.sources.sync()
    await world.admission.sources.sync()
    assert _gpujobs(world) == []
    [(where, reason, message, _)] = world.kube.events
    assert (where, reason) == ("Pod/team-a/workers-0", "NotAdmissible")
    assert message.startswith("metadata.labels[kubegang.io/queue]: 'Team.A' cannot be a GPUQueue's name")
    assert NAME_RULE in message


async def test_a_native_podgroup_names_the_workload_whose_queue_label_it_read() -> None:
    world = World({"team-a": 64}, NODES)
    world.cache.record_scheduling_object("PodGroup", podgroup(min_count=1))
    world.cache.record_scheduling_object("Workload", workload(**{"kubegang.io/queue": "ML_Team"}))
    world.cache.upsert_source_pod(member(0))
    await world.admission.sources.sync()
    assert _gpujobs(world) == []
    [(where, _, message, _)] = world.kube.events
    assert where == "PodGroup/team-a/pg"
    assert message.startswith("metadata.labels[kubegang.io/queue] of Workload 'trainer': 'ML_Team'")


async def test_a_represented_ray_cluster_relabelled_to_no_gpuqueue_name_is_told_so_and_its_gpujob_kept() -> None:
    world = World({"team-a": 64}, NODES)
    world.cache.upsert_raycluster(ray_cluster(suspend=True))
    await world.admission.sources.sync()
    world.represented(RC_JOB)
    world.kube.patches.clear()
    world.cache.upsert_raycluster(_with_queue("ML_Team"))
    await world.admission.sources.sync()
    [(where, _, message, _)] = world.kube.events
    assert where == "RayCluster/team-a/rc"
    assert message.startswith("metadata.labels[kubegang.io/queue]: 'ML_Team' cannot be a GPUQueue's name")
    assert [p for p in world.kube.patches if p[0] == "GPUJob"] == []


async def test_an_admitted_ray_cluster_scaled_up_with_a_bad_label_gets_no_growth_slice_but_an_event() -> None:
    world = World({"team-a": 64}, NODES)
    world.cache.upsert_raycluster(ray_cluster(suspend=True))
    await world.admission.sources.sync()
    world.represented(RC_JOB)
    await world.cycle()
    grown = ray_cluster(replicas=6, suspend=False)
    grown["metadata"]["labels"]["kubegang.io/queue"] = "ML_Team"
    world.cache.upsert_raycluster(grown)
    await world.admission.sources.sync()
    assert _gpujobs(world) == [("GPUJob", "team-a", RC_JOB)]
    [(_, _, message, _)] = world.kube.events
    assert message.startswith("metadata.labels[kubegang.io/queue]: 'ML_Team'")


def _refusing(world: World, code: int) -> list[str]:
    """The API server refuses every GPUJob with ``code``; returns the names it was sent."""
    sent: list[str] = []

    async def create(manifest: Any) -> bool:
        sent.append(manifest["metadata"]["name"])
        raise ApiStatusError(code, "Invalid" if code == 422 else "InternalError",
                             f"GPUJob.kubegang.io {manifest['metadata']['name']!r} is invalid: spec.template: nope")

    world.kube.create = create  # type: ignore[method-assign]
    return sent


async def test_a_422_on_create_is_an_event_on_the_source_and_the_same_write_waits_before_it_is_sent_again() -> None:
    world = World({"team-a": 64}, NODES)
    now = [100.0]
    world.admission.sources.clock = lambda: now[0]
    sent = _refusing(world, 422)
    world.cache.upsert_raycluster(ray_cluster(suspend=True))
    await world.admission.sources.sync()
    [(where, reason, message, _)] = world.kube.events
    assert (where, reason) == ("RayCluster/team-a/rc", "NotAdmissible")
    assert f"the API server refused GPUJob {RC_JOB!r}" in message and "spec.template: nope" in message
    for _ in range(3):
        await world.admission.sources.sync()
    assert sent == [RC_JOB] and len(world.kube.events) == 1  # not sent, nor reported, every step
    now[0] += _sources.REFUSED_RETRY_SECONDS
    await world.admission.sources.sync()
    assert sent == [RC_JOB, RC_JOB] and len(world.kube.events) == 1  # tried again; the same refusal, told once


async def test_another_api_error_on_create_is_retried_next_step_without_an_event() -> None:
    world = World({"team-a": 64}, NODES)
    sent = _refusing(world, 500)
    world.cache.upsert_raycluster(ray_cluster(suspend=True))
    await world.admission.sources.sync()
    await world.admission.sources.sync()
    assert sent == [RC_JOB, RC_JOB] and world.kube.events == []


def _spec(**fields: Any) -> dict[str, Any]:
    return {"replicas": 2, "queue": "team-a", "podSource": {"kind": "PodGroup", "name": "g"},
            "template": {"spec": {"containers": [{"name": "main", "image": "x",
                                                  "resources": {"limits": {"nvidia.com/gpu": 8}}}]}},
            "topology": {"required": None, "preferred": None}} | fields


@pytest.mark.parametrize(("fields", "named"), [
    ({"queue": "Team_A"}, "metadata.labels[kubegang.io/queue]: 'Team_A'"),
    ({"gpuProduct": ""}, "spec.workers.template.spec.nodeSelector[nvidia.com/gpu.product]: ''"),
    ({"priorityClassName": "A"}, "spec.workers.template.spec.priorityClassName: 'A'"),
    ({"topology": {"required": "rack", "preferred": None}}, "metadata.annotations[kubegang.io/topology-required]:"),
    ({"topology": {"required": None, "preferred": "rack"}}, "metadata.annotations[kubegang.io/topology-preferred]:"),
    ({"template": {"spec": {"containers": [{"name": "", "image": "x"}]}}},
     "spec.workers.template.spec.containers[0].name: it must not be empty"),
])
def test_each_refused_gpujob_field_is_named_as_the_source_field_it_came_from(fields: dict[str, Any],
                                                                             named: str) -> None:
    origin = _sources.Origin(pod_spec="spec.workers.template.spec")
    assert _sources.representable(_spec(), origin).replicas == 2
    with pytest.raises(SourceError, match=re.escape(named)):
        _sources.representable(_spec(**fields), origin)
