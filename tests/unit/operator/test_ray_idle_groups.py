"""A labelled RayCluster whose GPU workers want no pod yet (autoscaling from zero, ``numOfHosts: 0``, a
suspended worker group) gets no GPUJob (a gang of 0 pods is nothing to admit) and an Event that says
the group asks for GPUs but wants 0 pods, naming the field, not that no group asks for GPUs."""

from __future__ import annotations

from typing import Any

import pytest

from kubegang.api import PodSourceKind, source_job_name

from .conftest import World
from .test_sources import NODES, ray_cluster


@pytest.mark.parametrize(("edit", "field"), [
    ({"replicas": 0}, "replicas: 0, minReplicas: 0"),
    ({"numOfHosts": 0}, "numOfHosts: 0"),
    ({"suspend": True}, "suspend: true"),
])
async def test_a_gpu_group_with_no_desired_pods_is_named_with_its_field(edit: dict[str, Any], field: str) -> None:
    rc = ray_cluster(suspend=True)
    rc["spec"]["workerGroupSpecs"][0].update(edit)
    world = World({"team-a": 64}, NODES)
    world.cache.upsert_raycluster(rc)
    await world.admission.sources.sync()
    await world.admission.sources.sync()
    assert [k for k in world.kube.objects if k[0] == "GPUJob"] == []
    [(where, reason, message, warning)] = world.kube.events
    assert (where, reason, warning) == ("RayCluster/team-a/rc", "NotAdmissible", True)
    assert message.startswith("spec.workerGroupSpecs[0] ('g0'): asks for 8 nvidia.com/gpu per pod but 0 pods are "
                              f"desired ({field}")
    assert "kubegang admits the cluster once it asks for GPU pods" in message
    assert "no group" not in message and "remove the kubegang.io/queue label" not in message

    # Asked for pods: represented at once.
    world.cache.upsert_raycluster(ray_cluster(suspend=True))
    await world.admission.sources.sync()
    assert ("GPUJob", "team-a", source_job_name(PodSourceKind.RAY_CLUSTER, "rc")) in world.kube.objects


async def test_a_cluster_with_no_gpu_pod_at_all_is_still_told_to_drop_the_label() -> None:
    world = World({"team-a": 64}, NODES)
    world.cache.upsert_raycluster(ray_cluster(worker_gpus=(0,), suspend=True))
    await world.admission.sources.sync()
    [(_, _, message, _)] = world.kube.events
    assert message.startswith("spec.workerGroupSpecs: no group of RayCluster 'rc' asks for nvidia.com/gpu")
