"""The labels the source bridge writes (``_sources``) are valid label values however long the name: the
source's name on its GPUJob, and the GPUJob's name on each pinned pod, are cut to 63 characters without
leaving a '-' or '.' at the end, which the API server would refuse."""

from __future__ import annotations

import re

from kubegang.api import SOURCE_NAME_LABEL, PodSourceKind, source_job_name
from kubegang.podcontract import JOB_NAME_LABEL

from .conftest import World
from .test_sources import NODES, group_pod, ray_cluster

LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")


def _valid(value: str) -> bool:
    return len(value) <= 63 and LABEL_VALUE.match(value) is not None


async def test_a_long_ray_cluster_name_is_a_valid_source_name_label_on_its_gpujob() -> None:
    name = "r" * 62 + "-tail"  # a valid RayCluster name whose first 63 characters end in '-'
    rc = ray_cluster(suspend=True)
    rc["metadata"]["name"] = name
    world = World({"team-a": 64}, NODES)
    world.cache.upsert_raycluster(rc)
    await world.admission.sources.sync()
    manifest = world.kube.objects[("GPUJob", "team-a", source_job_name(PodSourceKind.RAY_CLUSTER, name))]
    value = manifest["metadata"]["labels"][SOURCE_NAME_LABEL]
    assert value == "r" * 62 and _valid(value)


async def test_a_pinned_pod_of_a_long_named_group_carries_a_valid_job_name_label() -> None:
    group = "g" * 53 + "-" + "h" * 9  # 63 characters; "podgroup-" + group cut at 63 ends in '-'
    world = World({"team-a": 64}, NODES)
    for i in range(2):
        world.cache.upsert_source_pod(group_pod(i, group=group, size=2))
    await world.admission.sources.sync()
    job = world.represented(source_job_name(PodSourceKind.POD_GROUP, group))
    assert job.name[:63].endswith("-")
    await world.cycle()
    await world.admission.sources.sync()
    pins = world.pod_pins()
    assert len(pins) == 2
    for patch in pins.values():
        value = patch["metadata"]["labels"][JOB_NAME_LABEL]
        assert value == job.name[:62] and _valid(value)
