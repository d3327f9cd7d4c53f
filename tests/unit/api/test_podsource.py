"""The rules shared by the operator and the extender for gangs whose pods another controller makes."""

from __future__ import annotations

from typing import Any

import pytest

from kubegang.api import (
    PodGroupError,
    PodSourceKind,
    SourceError,
    job_name_of,
    pod_group_member,
    selected_source,
    source_job_name,
    source_selector,
)


def pod(labels: dict[str, str], annotations: dict[str, str] | None = None, gpus: Any = 8) -> dict[str, Any]:
    return {"metadata": {"name": "p-0", "labels": labels, "annotations": annotations or {}},
            "spec": {"containers": [{"name": "main", "resources": {"limits": {"nvidia.com/gpu": gpus}}}]}}


GROUP = {"kubegang.io/pod-group": "g", "kubegang.io/group-size": "4", "kubegang.io/queue": "team-a"}


def test_a_group_member_says_its_group_size_queue_topology_and_request() -> None:
    member = pod_group_member(pod(GROUP, {"kubegang.io/topology-required": "leaf"}))
    assert member is not None
    assert (member.group, member.size, member.queue, member.topology.required, member.requests.gpus) == \
        ("g", 4, "team-a", "leaf", 8)
    assert pod_group_member(pod({})) is None


@pytest.mark.parametrize(("labels", "annotations", "named"), [
    ({**GROUP, "kubegang.io/group-size": "four"}, {}, "metadata.labels[kubegang.io/group-size]"),
    ({**GROUP, "kubegang.io/group-size": "0"}, {}, "metadata.labels[kubegang.io/group-size]"),
    ({k: v for k, v in GROUP.items() if k != "kubegang.io/queue"}, {}, "metadata.labels[kubegang.io/queue]"),
    (GROUP, {"kubegang.io/topology-required": "rack"}, "metadata.annotations[kubegang.io/topology-required]"),
])
def test_a_bad_group_label_is_named(labels: dict[str, str], annotations: dict[str, str], named: str) -> None:
    with pytest.raises(SourceError) as exc:
        pod_group_member(pod(labels, annotations))
    assert str(exc.value).startswith(named)


def test_a_fractional_gpu_request_is_refused_with_the_field() -> None:
    with pytest.raises(PodGroupError, match=r"nvidia\.com/gpu"):
        pod_group_member(pod(GROUP, gpus="0.5"))


def test_which_source_a_pod_belongs_to_and_the_job_that_represents_it() -> None:
    assert selected_source({"kubegang.io/pod-group": "g", "ray.io/cluster": "rc"}) == (PodSourceKind.POD_GROUP, "g")
    assert selected_source({"ray.io/cluster": "rc"}) == (PodSourceKind.RAY_CLUSTER, "rc")
    assert selected_source({"app": "x"}) is None
    assert source_selector(PodSourceKind.RAY_CLUSTER, "rc") == {"ray.io/cluster": "rc"}
    assert source_job_name(PodSourceKind.RAY_CLUSTER, "rc") == "raycluster-rc"
    long = source_job_name(PodSourceKind.POD_GROUP, "x" * 300)
    assert len(long) == 253 and long != source_job_name(PodSourceKind.POD_GROUP, "x" * 299)
    assert job_name_of("raycluster/rc") == "raycluster-rc" == job_name_of("rayclusters/rc")
    assert job_name_of("gpujob/train") == "train" == job_name_of("train")
    with pytest.raises(ValueError, match="'deployment/rc': expected a GPUJob name"):
        job_name_of("deployment/rc")
    assert job_name_of("podgroup/workers") == "podgroup-workers"
    assert job_name_of("pretrain") == "pretrain"


def test_the_preferred_topology_annotation_is_read_and_a_bad_one_is_named() -> None:
    member = pod_group_member(pod(GROUP, {"kubegang.io/topology-required": "spine",
                                          "kubegang.io/topology-preferred": "leaf"}))
    assert member is not None and (member.topology.required, member.topology.preferred) == ("spine", "leaf")
    with pytest.raises(SourceError) as exc:
        pod_group_member(pod(GROUP, {"kubegang.io/topology-preferred": "rack"}))
    assert str(exc.value).startswith("metadata.annotations[kubegang.io/topology-preferred]"), exc.value
